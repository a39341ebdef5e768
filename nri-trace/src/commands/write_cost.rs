//! `nri-trace write-cost` (hidden): what one write(2) of a process
//! nri-trace does not trace costs with the capture's programs attached on
//! a backend, or with none, to a file, a pipe, a TCP socket and a unix
//! socket. `cargo xtask bench --only kernels` runs it in qemu, every
//! backend in the same guest and the same run (docs/benchmarks.md).

use std::{io::Write, time::Instant};

use anyhow::{Context, Result};
use nri_trace::capture::{
    BackendChoice, EbpfBackend, EbpfOptions, OpenTarget, WriteTarget, DRAIN_EVERY,
};
use serde::Serialize;

use crate::cli::{WriteCostArgs, WriteCostProbes};

/// One target's figure, as a JSON line.
#[derive(Serialize)]
struct WriteCostLine {
    #[serde(rename = "type")]
    kind: &'static str,
    probes: &'static str,
    target: &'static str,
    writes: u32,
    ns_per_write: f64,
}

pub(crate) fn run(a: WriteCostArgs) -> Result<()> {
    let (probes, backend) = match a.probes {
        WriteCostProbes::None => ("none", None),
        WriteCostProbes::Tracepoint => ("tracepoint", Some(BackendChoice::Tracepoint)),
        WriteCostProbes::Fentry => ("fentry", Some(BackendChoice::Fentry)),
    };
    // Held to the end: the programs stay attached while the loops run.
    let _probes = backend
        .map(|backend| {
            EbpfBackend::load(&EbpfOptions {
                backend,
                ..EbpfOptions::default()
            })
        })
        .transpose()
        .context("loading the capture programs")?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; DRAIN_EVERY as usize];
    for target in WriteTarget::ALL {
        let mut t = OpenTarget::open(target)
            .with_context(|| format!("opening a {} to write to", target.name()))?;
        let batch = target.drain_every();
        // Warm: the first writes fault pages in and grow buffers.
        for _ in 0..batch {
            t.write_byte()?;
        }
        t.drain(&mut buf);
        // Timed in batches: the drains between them are not.
        let mut ns = 0u128;
        let mut written = 0;
        while written < a.writes {
            let n = batch.min(a.writes - written);
            let start = Instant::now();
            for _ in 0..n {
                t.write_byte()?;
            }
            ns += start.elapsed().as_nanos();
            written += n;
            t.drain(&mut buf);
        }
        let line = WriteCostLine {
            kind: "write_cost",
            probes,
            target: target.name(),
            writes: written,
            ns_per_write: ns as f64 / f64::from(written.max(1)),
        };
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    }
    Ok(())
}
