//! The lab on its own, without nri-trace: a scenario runs against the
//! real private runtime and must show, in its ground truth, what it
//! intends; afterwards `lab down` must have left no process, mount or
//! cgroup behind. Every scenario is checked the same way, with nri-trace
//! watching, by tests/tests/trace_lab/ (see the note at the end).
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

// Every other scenario runs in CI through tests/tests/trace_lab/, on
// containerd 1.7, containerd 2.1 and CRI-O 1.36.3 alike: each traced run
// is this scenario run (the same `scenario::run_observed`, its `verify`,
// and the runtime and leftover checks of `scenario::after_run_problems`)
// with nri-trace watching, so a second, unobserved run of the same
// scenario here only cost CI time (about 3 minutes, load alone 84 s).
// `happy` stays as the lab's own check without nri-trace;
// `cargo xtask lab --runtime R run NAME` runs any scenario by hand.
