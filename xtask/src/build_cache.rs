//! Target directories that outlive a clone.
//!
//! CI runs every suite in a fresh clone, so each run compiled the same
//! crates.io dependencies again: in ci11 (docs/benchmarks.md, "The
//! suite") the fuzz targets' instrumented build took 8.4 min, the static
//! dist binary 4.6 and clippy 2.6, nearly all of it dependencies that had
//! not changed. Under `CI=true` those three builds use target directories
//! under the lab's directory (NRI_TRACE_LAB_DIR, /var/lib/nri-trace-lab),
//! beside the lab's own builds, so a run after another builds only the
//! workspace's crates; cargo's fingerprints decide what is stale, as in
//! any target directory, and its lock serializes two runs. Workspace
//! members are hashed by their path relative to the workspace, so clones
//! at other paths share the artifacts instead of piling up their own.
//! Elsewhere (a developer's `cargo xtask test`) the workspace's target/
//! holds them, as before. `NRI_TRACE_BUILD_CACHE=DIR` picks another
//! root, `NRI_TRACE_BUILD_CACHE=off` keeps them in target/.

use std::{env, path::PathBuf};

use crate::workspace_root;

/// The root of the kept target directories, if any (see the module).
fn root() -> Option<PathBuf> {
    match env::var("NRI_TRACE_BUILD_CACHE") {
        Ok(v) if v == "off" => None,
        Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => crate::under_ci().then(|| crate::lab::lab_dir().join("build-cache")),
    }
}

/// The target directory of the build `name`: kept under the cache root,
/// else `in_workspace` (relative to the workspace root).
pub(crate) fn target_dir(name: &str, in_workspace: &str) -> PathBuf {
    root().map_or_else(|| workspace_root().join(in_workspace), |r| r.join(name))
}
