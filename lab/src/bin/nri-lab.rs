//! nri-lab: run the lab's scenarios against the private containerd.
//!
//! `nri-lab list`, `nri-lab run NAME [--out DIR]`, `nri-lab verify NAME FILE`.
//! Each run writes DIR/truth.ndjson (what the driver and the plugins did and
//! saw) and checks that it shows what the scenario intends.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use nri_trace_lab::{
    labctl::{self, Lab},
    scenario::{self, Bins, SCENARIOS},
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
            for (n, d) in SCENARIOS {
                println!("{n:<20} {d}");
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
        Cmd::Verify { name, truth } => {
            for f in scenario::verify(&name, &truth)? {
                println!("  - {f}");
            }
        }
    }
    Ok(())
}
