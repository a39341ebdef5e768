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
    truth::{self, PluginEvent, Truth},
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

/// Sandbox and container ids the scenario's driver created.
fn ids(path: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = truth::read(path)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|t| match t {
            Truth::Cri { pod, container, .. } => {
                vec![pod.and_then(|p| p.sandbox_id), container.and_then(|c| c.id)]
            }
            _ => vec![],
        })
        .flatten()
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Scenario `name` on the runtime of NRI_TRACE_LAB_RUNTIME (default 1.7).
fn run_scenario(name: &str) {
    run_scenario_on(name, Lab::from_env().runtime);
}

/// Scenario `name` on `runtime`; its plugins' Configure records must name
/// that runtime's version.
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
    let want = match runtime {
        Runtime::Containerd17 => "1.7.",
        Runtime::Containerd21 => "2.1.",
        Runtime::CriO => "1.33.",
    };
    for t in truth::read(&out.join("truth.ndjson")).expect("truth") {
        if let Truth::Plugin {
            plugin,
            what: PluginEvent::Configured { version, .. },
            ..
        } = t
        {
            assert!(
                version.starts_with(want),
                "{name}: plugin {plugin} was configured by runtime version {version}, not {}",
                runtime.name()
            );
        }
    }
    let ids = ids(&out.join("truth.ndjson"));
    assert!(
        !ids.is_empty(),
        "{name}: the truth names no sandbox or container"
    );
    let left = lab.leftovers(&ids);
    assert!(
        left.is_empty(),
        "{name}: lab down left behind:\n{}",
        left.join("\n")
    );
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

// containerd 2.1 beside 1.7, in CI (about 45 s with the install): the
// scenarios where 2.1 differs (docs/lab.md, "Scenarios on containerd
// 2.1") and the happy path. NRI_TRACE_LAB_RUNTIME=containerd-2.1 runs
// every test above on 2.1.

#[test]
fn ctrd21_happy() {
    run_scenario_on("happy", Runtime::Containerd21);
}

#[test]
fn ctrd21_late_registration() {
    run_scenario_on("late-registration", Runtime::Containerd21);
}

#[test]
fn ctrd21_cri_deadline_retry() {
    run_scenario_on("cri-deadline-retry", Runtime::Containerd21);
}

#[test]
fn ctrd21_runtime_restart() {
    run_scenario_on("runtime-restart", Runtime::Containerd21);
}

// CRI-O 1.33.13 (lab/crio.sh), in CI: the happy path and the scenarios
// where CRI-O differs by design (docs/lab.md, "Scenarios on CRI-O"). The
// first one builds CRI-O (about 2.5 min cold, once per source tarball).
// NRI_TRACE_LAB_RUNTIME=crio runs every test above on it.

#[test]
fn crio_happy() {
    run_scenario_on("happy", Runtime::CriO);
}

#[test]
fn crio_teardown_error() {
    run_scenario_on("teardown-error", Runtime::CriO);
}

#[test]
fn crio_late_registration() {
    run_scenario_on("late-registration", Runtime::CriO);
}

#[test]
fn crio_cri_deadline_retry() {
    run_scenario_on("cri-deadline-retry", Runtime::CriO);
}
