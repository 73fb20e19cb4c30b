//! `tollgate-counts-tower` built with tollgate-tower's `metrics` (this crate's feature
//! `tower-metered`): the same source (`src/tower.rs` says what it counts), a binary of its
//! own so that the build without the feature stays what `tower-1` and `tower-10k` count.

use std::process::ExitCode;

#[path = "tower.rs"]
mod tower;

fn main() -> ExitCode {
    tower::main()
}
