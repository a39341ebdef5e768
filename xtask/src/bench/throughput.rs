//! The throughput part: how fast a captured writer can go before records
//! are lost.

use std::time::Duration;

use anyhow::{Context, Result};

use super::{
    child::{stop_capture, Summary},
    criterion::{pinned, Ctx, BENCH_CPU},
    tables::{fmt_bytes, fmt_f, fmt_f0, fmt_rate},
    traced::{check_captured, start_traced_process},
};

// --------------------------------------------------- part c: throughput

pub(super) struct WriterRun {
    /// Target rate in bytes/s (0 = as fast as possible).
    target: f64,
    pub(super) writes: u64,
    bytes: u64,
    seconds: f64,
    /// Mean time inside write(2), ns.
    pub(super) write_ns: f64,
    /// What the capture saw; None for runs without a capture.
    pub(super) summary: Option<Summary>,
}

impl WriterRun {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
    fn writes_s(&self) -> f64 {
        self.writes as f64 / self.seconds
    }
    fn lost(&self) -> u64 {
        self.summary.map_or(0, |s| s.lost_records)
    }
}

pub(super) struct SizeThroughput {
    size: u64,
    /// Full speed without a capture: what the writer does at all.
    base_full: WriterRun,
    /// Full speed, captured.
    full: WriterRun,
    /// The rate search (empty when nothing was lost at full speed).
    steps: Vec<WriterRun>,
    /// The highest lossless rate found, again without a capture: the
    /// per-write cost of a capture that keeps up.
    paced_base: Option<WriterRun>,
}

impl SizeThroughput {
    fn best_lossless(&self) -> Option<&WriterRun> {
        self.steps
            .iter()
            .filter(|r| r.lost() == 0)
            .max_by(|a, b| a.target.total_cmp(&b.target))
    }
}

pub(super) fn throughput(ctx: &Ctx, seconds: f64, steps: usize) -> Result<Vec<SizeThroughput>> {
    let mut out = vec![];
    for size in [65536, 4096] {
        let base_full = run_writer(ctx, size, seconds, 0.0, false)?;
        let full = run_writer(ctx, size, seconds, 0.0, true)?;
        let mut st = SizeThroughput {
            size,
            base_full,
            steps: vec![],
            full,
            paced_base: None,
        };
        if st.full.lost() > 0 {
            st.steps = lossless_search(ctx, size, seconds, st.full.mb_s() * 1e6, steps)?;
        }
        if let Some(best) = st.best_lossless() {
            let target = best.target;
            st.paced_base = Some(run_writer(ctx, size, seconds, target, false)?);
        }
        out.push(st);
    }
    Ok(out)
}

/// Bisect the writer's rate between 0 and the full-speed rate for the
/// highest rate at which no record is lost.
fn lossless_search(
    ctx: &Ctx,
    size: u64,
    seconds: f64,
    full_rate: f64,
    steps: usize,
) -> Result<Vec<WriterRun>> {
    let (mut lo, mut hi) = (0.0, full_rate);
    let mut runs = vec![];
    for _ in 0..steps {
        let rate = f64::midpoint(lo, hi);
        let r = run_writer(ctx, size, seconds, rate, true)?;
        if r.lost() == 0 {
            lo = rate;
        } else {
            hi = rate;
        }
        runs.push(r);
    }
    Ok(runs)
}

/// One writer run (the bench executable in throughput mode, on the bench
/// CPU; its reader thread shares that CPU), captured or not.
fn run_writer(ctx: &Ctx, size: u64, seconds: f64, rate: f64, captured: bool) -> Result<WriterRun> {
    run_writer_with(ctx, size, seconds, rate, captured, &[])
}

/// `run_writer` with extra environment for the bench executable.
pub(super) fn run_writer_with(
    ctx: &Ctx,
    size: u64,
    seconds: f64,
    rate: f64,
    captured: bool,
    env: &[(&str, &str)],
) -> Result<WriterRun> {
    let mut cmd = pinned(BENCH_CPU, &ctx.bench_exe);
    cmd.envs(env.iter().copied());
    cmd.env("NRI_TRACE_BENCH_MODE", "throughput")
        .env("NRI_TRACE_BENCH_WRITE_SIZE", size.to_string())
        .env("NRI_TRACE_BENCH_SECONDS", seconds.to_string())
        .env("NRI_TRACE_BENCH_RATE", rate.to_string());
    let (mut writer, capture) = start_traced_process(ctx, &mut cmd, "throughput writer", captured)?;
    let line = writer.wait_for("nri-trace-bench: throughput", Duration::from_mins(2))?;
    writer.wait_success(Duration::from_secs(30))?;
    let summary = capture.map(stop_capture).transpose()?;
    if let Some(s) = &summary {
        check_captured(s, true)?;
    }
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no {k} in {line:?}"))
    };
    let r = WriterRun {
        target: rate,
        writes: field("writes=")? as u64,
        bytes: field("bytes=")? as u64,
        seconds: field("seconds=")?,
        write_ns: field("write_ns=")?,
        summary,
    };
    let reads = field("reads=")?;
    eprintln!(
        "bench: throughput {size} B writes, {}, target {}: {:.1} MB/s, {:.0} writes/s, \
         {:.1} ns in write, {:.2} reads per write, capture {:?}",
        if captured { "captured" } else { "no capture" },
        fmt_rate(r.target),
        r.mb_s(),
        r.writes_s(),
        r.write_ns,
        reads / r.writes.max(1) as f64,
        r.summary
    );
    Ok(r)
}

// ---------------------------------------------------------------- report

pub(super) fn throughput_section(t: &[SizeThroughput], seconds: f64) -> String {
    let mut s = format!(
        "## Capture throughput ({}, {seconds} s per run)\n\n\
         A writer thread writes on the server end of a unix stream connection, flat out or \
         paced to a target rate; a reader thread of the same process (same CPU) drains the \
         other end. Chunks = syscalls reassembled by nri-trace; a 64 KiB write is 4 kernel \
         records of 16 KiB, a 4 KiB write one.\n\n\
         | write size | capture | target rate | writer MB/s | writes/s | mean ns in write(2) \
         | writes | chunks captured | bytes written | bytes captured | lost records | lost bytes |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        fmt_bytes(nri_ring_bytes())
    );
    for st in t {
        let runs = [&st.base_full, &st.full]
            .into_iter()
            .chain(st.steps.iter())
            .chain(st.paced_base.iter());
        for r in runs {
            s += &writer_row(st.size, r);
        }
    }
    s += "\n";
    for st in t {
        s += &throughput_verdict(st);
    }
    s
}

fn writer_row(size: u64, r: &WriterRun) -> String {
    let capture = match &r.summary {
        Some(c) => {
            format!(
                "nri-trace | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_rate(r.target),
                fmt_f(r.mb_s()),
                fmt_f0(r.writes_s()),
                fmt_f(r.write_ns),
                r.writes,
                c.chunks,
                r.bytes,
                c.bytes,
                c.lost_records,
                c.lost_bytes
            )
        }
        None => format!(
            "none | {} | {} | {} | {} | {} | - | {} | - | - | - |",
            fmt_rate(r.target),
            fmt_f(r.mb_s()),
            fmt_f0(r.writes_s()),
            fmt_f(r.write_ns),
            r.writes,
            r.bytes
        ),
    };
    format!("| {size} B | {capture}\n")
}

fn throughput_verdict(st: &SizeThroughput) -> String {
    let full = &st.full;
    if full.lost() == 0 {
        return format!(
            "- {} B writes: no record lost at full speed ({:.1} MB/s captured; {:.1} MB/s \
             without capture).\n",
            st.size,
            full.mb_s(),
            st.base_full.mb_s()
        );
    }
    let mut s = format!(
        "- {} B writes: records WERE lost at full speed: {} records ({} bytes) at {:.1} MB/s \
         ({:.1} MB/s without capture).",
        st.size,
        full.lost(),
        full.summary.map_or(0, |c| c.lost_bytes),
        full.mb_s(),
        st.base_full.mb_s()
    );
    match (st.best_lossless(), &st.paced_base) {
        (Some(b), Some(base)) => {
            s += &format!(
                " Highest rate tested without loss: {:.1} MB/s ({:.0} writes/s); at that pace \
                 a write takes {:.1} ns captured vs {:.1} ns without capture ({:+.1} ns).\n",
                b.mb_s(),
                b.writes_s(),
                b.write_ns,
                base.write_ns,
                b.write_ns - base.write_ns
            )
        }
        _ => s += " Records were lost at every rate tested.\n",
    }
    s
}

// --------------------------------------------------------------- helpers

/// The ring buffer size nri-trace uses by default (nri_trace_common's
/// DEFAULT_RING_BYTES; xtask does not depend on that crate).
fn nri_ring_bytes() -> u64 {
    16 << 20
}
