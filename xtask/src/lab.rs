//! `cargo xtask lab ...` and `cargo xtask demo`: the lab's private containerd
//! (lab/lab.sh) and its scenarios (the `nri-lab` binary of the lab crate).

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context, Result};
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
    /// Build every peer the lab tier's tests use, one after the other:
    /// the runtimes (containerd 2.3, 2.2 and 2.1, CRI-O), crictl, the Go
    /// NRI plugins and CRI clients. Idempotent: what is built by the same
    /// recipe is not built again. `cargo xtask test` runs it beside the
    /// Rust builds, before the lab tier.
    Peers {
        /// Build instead what only the lab tier's last tests need
        /// (Kubernetes and etcd, for the cluster test).
        #[arg(long)]
        late: bool,
    },
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
    lab_script("lab.sh", arg, runtime)
}

/// `bash lab/SCRIPT ARG` with `--runtime` as NRI_TRACE_LAB_RUNTIME (the
/// cluster's scripts too, xtask/src/cluster.rs).
pub(crate) fn lab_script(script: &str, arg: &str, runtime: Option<&str>) -> Result<()> {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("lab").join(script)).arg(arg);
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
        LabCmd::Peers { late } => build_peers(late),
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

/// One peer of the lab tier: what it is, and the lab script's steps
/// that build it (each `lab/SCRIPT ARGS...`, with NRI_TRACE_LAB_RUNTIME
/// when given).
struct Peer {
    what: &'static str,
    runtime: Option<&'static str>,
    steps: &'static [&'static [&'static str]],
    /// Built by `lab peers --late` (what only the lab tier's last tests
    /// need), not by `lab peers`.
    late: bool,
}

/// What the lab tier's tests build the first time they ask for it
/// (lab/src/labctl.rs, crictl.rs, scenario.rs, scenario/go_plugins.rs and
/// pod_resize.rs, tests/tests/prometheus_lab.rs and trace_lab/otlp.rs call
/// the same steps): on a machine that never built them
/// about 18 of the cold suite's minutes (docs/benchmarks.md, "The
/// suite"). In the order the lab tier needs them: containerd 2.3 first,
/// as most scenarios run on it. `lab.sh install` also installs Debian's
/// containerd 1.7, runc and the CNI plugins.
const PEERS: &[Peer] = &[
    Peer {
        what: "containerd 2.3 (and Debian's containerd 1.7, runc, CNI plugins)",
        runtime: Some("containerd-2.3"),
        steps: &[&["lab.sh", "install"]],
        late: false,
    },
    Peer {
        what: "the go-nri-plugin builds (NRI v0.12.2 and v0.8.0 stubs)",
        runtime: None,
        steps: &[&["go-nri-plugin.sh", "build"]],
        late: false,
    },
    Peer {
        what: "the grpc-go CRI client",
        runtime: None,
        steps: &[
            &["go-cri-client.sh", "install"],
            &["go-cri-client.sh", "build"],
        ],
        late: false,
    },
    Peer {
        what: "the NRI project's logger plugin",
        runtime: None,
        steps: &[
            &["upstream-logger.sh", "install"],
            &["upstream-logger.sh", "build"],
        ],
        late: false,
    },
    Peer {
        what: "the in-place resize CRI client",
        runtime: None,
        steps: &[&["go-cri-resize.sh", "build"]],
        late: false,
    },
    Peer {
        what: "crictl",
        runtime: None,
        steps: &[&["crictl.sh", "install"]],
        late: false,
    },
    Peer {
        what: "containerd 2.2",
        runtime: Some("containerd-2.2"),
        steps: &[&["lab.sh", "install"]],
        late: false,
    },
    Peer {
        what: "containerd 2.1 (Debian sid's, unpacked)",
        runtime: Some("containerd-2.1"),
        steps: &[&["lab.sh", "install"]],
        late: false,
    },
    Peer {
        what: "CRI-O",
        runtime: None,
        steps: &[&["crio.sh", "install"]],
        late: false,
    },
    Peer {
        what: "Debian's Prometheus (unpacked)",
        runtime: None,
        steps: &[&["prometheus.sh", "install"]],
        late: false,
    },
    Peer {
        what: "the OpenTelemetry Collector (its builder, from the Go module proxy)",
        runtime: None,
        steps: &[&["otelcol.sh", "install"]],
        late: false,
    },
    // Late: the longest build (about 18 CPU-minutes, 9.6 min alone, cold),
    // needed by one test (tests/tests/cluster_lab), which runs with the
    // dist tests after the rest of the lab tier: `cargo xtask test` builds
    // it beside the suite at the lowest priority (beside.rs).
    Peer {
        what: "Kubernetes and etcd (the lab's cluster)",
        runtime: None,
        steps: &[&["k8s.sh", "install"]],
        late: true,
    },
];

/// `cargo xtask lab peers`: build each of [`PEERS`] in turn. One that
/// fails does not stop the others (a test that needs it builds it again
/// and fails with the script's own words); the error names every one
/// that failed and how to retry it.
fn build_peers(late: bool) -> Result<()> {
    let mut failed = Vec::new();
    for peer in PEERS.iter().filter(|p| p.late == late) {
        let started = std::time::Instant::now();
        let mut ok = true;
        for step in peer.steps {
            let mut cmd = Command::new("bash");
            cmd.arg(workspace_root().join("lab").join(step[0]))
                .args(&step[1..])
                // Scripts that print a binary's path print it on stdout;
                // here only the log matters.
                .stdout(std::process::Stdio::null());
            with_runtime(&mut cmd, peer.runtime);
            if let Err(e) = run(&mut cmd) {
                let retry = match peer.runtime {
                    Some(r) => format!("NRI_TRACE_LAB_RUNTIME={r} lab/{}", step.join(" ")),
                    None => format!("lab/{}", step.join(" ")),
                };
                eprintln!("peers: {} FAILED at `{retry}`: {e:#}", peer.what);
                failed.push(format!("{} (retry: sudo {retry})", peer.what));
                ok = false;
                break;
            }
        }
        if ok {
            println!(
                "peers: {} ready ({:.0} s)",
                peer.what,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if !failed.is_empty() {
        bail!("these lab peers did not build: {}", failed.join("; "));
    }
    Ok(())
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
