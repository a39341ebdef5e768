//! `nri-trace hold` (hidden): attach a program set and hold it, for the
//! benchmarks' design floors (docs/benchmarks.md).

use std::io::Write;

use anyhow::{Context, Result};
use nri_trace::capture::{runtime_tree, CaptureBackend, EbpfBackend, EbpfOptions};

use crate::cli::HoldArgs;

pub(crate) async fn run(a: HoldArgs) -> Result<()> {
    let mut b = EbpfBackend::load(&EbpfOptions {
        programs: a.programs,
        sandbox: a.sandbox,
        backend: a.backend,
        ..Default::default()
    })
    .context("loading programs")?;
    if let Some(data) = b.data_backend() {
        eprintln!("nri-trace: capture backend {}", data.name());
    }
    if let Some(p) = a.pid {
        b.track_process(p)?;
        if a.sandbox {
            b.watch_tasks(&runtime_tree(&[p]))?;
        }
    }
    println!("ready");
    std::io::stdout().flush()?;
    nri_trace::pipeline::live::until_signal(super::seconds(Some(a.duration))?).await;
    Ok(())
}
