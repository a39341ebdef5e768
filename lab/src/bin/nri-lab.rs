//! nri-lab: run the lab's scenarios against the private containerd.
//!
//! `nri-lab list`, `nri-lab run NAME [--out DIR]`, `nri-lab verify NAME FILE`.
//! Each run writes DIR/truth.ndjson (what the driver and the plugins did and
//! saw) and checks that it shows what the scenario intends.
//! `nri-lab stuck CAUSE` (hidden) makes a pod stuck Terminating for CAUSE,
//! its teardown retried by the driver, prints it and keeps it until Ctrl-C.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use nri_trace_lab::{
    labctl::{self, Lab},
    scenario::{self, Bins, SCENARIOS},
    stuck::{self, Cause, StuckOptions},
};

#[derive(Parser)]
#[command(
    name = "nri-lab",
    about = "Run nri-trace lab scenarios on the private containerd"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the scenarios.
    List,
    /// Run a scenario (lab up, plugins, driver, lab down) and check its truth.
    Run {
        name: String,
        /// Output directory [default: target/lab/NAME].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Make a pod stuck Terminating (busy-mount, alive-after-sigkill,
    /// hung-teardown-hook, plugin-error-on-stop, volume-busy), its teardown
    /// retried by cri-driver; print it and keep it until Ctrl-C, then
    /// release it and bring the lab down.
    #[command(hide = true)]
    Stuck {
        cause: String,
        /// Output directory [default: target/lab/stuck-CAUSE].
        #[arg(long)]
        out: Option<PathBuf>,
        /// The driver's CRI request timeout.
        #[arg(long, default_value_t = 10_000)]
        request_timeout_ms: u64,
        /// The driver's wait between a failed step and its next try.
        #[arg(long, default_value_t = 2_000)]
        retry_ms: u64,
    },
    /// Check a saved truth file against scenario NAME's intent.
    Verify { name: String, truth: PathBuf },
    /// The self-contained demo: lab up, two plugins (one slow), nri-trace
    /// capturing the NRI and CRI sockets, two pod lifecycles, lab down.
    Demo {
        /// The nri-trace binary to run.
        #[arg(long)]
        nri_trace: PathBuf,
        /// Extra arguments for `nri-trace watch` (e.g. -o json).
        #[arg(last = true)]
        capture_args: Vec<String>,
    },
}

fn main() -> Result<()> {
    env_logger::init();
    match Cli::parse().cmd {
        Cmd::List => {
            for s in SCENARIOS {
                println!("{:<20} {}", s.name, s.about);
            }
        }
        Cmd::Run { name, out } => {
            let out = out.unwrap_or_else(|| PathBuf::from("target/lab").join(&name));
            let _lock = labctl::lock()?;
            let lab = Lab::from_env();
            lab.install()?;
            let facts = scenario::run(&name, lab, Bins::beside_current_exe()?, &out)?;
            println!(
                "scenario {name}: ground truth in {}",
                out.join("truth.ndjson").display()
            );
            for f in facts {
                println!("  - {f}");
            }
        }
        Cmd::Demo {
            nri_trace,
            capture_args,
        } => {
            let _lock = labctl::lock()?;
            let lab = Lab::from_env();
            lab.install()?;
            scenario::demo(lab, Bins::beside_current_exe()?, &nri_trace, &capture_args)?;
        }
        Cmd::Stuck {
            cause,
            out,
            request_timeout_ms,
            retry_ms,
        } => {
            let cause = Cause::parse(&cause)?;
            let out = out.unwrap_or_else(|| {
                PathBuf::from("target/lab").join(format!("stuck-{}", cause.name()))
            });
            let _lock = labctl::lock()?;
            let lab = Lab::from_env();
            lab.install()?;
            let opts = StuckOptions {
                request_timeout_ms,
                retry_ms,
            };
            let pod = stuck::make_stuck(lab, Bins::beside_current_exe()?, cause, &out, &opts)?;
            println!(
                "pod {} uid {} sandbox {} containers {:?}\ncri-driver teardown pid {} (truth {})\nexpected: {:?}",
                pod.pod(),
                pod.uid,
                pod.sandbox_id,
                pod.container_ids,
                pod.driver_pid,
                pod.truth.display(),
                pod.expected
            );
            match pod.wait_stuck(std::time::Duration::from_mins(1)) {
                Ok(facts) => facts.iter().for_each(|f| println!("  - {f}")),
                Err(e) => println!("  not stuck as expected: {e:#}"),
            }
            println!("Ctrl-C releases the pod and brings the lab down");
            wait_for_interrupt()?;
            for f in pod.release()? {
                println!("  - {f}");
            }
        }
        Cmd::Verify { name, truth } => {
            for f in scenario::verify(&name, &truth)? {
                println!("  - {f}");
            }
        }
    }
    Ok(())
}

/// Block until SIGINT or SIGTERM (the default action would kill this
/// process before the pod is released).
fn wait_for_interrupt() -> Result<()> {
    // SAFETY: plain signal-mask calls on this thread, before any other
    // thread exists; sigwait then takes the signal synchronously.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) != 0 {
            anyhow::bail!("pthread_sigmask failed");
        }
        let mut sig = 0;
        libc::sigwait(&raw const set, &raw mut sig);
    }
    Ok(())
}
