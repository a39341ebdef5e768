//! The traced part: write(2) of the process nri-trace captures, without
//! and with the capture.

use std::{fs, process::Command, time::Duration};

use anyhow::{bail, Context, Result};

use super::{
    child::{start_capture, stop_capture, Proc, Summary},
    criterion::Ctx,
    fit::SizeFit,
    rounds::paired_diff,
    tables::fmt_spread,
};

// ------------------------------------------------ part b: traced process

/// Benchmarks of the traced group: (criterion id, unix write size). The
/// /dev/null write is the traced process on an fd nri-trace does not track.
pub(super) const TRACED_CASES: [(&str, Option<u64>); 4] = [
    ("traced/write_devnull_64", None),
    ("traced/unix_write/64", Some(64)),
    ("traced/unix_write/4096", Some(4096)),
    ("traced/unix_write/65536", Some(65536)),
];

fn case_label(i: usize) -> String {
    match TRACED_CASES[i].1 {
        Some(size) => format!("unix write {size} B (captured fd)"),
        None => "write 64 B to /dev/null (untracked fd)".into(),
    }
}

pub(super) struct TracedCost {
    /// Per case: per-round medians without and with the capture.
    baseline: Vec<Vec<f64>>,
    captured: Vec<Vec<f64>>,
    /// Per case: what each captured run's nri-trace saw.
    summaries: Vec<Vec<Summary>>,
    /// Per case: (writes on the connection, reads by the reader thread) in
    /// each captured run.
    counts: Vec<Vec<(u64, u64)>>,
}

impl TracedCost {
    /// Median over rounds of (captured - baseline), run back to back.
    pub(super) fn added(&self, i: usize) -> f64 {
        paired_diff(&self.captured[i], &self.baseline[i])
    }

    /// Per-write and per-byte cost: a line through the unix writes' added
    /// costs (sizes whose captured runs lost records left out).
    pub(super) fn fit(&self) -> SizeFit {
        let points = (0..TRACED_CASES.len()).filter_map(|i| {
            let size = TRACED_CASES[i].1?;
            let lost = self.summaries[i].iter().map(|s| s.lost_records).sum();
            Some((size, self.added(i), lost))
        });
        SizeFit::new(points)
    }
}

pub(super) fn traced_cost(ctx: &Ctx, rounds: usize) -> Result<TracedCost> {
    let n = TRACED_CASES.len();
    let mut t = TracedCost {
        baseline: vec![vec![]; n],
        captured: vec![vec![]; n],
        summaries: vec![vec![]; n],
        counts: vec![vec![]; n],
    };
    for round in 1..=rounds {
        for i in 0..n {
            let (base, _, _) = run_traced(ctx, i, false)?;
            let (cap, summary, counts) = run_traced(ctx, i, true)?;
            let summary = summary.expect("captured run");
            eprintln!(
                "bench: traced round {round}/{rounds} {}: baseline {base:.1} ns, \
                 captured {cap:.1} ns (capture saw {summary:?})",
                case_label(i)
            );
            t.baseline[i].push(base);
            t.captured[i].push(cap);
            t.summaries[i].push(summary);
            t.counts[i].push(counts);
        }
    }
    Ok(t)
}

/// One run of traced benchmark `i`: this bench process listens, nri-trace
/// (if `captured`) attaches to it, then the connection is made and written.
/// One process and capture per benchmark, so that each capture's summary
/// (losses) belongs to one benchmark.
/// Returns (median ns, the capture's summary, the bench's (writes, reads)).
fn run_traced(ctx: &Ctx, i: usize, captured: bool) -> Result<(f64, Option<Summary>, (u64, u64))> {
    let (id, size) = TRACED_CASES[i];
    ctx.forget(&[id]);
    let mut cmd = ctx.bench_cmd();
    cmd.args(["--exact", id]);
    let (mut bench, capture) = start_traced_process(ctx, &mut cmd, "bench (traced)", captured)?;
    bench.wait_success(Duration::from_mins(10))?;
    let summary = capture.map(stop_capture).transpose()?;
    if let Some(s) = &summary {
        check_captured(s, size.is_some())?;
    }
    let counts = bench_counts(&bench.seen)
        .context("the traced bench did not report its writes and its reader's reads")?;
    Ok((ctx.median_ns(id)?, summary, counts))
}

/// "nri-trace-bench: writes=N reader reads=M" -> (N, M)
fn bench_counts(lines: &[String]) -> Option<(u64, u64)> {
    let l = lines
        .iter()
        .find(|l| l.contains("nri-trace-bench: writes="))?;
    let num = |key: &str| -> Option<u64> {
        let at = l.find(key)? + key.len();
        l[at..].split_whitespace().next()?.parse().ok()
    };
    Some((num("writes=")?, num("reads=")?))
}

/// Start `cmd` (the bench executable, in a mode that listens on
/// NRI_TRACE_BENCH_SOCK), attach a capture to it if `captured`, then let it
/// connect (ready file). Returns (the process, the capture).
pub(super) fn start_traced_process(
    ctx: &Ctx,
    cmd: &mut Command,
    name: &str,
    captured: bool,
) -> Result<(Proc, Option<Proc>)> {
    let sock = ctx.work.join("traced.sock");
    let ready = ctx.work.join("traced.ready");
    let _ = fs::remove_file(&sock);
    let _ = fs::remove_file(&ready);
    if !captured {
        // The baseline connects at once.
        fs::write(&ready, b"")?;
    }
    cmd.env("NRI_TRACE_BENCH_SOCK", &sock)
        .env("NRI_TRACE_BENCH_READY", &ready);
    let mut bench = Proc::spawn(name, cmd)?;
    bench.wait_for("nri-trace-bench: listening", Duration::from_secs(30))?;
    let capture = if captured {
        let c = start_capture(ctx, &sock)?;
        fs::write(&ready, b"")?;
        Some(c)
    } else {
        None
    };
    bench.wait_for("nri-trace-bench: connected", Duration::from_secs(30))?;
    Ok((bench, capture))
}

/// A captured run whose capture saw no connection (or, when the run wrote
/// on it, no data) measured an untraced process.
pub(super) fn check_captured(s: &Summary, expect_data: bool) -> Result<()> {
    if s.connections == 0 || (expect_data && s.chunks == 0) {
        bail!(
            "the capture saw no connection or no data ({s:?}): the traced process was not traced"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- report

pub(super) fn traced_section(t: &TracedCost) -> String {
    let mut s = String::from(
        "## Cost for the traced process\n\n\
         write(2) on the server end of a captured unix stream connection (a reader thread \
         of the same process, on the same CPU, drains the other end). criterion medians, \
         median over rounds (min-max); added = median over rounds of (captured - no capture), \
         the two run back to back.\n\n\
         | write(2) of the traced process | no capture (ns) | nri-trace capture (ns) | added per write (ns) \
         | writes on the connection | chunks captured | lost records | reader reads per write |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (i, (_, size)) in TRACED_CASES.iter().enumerate() {
        let sum = |f: fn(&Summary) -> u64| t.summaries[i].iter().map(f).sum::<u64>();
        let writes: u64 = t.counts[i].iter().map(|c| c.0).sum();
        let reads: u64 = t.counts[i].iter().map(|c| c.1).sum();
        let (writes_s, per_write) = if size.is_some() {
            (
                writes.to_string(),
                format!("{:.2}", reads as f64 / writes.max(1) as f64),
            )
        } else {
            ("-".into(), "-".into())
        };
        s += &format!(
            "| {} | {} | {} | {:+.1} | {writes_s} | {} | {} | {per_write} |\n",
            case_label(i),
            fmt_spread(&t.baseline[i]),
            fmt_spread(&t.captured[i]),
            t.added(i),
            sum(|s| s.chunks),
            sum(|s| s.lost_records),
        );
    }
    s += &t.fit().sentence();
    s += "\nWrites, chunks, lost records and reads are summed over the captured runs (one \
          capture per run, warm-up included); a lost record is a ring buffer output that failed. The \
          reader's reads are syscalls of the traced process on an fd nri-trace does not \
          track: each pays about what the /dev/null row adds.\n";
    s
}
