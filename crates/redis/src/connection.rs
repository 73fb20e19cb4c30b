//! Connecting to Redis the way the link expects: one server behind redis-rs's connection
//! manager, or a Redis Cluster, as one type ([`Connection`]) that
//! [`RedisLimiter`](crate::RedisLimiter) and [`RedisRequests`](crate::RedisRequests) take.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

/// A connection to one Redis server or to a Redis Cluster. Cheap to clone.
#[derive(Clone)]
pub enum Connection {
    /// One server, reconnected by redis-rs's connection manager.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Connection {
    /// Connects to the server at `url`; fails when it does not answer within `timeout`
    /// (at least 2 s). `timeout` also bounds each later connection attempt and reply. One
    /// reconnect attempt after a drop: with the manager's default of six, backing off, a
    /// probe after an outage would wait out attempts that started while Redis was down.
    pub async fn single(url: &str, timeout: Duration) -> RedisResult<Connection> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let client = redis::Client::open(url)?;
        let manager = client.get_connection_manager_with_config(config);
        Ok(Connection::Single(connecting(timeout, manager).await?))
    }

    /// Connects to the Redis Cluster that `nodes` (any of its primaries, each a URL) belong
    /// to; otherwise as [`Connection::single`].
    pub async fn cluster(nodes: &[String], timeout: Duration) -> RedisResult<Connection> {
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1)
            .build()?;
        let conn = connecting(timeout, client.get_async_connection()).await?;
        Ok(Connection::Cluster(conn))
    }
}

/// A cluster's nodes written as one string: comma-separated, each a URL or `host:port`.
pub fn cluster_nodes(nodes: &str) -> Vec<String> {
    nodes
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| match n.contains("://") {
            true => n.to_string(),
            false => format!("redis://{n}/"),
        })
        .collect()
}

/// `connect`, failed as an I/O error when it takes longer than `timeout` (at least 2 s: a
/// first connection also resolves and handshakes).
async fn connecting<T>(
    timeout: Duration,
    connect: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(timeout.max(Duration::from_secs(2)), connect).await {
        Ok(r) => r,
        Err(_) => Err(RedisError::from((ErrorKind::Io, "connect timed out"))),
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_nodes;

    #[test]
    fn cluster_nodes_take_urls_and_bare_host_ports_and_skip_empty_entries() {
        assert_eq!(
            cluster_nodes("a:1, redis://b:2/,,c:3"),
            ["redis://a:1/", "redis://b:2/", "redis://c:3/"]
        );
    }
}
