//! Plans decided by the module (`TOLLGATE.PLAN`, loaded with `TESTCLOCK` into a real
//! redis-server started here): the tests the scripts pass in crates/redis/tests/plans.rs,
//! and a fleet that mixes the two ways on one caller.

#[path = "../../redis/tests/support/mod.rs"]
mod support;

#[path = "../../redis/tests/support/plans.rs"]
mod plans;

use std::path::PathBuf;

use support::Server;

/// The module built next to this test (target/<profile>/libtollgate_redis_module.so).
fn module() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libtollgate_redis_module.so");
    assert!(
        so.exists(),
        "{} (cargo build -p tollgate-redis-module)",
        so.display()
    );
    so
}

fn with_module() -> Server {
    let so = module();
    Server::with_args(&[
        "--save",
        "",
        "--loadmodule",
        so.to_str().unwrap(),
        "TESTCLOCK",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_vectors_replay_in_the_module() {
    let server = with_module();
    plans::replay_vectors(&server.url(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_pro_free_within_a_minute_keeps_the_spend_in_the_module() {
    let server = with_module();
    plans::free_pro_free_keeps_spend(&server.url(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_stack_takes_the_nearest_window_and_drops_the_spare_slot_in_the_module() {
    let server = with_module();
    plans::a_shorter_stack_takes_the_nearest_window_and_drops_the_spare_slot(&server.url(), true)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_set_by_one_client_applies_at_another_clients_next_check_in_the_module() {
    let server = with_module();
    plans::override_applies_at_the_next_check(&server.url(), true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_and_module_clients_share_a_caller_and_its_override() {
    let server = with_module();
    // The module decides the checks, the scripts' client sets the override; then the other
    // way round.
    plans::override_applies_at_the_next_check(&server.url(), true, false).await;
    server.cli(&["FLUSHALL"]);
    plans::override_applies_at_the_next_check(&server.url(), false, true).await;
}

#[test]
fn checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit_in_the_module() {
    let server = with_module();
    plans::storm_across_two_processes(&server.url(), true, "plan_storm_child");
}

/// The child process of the storm test. Run by it only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit_in_the_module"]
async fn plan_storm_child() {
    plans::storm_child().await;
}
