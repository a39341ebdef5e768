//! `cargo xtask lab ...` and `cargo xtask demo`: the lab's private containerd
//! (lab/lab.sh) and its scenarios (the `nri-lab` binary of the lab crate).

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};
use clap::Subcommand;

use crate::{cargo, run, workspace_root};

#[derive(Subcommand)]
pub(crate) enum LabCmd {
    /// Install containerd 1.7 (trixie, pinned), runc, CNI plugins, busybox;
    /// with `--runtime containerd-2.1` also sid's containerd 2.1, unpacked
    /// under the lab dir (never installed); with `--runtime containerd-2.2`
    /// or `containerd-2.3` also containerd 2.2.9 or 2.3.7 built from its Go
    /// module (github.com/containerd/containerd/v2, through the Go module
    /// proxy) into the lab dir (once per build recipe); with `--runtime crio` also
    /// CRI-O 1.36.3 built from its Go module (github.com/cri-o/cri-o, through
    /// the Go module proxy) into the lab dir (once per build recipe).
    Install,
    /// Start the private runtime with NRI (idempotent; `--runtime crio`,
    /// `containerd-2.2` and `containerd-2.3` install and build it first when
    /// it is not built).
    Up,
    /// Stop it and clean up everything it started.
    Down,
    /// Which runtime runs, sockets, images, leftovers.
    Status,
    /// List the scenarios.
    List,
    /// Run a scenario and check its ground truth (target/lab/NAME/truth.ndjson).
    /// A lab that is up is brought down first (the scenario starts it with
    /// its own plugins).
    Run { name: String },
}

/// `cargo xtask demo`: build everything, then the lab demo with nri-trace
/// capturing the lab's NRI and CRI sockets.
pub(crate) fn demo(extra: &[String]) -> Result<()> {
    if crate::under_ci() || !crate::setup::toolchain_ready() {
        crate::setup::run()?;
    }
    let nri_trace = crate::build(true)?;
    let bin = build_lab()?.join("nri-lab");
    run(Command::new(bin)
        .arg("demo")
        .arg("--nri-trace")
        .arg(nri_trace)
        .arg("--")
        .args(extra)
        .current_dir(workspace_root()))
}

fn lab_sh(arg: &str, runtime: Option<&str>) -> Result<()> {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("lab/lab.sh")).arg(arg);
    with_runtime(&mut cmd, runtime);
    run(&mut cmd)
}

/// `--runtime` reaches lab.sh and nri-lab as NRI_TRACE_LAB_RUNTIME.
fn with_runtime(cmd: &mut Command, runtime: Option<&str>) {
    if let Some(r) = runtime {
        cmd.env("NRI_TRACE_LAB_RUNTIME", r);
    }
}

/// Build the lab binaries (debug: they are small and build fast) and
/// return their directory.
pub(crate) fn build_lab() -> Result<PathBuf> {
    run(cargo().args(["build", "-q", "-p", "nri-trace-lab", "--bins"]))
        .context("building the lab")?;
    Ok(workspace_root().join("target/debug"))
}

pub(crate) fn run_lab(cmd: LabCmd, runtime: Option<&str>) -> Result<()> {
    match cmd {
        LabCmd::Install => lab_sh("install", runtime),
        LabCmd::Up => {
            // Pre-launched plugins are a scenario's, installed by it before
            // its own `up`; one left by a killed run would be started by
            // this `up` (and, failing to register, stop containerd 1.7).
            clear_left_plugins()?;
            if matches!(runtime, Some("crio" | "containerd-2.2" | "containerd-2.3")) {
                // Idempotent, and cached: no build when the runtime was built
                // by the same recipe (the built-from of lab/crio.sh and
                // lab/ctrd-module.sh).
                lab_sh("install", runtime)?;
            }
            lab_sh("up", runtime)
        }
        LabCmd::Down => {
            lab_sh("down", runtime)?;
            clear_left_plugins()
        }
        LabCmd::Status => lab_sh("status", runtime),
        LabCmd::List => run(Command::new(build_lab()?.join("nri-lab")).arg("list")),
        LabCmd::Run { name } => {
            let bin = build_lab()?.join("nri-lab");
            let mut cmd = Command::new(bin);
            cmd.args(["run", &name]).current_dir(workspace_root());
            with_runtime(&mut cmd, runtime);
            run(&mut cmd)
        }
    }
}

/// The lab's directory: $NRI_TRACE_LAB_DIR, or /var/lib/nri-trace-lab
/// (lab/lab.sh's default).
pub(crate) fn lab_dir() -> PathBuf {
    std::env::var_os("NRI_TRACE_LAB_DIR")
        .map_or_else(|| PathBuf::from("/var/lib/nri-trace-lab"), PathBuf::from)
}

/// Remove the test plugins the lab's scenarios install (wrappers marked
/// "Installed by the nri-trace lab") from $LAB/nri/plugins, saying which.
fn clear_left_plugins() -> Result<()> {
    let Ok(rd) = std::fs::read_dir(lab_dir().join("nri/plugins")) else {
        return Ok(());
    };
    for e in rd.flatten() {
        // labctl's install_prelaunched writes this line into each wrapper.
        const MARK: &[u8] = b"Installed by the nri-trace lab";
        let marked =
            std::fs::read(e.path()).is_ok_and(|b| b.windows(MARK.len()).any(|w| w == MARK));
        if marked {
            std::fs::remove_file(e.path())
                .with_context(|| format!("removing {}", e.path().display()))?;
            eprintln!(
                "lab: removed {}, a scenario's pre-launched plugin left behind",
                e.path().display()
            );
        }
    }
    Ok(())
}
