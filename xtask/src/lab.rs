//! `cargo xtask lab ...` and `cargo xtask demo`: the lab's private containerd
//! (lab/lab.sh) and its scenarios (the `nri-lab` binary of the lab crate).

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};
use clap::Subcommand;

use crate::{cargo, run, workspace_root};

#[derive(Subcommand)]
pub(crate) enum LabCmd {
    /// Install containerd 1.7 (trixie, pinned), runc, CNI plugins, busybox.
    Install,
    /// Start the private containerd with NRI (idempotent).
    Up,
    /// Stop it and clean up everything it started.
    Down,
    /// What runs, sockets, images, leftovers.
    Status,
    /// List the scenarios.
    List,
    /// Run a scenario and check its ground truth (target/lab/NAME/truth.ndjson).
    Run { name: String },
}

/// `cargo xtask demo`: build everything, then the lab demo with nri-trace
/// capturing the lab's NRI and CRI sockets.
pub(crate) fn demo(extra: &[String]) -> Result<()> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if ci || !crate::setup::toolchain_ready() {
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

fn lab_sh(arg: &str) -> Result<()> {
    run(Command::new("bash")
        .arg(workspace_root().join("lab/lab.sh"))
        .arg(arg))
}

/// Build the lab binaries (debug: they are small and build fast) and
/// return their directory.
pub(crate) fn build_lab() -> Result<PathBuf> {
    run(cargo().args(["build", "-q", "-p", "nri-trace-lab", "--bins"]))
        .context("building the lab")?;
    Ok(workspace_root().join("target/debug"))
}

pub(crate) fn run_lab(cmd: LabCmd) -> Result<()> {
    match cmd {
        LabCmd::Install => lab_sh("install"),
        LabCmd::Up => lab_sh("up"),
        LabCmd::Down => lab_sh("down"),
        LabCmd::Status => lab_sh("status"),
        LabCmd::List => run(Command::new(build_lab()?.join("nri-lab")).arg("list")),
        LabCmd::Run { name } => {
            let bin = build_lab()?.join("nri-lab");
            run(Command::new(bin)
                .args(["run", &name])
                .current_dir(workspace_root()))
        }
    }
}
