//! The paced part: write(2) of the captured process at 10,000 writes/s,
//! without and with the capture: the per-write cost when the capture keeps
//! up and its reader is mostly idle.

use anyhow::Result;

use super::{
    criterion::Ctx,
    fit::SizeFit,
    rounds::{paired_diff, paired_diffs},
    tables::fmt_spread,
    throughput::run_writer_with,
};

// ------------------------------------------------------ part b2: paced

/// The paced part's rate: the capture keeps up with it at every size (see
/// the throughput part), so its reader drains a few records per wakeup
/// instead of competing with the writer flat out.
pub(super) const PACED_WRITES_S: f64 = 10_000.0;
pub(super) const PACED_SIZES: [u64; 3] = [64, 4096, 65536];
/// The paced writer's peer reads without blocking every 100 us: a reader
/// blocked in read(2) is woken by every write and, on the same CPU, often
/// preempts the writer on its way out of write(2), so the timed write also
/// held a switch to the reader and the reader's own probed read (about 4 us
/// of the 6 us baseline). In this mode the bench executable also raises the
/// writer's socket buffer (`SO_SNDBUFFORCE`), so that the writes queued
/// between two polls never fill it.
const PACED_READER: &[(&str, &str)] = &[("NRI_TRACE_BENCH_READER_POLL_US", "100")];

pub(super) struct PacedCost {
    /// Per size: per-round mean ns in write(2) without and with capture.
    baseline: Vec<Vec<f64>>,
    captured: Vec<Vec<f64>>,
    /// Per size: the captured runs' writes, chunks and lost records, summed.
    writes: Vec<u64>,
    chunks: Vec<u64>,
    lost: Vec<u64>,
}

impl PacedCost {
    /// Median over rounds of (captured - baseline), run back to back.
    pub(super) fn added(&self, i: usize) -> f64 {
        paired_diff(&self.captured[i], &self.baseline[i])
    }

    /// Per round, in run order: captured - baseline.
    fn added_per_round(&self, i: usize) -> Vec<f64> {
        paired_diffs(&self.captured[i], &self.baseline[i])
    }

    /// Per-write and per-byte cost through the added costs (sizes whose
    /// captured runs lost records left out).
    pub(super) fn fit(&self) -> SizeFit {
        let points = PACED_SIZES
            .iter()
            .enumerate()
            .map(|(i, &size)| (size, self.added(i), self.lost[i]));
        SizeFit::new(points)
    }
}

pub(super) fn paced_cost(ctx: &Ctx, rounds: usize, seconds: f64) -> Result<PacedCost> {
    let n = PACED_SIZES.len();
    let mut p = PacedCost {
        baseline: vec![vec![]; n],
        captured: vec![vec![]; n],
        writes: vec![0; n],
        chunks: vec![0; n],
        lost: vec![0; n],
    };
    for _ in 0..rounds {
        for (i, &size) in PACED_SIZES.iter().enumerate() {
            let rate = size as f64 * PACED_WRITES_S;
            let base = run_writer_with(ctx, size, seconds, rate, false, PACED_READER)?;
            let cap = run_writer_with(ctx, size, seconds, rate, true, PACED_READER)?;
            let summary = cap.summary.expect("captured run");
            p.baseline[i].push(base.write_ns);
            p.captured[i].push(cap.write_ns);
            p.writes[i] += cap.writes;
            p.chunks[i] += summary.chunks;
            p.lost[i] += summary.lost_records;
        }
    }
    Ok(p)
}

pub(super) fn paced_section(p: &PacedCost, seconds: f64) -> String {
    let mut s = format!(
        "## Cost for the traced process at {PACED_WRITES_S:.0} writes/s\n\n\
         The throughput part's writer, paced to {PACED_WRITES_S:.0} writes/s for {seconds} s: \
         mean time inside write(2) (two clock reads included), without and with the \
         capture, run back to back. The peer end is drained by a thread of the same process \
         that reads without blocking every 100 us, so a write wakes nobody and its time holds \
         the write alone. {rounds} rounds; median over rounds (min-max); added = median over \
         rounds of (captured - no capture). Unlike the flat-out loop above, the capture's \
         reader is mostly idle here, as on a node, where the runtime's sockets carry far \
         fewer messages.\n\n\
         | write(2) of the traced process | no capture (ns) | nri-trace capture (ns) | added per write (ns) \
         | added per round, in run order (ns) | writes captured | chunks captured | lost records |\n\
         | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n",
        rounds = p.baseline.first().map_or(0, Vec::len),
    );
    for (i, size) in PACED_SIZES.iter().enumerate() {
        let per_round: Vec<String> = p
            .added_per_round(i)
            .iter()
            .map(|d| format!("{d:+.0}"))
            .collect();
        s += &format!(
            "| unix write {size} B (captured fd) | {} | {} | {:+.1} | {} | {} | {} | {} |\n",
            fmt_spread(&p.baseline[i]),
            fmt_spread(&p.captured[i]),
            p.added(i),
            per_round.join(", "),
            p.writes[i],
            p.chunks[i],
            p.lost[i],
        );
    }
    s += &p.fit().sentence();
    s
}
