//! Every lab scenario runs against the real private containerd and must
//! show, in its ground truth, what it intends; afterwards `lab down` must
//! have left no process, mount or cgroup behind.
//!
//! Needs root and the lab (containerd from trixie): under CI=true a missing
//! requirement fails the test; elsewhere the test says why it skips.

use std::path::PathBuf;

use nri_trace_lab::{
    labctl::{self, Lab, Runtime},
    scenario::{self, Bins},
};

fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

fn guard(name: &str) -> bool {
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return true;
    }
    let why = format!("not running as root (euid {euid}): the lab runs a private containerd");
    assert!(!ci(), "{name}: {why}");
    eprintln!("skipping {name}: {why}");
    false
}

/// Scenario `name` on the runtime of NRI_TRACE_LAB_RUNTIME (default 1.7).
fn run_scenario(name: &str) {
    run_scenario_on(name, Lab::from_env().runtime);
}

/// Scenario `name` on `runtime`; its plugins' Configure records must name
/// that runtime's version, and `down` must leave nothing of it behind.
fn run_scenario_on(name: &str, runtime: Runtime) {
    if !guard(name) {
        return;
    }
    let _lock = labctl::lock().expect("lab lock");
    let mut lab = Lab::from_env();
    lab.runtime = runtime;
    lab.install().expect("lab install");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("lab")
        .join(name);
    let bins = Bins {
        driver: env!("CARGO_BIN_EXE_cri-driver").into(),
        plugin: env!("CARGO_BIN_EXE_nri-test-plugin").into(),
    };
    let facts = scenario::run(name, lab.clone(), bins, &out)
        .unwrap_or_else(|e| panic!("scenario {name}: {e:#}"));
    eprintln!("scenario {name}:");
    for f in &facts {
        eprintln!("  - {f}");
    }
    assert!(!facts.is_empty());
    // Configured by this runtime, and nothing of the run left behind.
    let problems = scenario::after_run_problems(name, &lab, &out.join("truth.ndjson"))
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn happy() {
    run_scenario("happy");
}

#[test]
fn slow_plugin() {
    run_scenario("slow-plugin");
}

#[test]
fn plugin_timeout() {
    run_scenario("plugin-timeout");
}

#[test]
fn teardown_error() {
    run_scenario("teardown-error");
}

#[test]
fn late_registration() {
    run_scenario("late-registration");
}

#[test]
fn cri_deadline_retry() {
    run_scenario("cri-deadline-retry");
}

#[test]
fn ignore_sigterm() {
    run_scenario("ignore-sigterm");
}

#[test]
fn busy_mount() {
    run_scenario("busy-mount");
}

#[test]
fn unkillable() {
    run_scenario("unkillable");
}

#[test]
fn hung_teardown_hook() {
    run_scenario("hung-teardown-hook");
}

#[test]
fn hung_teardown_client_gone() {
    run_scenario("hung-teardown-client-gone");
}

#[test]
fn load() {
    run_scenario("load");
}

#[test]
fn upstream_witness() {
    run_scenario("upstream-witness");
}

#[test]
fn plugins_before_attach() {
    run_scenario("plugins-before-attach");
}

#[test]
fn netns_teardown() {
    run_scenario("netns-teardown");
}

// containerd 2.1 and CRI-O 1.33.13 (lab/crio.sh) run in CI through
// tests/tests/trace_lab.rs (`ctrd21_trace_*`, `crio_trace_*`): each traced
// run is this scenario run (the same `scenario::run_observed`, its
// `verify`, and the runtime and leftover checks of
// `scenario::after_run_problems`) with nri-trace watching.
// NRI_TRACE_LAB_RUNTIME=containerd-2.1 or crio runs every test above on
// that runtime.
