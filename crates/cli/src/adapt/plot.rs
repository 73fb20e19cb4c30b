//! An SVG of one scenario: the limit (top) and the 1-second p99 latency of the answers
//! (bottom) over time, one line per controller.

use std::fmt::Write as _;

use crate::adapt::scenario::Report;
use crate::adapt::sim::TICK;

const WIDTH: f64 = 900.0;
const PANEL: f64 = 220.0;
const LEFT: f64 = 60.0;
const COLOURS: [&str; 5] = ["#d62728", "#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd"];

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str) {
    let _ = write!(
        out,
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\" points=\""
    );
    for (x, y) in points {
        let _ = write!(out, "{x:.1},{y:.1} ");
    }
    let _ = writeln!(out, "\"/>");
}

/// The SVG document for `report`.
pub fn svg(report: &Report) -> String {
    let ticks = report.lines.first().map_or(0, |l| l.ticks.len()).max(1);
    let secs = ticks as f64 * TICK as f64 / 1e9;
    let x = |i: f64| LEFT + i / ticks as f64 * (WIDTH - LEFT - 10.0);
    let max_limit = report
        .lines
        .iter()
        .flat_map(|l| l.ticks.iter().map(|t| t.limit))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let per_sec = (1e9 / TICK as f64) as usize;
    let p99s: Vec<Vec<f64>> = report
        .lines
        .iter()
        .map(|l| {
            l.ticks
                .chunks(per_sec)
                .map(|c| {
                    let mut v: Vec<u32> =
                        c.iter().flat_map(|t| t.latencies.iter().copied()).collect();
                    if v.is_empty() {
                        return 0.0;
                    }
                    let i = (v.len() * 99).div_ceil(100).clamp(1, v.len()) - 1;
                    *v.select_nth_unstable(i).1 as f64 / 1000.0
                })
                .collect()
        })
        .collect();
    let max_p99 = p99s.iter().flatten().cloned().fold(1.0, f64::max);
    let height = 2.0 * PANEL + 90.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"14\">scenario {}: {} ({secs:.0} s)</text>",
        report.scenario.id, report.scenario.title
    );
    for (panel, label, max) in [(0, "limit", max_limit), (1, "p99 ms (1 s)", max_p99)] {
        let top = 25.0 + panel as f64 * (PANEL + 30.0);
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{PANEL}\" fill=\"none\" stroke=\"#ccc\"/>",
            WIDTH - LEFT - 10.0
        );
        let _ = writeln!(out, "<text x=\"4\" y=\"{}\">{label}</text>", top + 12.0);
        let _ = writeln!(out, "<text x=\"4\" y=\"{}\">{max:.0}</text>", top + 26.0);
        let _ = writeln!(out, "<text x=\"4\" y=\"{}\">0</text>", top + PANEL);
        for (i, line) in report.lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points: Vec<(f64, f64)> = if panel == 0 {
                line.ticks
                    .iter()
                    .enumerate()
                    .map(|(j, t)| (x(j as f64), top + PANEL - t.limit as f64 / max * PANEL))
                    .collect()
            } else {
                p99s[i]
                    .iter()
                    .enumerate()
                    .map(|(j, p)| {
                        (
                            x(((j * per_sec) + per_sec / 2) as f64),
                            top + PANEL - p / max * PANEL,
                        )
                    })
                    .collect()
            };
            polyline(&mut out, &points, colour);
        }
    }
    for (i, line) in report.lines.iter().enumerate() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>",
            LEFT + i as f64 * 110.0,
            height - 8.0,
            COLOURS[i % COLOURS.len()],
            line.controller
        );
    }
    let _ = writeln!(out, "</svg>");
    out
}
