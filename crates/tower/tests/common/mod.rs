//! What the tests share: serving an axum app on a loopback port, and a store that tells
//! the test when the layer gives slots back.
#![allow(dead_code)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::sync::mpsc;
use tollgate::store::Limits;
use tollgate_tower::{Builder, Checked, Memory, Store};

/// The in-memory store, reporting each release (its key) on a channel: the test waits for
/// a release where the server gives slots back on its own time (a connection torn down
/// after a panic, a client gone), instead of sleeping.
pub struct Watched {
    inner: Memory,
    releases: mpsc::UnboundedSender<String>,
}

impl Store for Watched {
    type Error = <Memory as Store>::Error;

    fn limits(&self) -> &Limits {
        self.inner.limits()
    }

    fn check(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, Self::Error>> + Send {
        self.inner.check(key, tenant, cost)
    }

    fn check_now(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> Option<Result<Checked, Self::Error>> {
        self.inner.check_now(key, tenant, cost)
    }

    fn release(&self, key: &str, cost: u64) {
        self.inner.release(key, cost);
        let _ = self.releases.send(key.to_string());
    }
}

/// A builder whose policies are on [`Watched`] stores, and the channel of their releases.
pub fn watched() -> (Builder<Watched>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let builder = Builder::new(move |_, limits| {
        Memory::new(limits, NonZeroUsize::new(1000).unwrap()).map(|inner| Watched {
            inner,
            releases: tx.clone(),
        })
    });
    (builder, rx)
}

/// The releases reported so far (without waiting).
pub fn drain(rx: &mut mpsc::UnboundedReceiver<String>) -> usize {
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    n
}

/// Waits for `what` to happen (a release, a body dropped). The deadline only turns a slot
/// that is never given back (the bug these tests look for) into a failure instead of a
/// hung test; nothing is measured.
pub async fn eventually<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} never happened"))
}

/// Serves `app` on a free port of `ip` with each connection's peer address as connect info
/// (what the layer keys by), until the test ends; the server's address.
pub async fn serve(app: axum::Router, ip: IpAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    addr
}
