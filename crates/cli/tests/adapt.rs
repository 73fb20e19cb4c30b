//! The adaptive concurrency simulator's scenarios (issue 42's "done when"): tollgate's
//! controller meets each scenario's bounds, and no baseline (a static limit at the knee,
//! Netflix's Gradient2 and Vegas, Envoy's gradient controller) meets more of them or
//! serves more within the latency bound. Virtual time: a run is a few seconds of CPU.

use tollgate_cli::adapt::scenario::{run_scenario, scenarios, Line, Report};

const SEED: u64 = 1;

fn report(id: &str) -> Report {
    let scenario = scenarios()
        .into_iter()
        .find(|s| s.id == id)
        .expect("the scenario exists");
    run_scenario(&scenario, SEED).expect("the simulator's parameters are valid")
}

fn passed(line: &Line) -> usize {
    line.checks.iter().filter(|c| c.pass).count()
}

/// tollgate (the first line) meets at least as many bounds as every baseline, and serves
/// at least as much as any baseline that meets the latency bounds too (within 0.5
/// percentage point: a static limit at the knee loses a little to Poisson gaps, and
/// wins a little at light load).
fn as_good_as_every_baseline(report: &Report) {
    let (tollgate, baselines) = report.lines.split_first().expect("lines");
    assert_eq!(tollgate.controller, "tollgate");
    for b in baselines {
        assert!(
            passed(b) <= passed(tollgate),
            "{} meets more bounds than tollgate:\n{:#?}",
            b.controller,
            b.checks
        );
        if b.passes() {
            assert!(
                tollgate.goodput + 0.5 >= b.goodput,
                "{} serves {:.1}%, tollgate {:.1}%",
                b.controller,
                b.goodput,
                tollgate.goodput
            );
        }
    }
}

fn assert_passes(line: &Line) {
    assert!(line.passes(), "{}: {:#?}", line.controller, line.checks);
}

#[test]
fn twice_the_capacity_from_a_limit_of_20_settles_at_the_knee() {
    let r = report("1");
    assert_passes(&r.lines[0]);
    assert!(r.lines[0].converge.is_some_and(|s| s <= 10.0));
    as_good_as_every_baseline(&r);
}

#[test]
fn twice_the_capacity_with_exponential_service_settles_at_the_knee() {
    let r = report("1x");
    assert_passes(&r.lines[0]);
    as_good_as_every_baseline(&r);
}

#[test]
fn capacity_halving_and_returning_is_followed_within_seconds() {
    let r = report("2");
    assert_passes(&r.lines[0]);
    as_good_as_every_baseline(&r);
}

#[test]
fn modest_overload_for_ten_minutes_does_not_creep() {
    let r = report("3");
    assert_passes(&r.lines[0]);
    as_good_as_every_baseline(&r);
}

#[test]
fn half_load_with_noisy_service_sheds_nothing() {
    let r = report("4");
    assert_passes(&r.lines[0]);
    as_good_as_every_baseline(&r);
}

#[test]
fn a_hanging_server_drives_the_limit_to_its_floor() {
    let r = report("5");
    assert_passes(&r.lines[0]);
    as_good_as_every_baseline(&r);
}
