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
//!
//! The test build is kept too (ci25: 4 min 23 s, nearly all of it the
//! 286 dependencies; 1 min 43 s with them kept, docs/benchmarks.md, "The
//! suite"). Before each build into a kept directory, [`forget_members`]
//! removes the workspace's own crates from it.

use std::{
    env,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::{cargo, run, workspace_root};

/// The root of the kept target directories, if any (see the module).
pub(crate) fn root() -> Option<PathBuf> {
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

/// Before a build into the kept directory `dir`: remove from it what it
/// holds of the packages `members` (the workspace's own, of the build
/// `manifest`; `cargo clean -p`, with the build's `--target T` and
/// `--release` in `args`: without them it cleans the host's dev
/// profile only); the dependencies stay. Why: cargo takes a path package as fresh when none
/// of the files its dep-info lists is newer than its outputs, and those
/// paths are relative to the package, as its hash is (above): a checkout
/// whose files are older than another clone's build into the same
/// directory (a developer's tree run with CI=true after a CI run) was
/// handed that clone's artifacts (seen: a clone made before another
/// clone's build rebuilt 2 of the 5 members). A fresh clone's files are
/// newer, so CI rebuilt them anyway: this costs it only the removal.
pub(crate) fn forget_members(
    dir: &Path,
    manifest: &Path,
    members: &[&str],
    args: &[&str],
) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["clean", "-q", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(dir)
        .args(args);
    for m in members {
        cmd.args(["-p", m]);
    }
    run(&mut cmd).with_context(|| {
        format!(
            "removing {} from the kept build {} (remove the directory to start it afresh)",
            members.join(", "),
            dir.display()
        )
    })
}

/// [`forget_members`] if `dir` is a kept directory (under [`root`]).
pub(crate) fn forget_members_if_kept(
    dir: &Path,
    manifest: &Path,
    members: &[&str],
    args: &[&str],
) -> Result<()> {
    if root().is_some_and(|r| dir.starts_with(r)) {
        forget_members(dir, manifest, members, args)?;
    }
    Ok(())
}

/// The workspace's members (Cargo.toml's `[workspace] members`), by name.
pub(crate) const WORKSPACE_MEMBERS: &[&str] = &[
    "nri-trace",
    "nri-trace-common",
    "nri-trace-lab",
    "nri-trace-tests",
    "xtask",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// [`WORKSPACE_MEMBERS`] is what Cargo.toml's `members` name: each
    /// member directory's package.
    #[test]
    fn workspace_members_are_cargo_tomls() {
        let root = workspace_root();
        let toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let line = toml
            .lines()
            .find(|l| l.starts_with("members = ["))
            .expect("a members line");
        let mut got: Vec<String> = line
            .split('"')
            .skip(1)
            .step_by(2)
            .map(|dir| {
                let m = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
                m.lines()
                    .find_map(|l| l.strip_prefix("name = \""))
                    .and_then(|l| l.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("{dir}/Cargo.toml has no name"))
                    .to_owned()
            })
            .collect();
        got.sort();
        assert_eq!(got, WORKSPACE_MEMBERS);
    }
}
