//! `cargo xtask test --tier T`: the suite in parts, so one part runs
//! locally; CI (no `--tier`) runs every tier, in the order of [`Tier`].
//!
//! Which test binary is in which tier is written here, and a unit test
//! checks that every test target of the workspace is in exactly one: a new
//! test file that nobody placed fails it, rather than silently running in
//! no tier.

use std::path::Path;

use anyhow::{Context, Result};
use clap::ValueEnum;

use crate::{cargo, run};

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
/// committed fixtures or talk to in-process peers.
const UNIT_TESTS: &[&str] = &[
    "architecture",
    "cli",
    "cri_replay",
    "nri_replay",
    "nri_wire_versions",
    "record_file",
    "recorder",
    "trace_replay",
    "tui_pty",
];

/// nri-trace-tests' binaries of the lab tier: root, the eBPF object, the
/// lab's runtimes, or the dist binary.
const LAB_TESTS: &[&str] = &[
    "capture",
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

/// Whether the tiers need the dist binary (NRI_TRACE_DIST_BIN).
pub(crate) fn need_dist(tiers: &[Tier]) -> bool {
    tiers.iter().any(|t| matches!(t, Tier::Lab | Tier::Kernels))
}

/// `cargo test` of one test tier (not lint or fuzz), `extra` after `--`.
/// `envs`: the eBPF object and dist binary for the tests that use them.
pub(crate) fn run_tests(tier: Tier, envs: &[(&str, &Path)], extra: &[String]) -> Result<()> {
    let invocations: Vec<Vec<String>> = match tier {
        Tier::Unit => vec![
            // Everything but the lab's and the root tests' crates, then
            // those crates' own unit tests and the tests' unit binaries.
            args(&[
                "--workspace",
                "--all-targets",
                "--exclude",
                "nri-trace-lab",
                "--exclude",
                "nri-trace-tests",
            ]),
            args(&["-p", "nri-trace-lab", "--lib", "--bins"]),
            tests_of(UNIT_TESTS),
        ],
        Tier::Lab => vec![
            args(&["-p", "nri-trace-lab", "--tests"]),
            tests_of(LAB_TESTS),
        ],
        Tier::Kernels => vec![tests_of(KERNEL_TESTS)],
        Tier::Lint | Tier::Fuzz => return Ok(()),
    };
    for inv in invocations {
        let mut cmd = cargo();
        cmd.arg("test").args(&inv);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        if !extra.is_empty() {
            cmd.arg("--").args(extra);
        }
        run(&mut cmd).with_context(|| format!("cargo test {} ({tier:?} tier)", inv.join(" ")))?;
    }
    Ok(())
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(ToString::to_string).collect()
}

fn tests_of(names: &[&str]) -> Vec<String> {
    let mut v = args(&["-p", "nri-trace-tests"]);
    for n in names {
        v.push("--test".into());
        v.push((*n).into());
    }
    v
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
