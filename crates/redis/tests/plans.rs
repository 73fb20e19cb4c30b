//! Plans on Redis by the scripts (a real redis-server without the module, started here on
//! a free loopback port): the plan vectors, spend kept across plan changes, overrides seen
//! by every client at its next check, and a storm of one key from two processes. The same
//! tests run by the module in crates/redis-module/tests/plans.rs.

mod support;

#[path = "support/plans.rs"]
mod plans;

use support::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_vectors_replay_on_the_scripts() {
    let server = Server::start();
    plans::replay_vectors(&server.url(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_pro_free_within_a_minute_keeps_the_spend() {
    let server = Server::start();
    plans::free_pro_free_keeps_spend(&server.url(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_set_by_one_client_applies_at_another_clients_next_check() {
    let server = Server::start();
    plans::override_applies_at_the_next_check(&server.url(), false, false).await;
}

#[test]
fn checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit() {
    let server = Server::start();
    plans::storm_across_two_processes(&server.url(), false, "plan_storm_child");
}

/// The child process of the storm test. Run by it only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit"]
async fn plan_storm_child() {
    plans::storm_child().await;
}
