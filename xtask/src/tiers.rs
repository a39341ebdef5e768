//! `cargo xtask test --tier T`: the suite in parts, so one part runs
//! locally; CI (no `--tier`) runs every tier, in the order of [`Tier`].
//!
//! Which test binary is in which tier is written here, and a unit test
//! checks that every test target of the workspace is in exactly one: a new
//! test file that nobody placed fails it, rather than silently running in
//! no tier.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::cargo;

/// A part of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Tier {
    /// `cargo fmt --check` and clippy (warnings denied).
    Lint,
    /// Unit tests and the integration tests that need no root, eBPF or lab.
    Unit,
    /// The root/eBPF/lab tests (the captures, the lab's runtimes, dist).
    Lab,
    /// The static binary on Debian's kernels in qemu (tests/tests/kernels.rs).
    Kernels,
    /// A short smoke of every fuzz target.
    Fuzz,
}

/// nri-trace-tests' (tests/tests/) binaries of the unit tier: they read
/// committed fixtures or talk to in-process peers. One binary
/// (tests/tests/offline/main.rs), its modules the former nine: each
/// binary is a link of nri-trace and its dependencies of its own.
const UNIT_TESTS: &[&str] = &["offline"];

/// nri-trace-tests' binaries of the lab tier: root, the eBPF object, the
/// lab's runtimes, or the dist binary.
const LAB_TESTS: &[&str] = &[
    "capture",
    "cluster_lab",
    "dist",
    "explain_live_lab",
    "faults_lab",
    "nri_lab",
    "nri_rate",
    "prometheus_lab",
    "recorder_lab",
    "sandbox_probes",
    "trace_lab",
];

/// nri-trace-tests' binaries of the kernels tier.
const KERNEL_TESTS: &[&str] = &["kernels"];

/// nri-trace-tests' binaries that run the dist binary
/// (NRI_TRACE_DIST_BIN): last in their tier, once it is built.
const DIST_TESTS: &[&str] = &["cluster_lab", "dist", "kernels"];

/// Whether the tiers need the dist binary.
pub(crate) fn need_dist(tiers: &[Tier]) -> bool {
    tiers.iter().any(|t| matches!(t, Tier::Lab | Tier::Kernels))
}

/// A test executable of the one build ([`build_tests`]).
pub(crate) struct TestBin {
    tier: Tier,
    /// `PACKAGE KIND NAME`, as said when it runs.
    label: String,
    exe: PathBuf,
    /// Its package's directory: cargo runs a test there.
    dir: PathBuf,
    /// Whether it runs the dist binary ([`DIST_TESTS`]).
    dist: bool,
}

impl TestBin {
    pub(crate) fn tier(&self) -> Tier {
        self.tier
    }

    pub(crate) fn runs_dist(&self) -> bool {
        self.dist
    }
}

/// Build every test executable of the workspace once, with `envs` (the
/// eBPF object is embedded at build time): `cargo test --workspace
/// --all-targets --no-run`. Why one build and not a `cargo test` per
/// tier: each selection of packages unifies features anew, and the
/// stop-36 CI run compiled nri-trace three times in the test profile
/// (2m55s, 1m23s and 1m47s of its 30 minutes before the first lab test).
pub(crate) fn build_tests(envs: &[(&str, &Path)]) -> Result<Vec<TestBin>> {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--workspace",
        "--all-targets",
        "--no-run",
        "--message-format",
        "json-render-diagnostics",
    ])
    .stdout(Stdio::piped());
    // Under CI the dependencies' build is kept across clones
    // (build_cache.rs); each member is compiled once per run there, so
    // rustc's incremental state would be written for nothing (measured:
    // 2 min 13 s with it, 1 min 43 s without, and 6.3 GiB against 3.8).
    if let Some(root) = crate::build_cache::root() {
        let dir = root.join("test");
        crate::build_cache::forget_members(
            &dir,
            &crate::workspace_root().join("Cargo.toml"),
            crate::build_cache::WORKSPACE_MEMBERS,
            &[],
        )?;
        // The tests' CARGO_TARGET_TMPDIR: an earlier run's outputs go
        // (cargo makes it again).
        let tmp = dir.join("tmp");
        match std::fs::remove_dir_all(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", tmp.display()));
            }
            _ => {}
        }
        cmd.arg("--target-dir")
            .arg(dir)
            .env("CARGO_INCREMENTAL", "0");
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd
        .spawn()
        .and_then(std::process::Child::wait_with_output)
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!(
            "building the tests (cargo test --workspace --all-targets --no-run) failed: {}",
            out.status
        );
    }
    let mut bins = Vec::new();
    for line in out.stdout.split(|&b| b == b'\n') {
        let Ok(msg) = serde_json::from_slice::<Artifact>(line) else {
            continue;
        };
        if msg.reason != "compiler-artifact" || !msg.profile.test {
            continue;
        }
        let Some(exe) = msg.executable else { continue };
        let package = package_name(&msg.package_id);
        let kind = msg.target.kind.first().cloned().unwrap_or_default();
        let tier = tier_of(&package, &kind, &msg.target.name)?;
        let dir = msg
            .manifest_path
            .parent()
            .map_or_else(crate::workspace_root, Path::to_path_buf);
        bins.push(TestBin {
            tier,
            dist: package == "nri-trace-tests"
                && kind == "test"
                && DIST_TESTS.contains(&msg.target.name.as_str()),
            label: format!("{package} {kind} {}", msg.target.name),
            exe,
            dir,
        });
    }
    bins.sort_by(|a, b| a.label.cmp(&b.label));
    Ok(bins)
}

/// The parts of cargo's `compiler-artifact` message used here (cargo's
/// "JSON messages" reference).
#[derive(serde::Deserialize)]
struct Artifact {
    reason: String,
    #[serde(default)]
    package_id: String,
    #[serde(default)]
    manifest_path: PathBuf,
    target: ArtifactTarget,
    profile: ArtifactProfile,
    executable: Option<PathBuf>,
}

#[derive(serde::Deserialize)]
struct ArtifactTarget {
    kind: Vec<String>,
    name: String,
}

#[derive(serde::Deserialize)]
struct ArtifactProfile {
    test: bool,
}

/// The package name of a cargo package id (a package id spec):
/// `path+file:///w/tests#nri-trace-tests@0.1.0`, or
/// `path+file:///w/nri-trace#0.1.0` when the name is the directory's; or
/// the older `nri-trace-tests 0.1.0 (path+file://...)`.
fn package_name(id: &str) -> String {
    if let Some((url, rest)) = id.rsplit_once('#') {
        return match rest.split_once('@') {
            Some((name, _)) => name.to_owned(),
            None => url.rsplit('/').next().unwrap_or(url).to_owned(),
        };
    }
    id.split(' ').next().unwrap_or(id).to_owned()
}

/// The tier of a test executable: nri-trace-tests' by the lists above,
/// the lab crate's integration tests in the lab tier (they run its
/// runtime-free peers against each other, and scenarios.rs the lab),
/// every other unit test, integration test and bench (criterion's test
/// mode) in the unit tier.
fn tier_of(package: &str, kind: &str, name: &str) -> Result<Tier> {
    Ok(match (package, kind) {
        ("nri-trace-tests", "test") => {
            if UNIT_TESTS.contains(&name) {
                Tier::Unit
            } else if LAB_TESTS.contains(&name) {
                Tier::Lab
            } else if KERNEL_TESTS.contains(&name) {
                Tier::Kernels
            } else {
                bail!("tests/tests/{name} is in no tier: place it in xtask/src/tiers.rs")
            }
        }
        ("nri-trace-lab", "test") => Tier::Lab,
        _ => Tier::Unit,
    })
}

/// A failed test executable: what it is, and its run.
pub(crate) type Failed = (String, crate::test_failures::Run);

/// Run the executables of `tier` (not lint or fuzz) that run the dist
/// binary, or those that do not (`dist`), as cargo would (in their
/// package's directory, `extra` as their arguments), every one even when
/// one fails, with `envs` (the eBPF object, the dist binary); the failed.
pub(crate) fn run_bins(
    tier: Tier,
    bins: &[TestBin],
    dist: bool,
    envs: &[(&str, &Path)],
    extra: &[String],
) -> Result<Vec<Failed>> {
    let mut failed = Vec::new();
    for b in bins
        .iter()
        .filter(|b| b.tier == tier && b.runs_dist() == dist)
    {
        println!("     Running {} ({})", b.label, b.exe.display());
        let mut cmd = Command::new(&b.exe);
        cmd.args(extra)
            .current_dir(&b.dir)
            .env("CARGO_MANIFEST_DIR", &b.dir);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let run = crate::test_failures::run(&mut cmd)?;
        if !run.status.success() {
            failed.push((format!("{} ({tier:?} tier)", b.label), run));
        }
    }
    Ok(failed)
}

/// The tier's error if any of its executables failed, after their panic
/// messages.
pub(crate) fn fail_tier(tier: Tier, failed: &[Failed]) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    crate::test_failures::print_failed(failed);
    bail!(
        "{} test executable(s) of the {tier:?} tier failed: {}",
        failed.len(),
        failed
            .iter()
            .map(|(w, _)| w.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Cargo's auto-discovered test targets of tests/tests/: `NAME.rs`, and
    /// `NAME/main.rs` (other directories are modules shared by them).
    fn test_targets(dir: &Path) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                let stem = p.file_stem()?.to_str()?.to_owned();
                if p.is_dir() {
                    p.join("main.rs").exists().then_some(stem)
                } else {
                    (p.extension()? == "rs").then_some(stem)
                }
            })
            .collect()
    }

    #[test]
    fn package_names_of_ids() {
        for (id, name) in [
            (
                "path+file:///w/tests#nri-trace-tests@0.1.0",
                "nri-trace-tests",
            ),
            ("path+file:///w/nri-trace#0.1.0", "nri-trace"),
            ("nri-trace-lab 0.1.0 (path+file:///w/lab)", "nri-trace-lab"),
        ] {
            assert_eq!(package_name(id), name);
        }
    }

    #[test]
    fn every_test_binary_is_in_exactly_one_tier() {
        let got = test_targets(&crate::workspace_root().join("tests/tests"));
        let mut placed = BTreeSet::new();
        for name in UNIT_TESTS.iter().chain(LAB_TESTS).chain(KERNEL_TESTS) {
            assert!(placed.insert(name.to_string()), "{name} is in two tiers");
        }
        assert_eq!(
            got, placed,
            "tests/tests/ vs the tiers in xtask/src/tiers.rs: place every test binary in one"
        );
    }
}
