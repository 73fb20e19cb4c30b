//! Where the `envoy-types` package cargo resolved for this crate keeps the descriptors its
//! types were generated from (`src/generated/types.bin`). envoy-types has no `links` key, so
//! no build script could be told where it is; `cargo metadata` can.

use std::path::{Path, PathBuf};

/// The path of `envoy-types`' `src/generated/types.bin`.
///
/// Offline: a test never downloads. `cargo metadata` reads the manifest of every package of
/// the workspace's graph for this machine's platform, some of which no build of this crate
/// needs; the suite (scripts/test.d/39-server.sh) fetches them first, as an install step.
pub fn descriptors_path() -> PathBuf {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc names its host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata --offline failed (run `cargo fetch --locked` first): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "envoy-types")
        .expect("envoy-types is a dependency")["manifest_path"]
        .as_str()
        .unwrap()
        .to_string();
    Path::new(&manifest)
        .parent()
        .unwrap()
        .join("src/generated/types.bin")
}
