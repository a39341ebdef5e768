//! What the benchmarks share: reading back criterion's estimates for the
//! summary each prints after its benchmarks.

use std::{
    env, fs,
    path::{Path, PathBuf},
    time::SystemTime,
};

/// Where criterion writes (its own rule, minus `cargo metadata`: this
/// workspace's target directory).
pub(crate) fn criterion_dir() -> PathBuf {
    if let Some(d) = env::var_os("CRITERION_HOME") {
        return d.into();
    }
    if let Some(d) = env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d).join("criterion");
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion")
}

/// criterion's median (ns per run) of the benchmark `id` (its path under
/// the criterion directory: group, name, input...), if this run (since
/// `since`) wrote it.
pub(crate) fn median_ns(id: &[&str], since: SystemTime) -> Option<f64> {
    let mut p = criterion_dir();
    p.extend(id);
    let p = p.join("new/estimates.json");
    if fs::metadata(&p).and_then(|m| m.modified()).ok()? < since {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&p).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}
