//! The trace-engine part: the pipeline (`Pipeline`: the decoders and the
//! `TraceEngine`, folding into a `PodModel`) over a long recording
//! (events/s, pod lifecycles/s), and its memory after 10,000 pod
//! lifecycles against the 100 MiB target
//! (`nri-trace/benches/trace_engine.rs`; no probes, no root needed).

use anyhow::{bail, Context, Result};

use super::{
    criterion::{input_number, run_decode_bench},
    tables::fmt_f0,
};

// ------------------------------------------------ part g: trace engine

/// The criterion id of `nri-trace/benches/trace_engine.rs`'s throughput
/// benchmark.
const TRACE_ENGINE_ID: &str = "trace_engine/full";
/// The same bench's engine-alone benchmark (pre-decoded observations).
const ENGINE_ALONE_ID: &str = "trace_engine/engine";
/// Issue 23's target for the engine alone, on one core.
const ENGINE_TARGET_OBS_S: f64 = 1_000_000.0;
/// The memory target after 10,000 pod lifecycles.
pub(super) const MEMORY_TARGET_MIB: f64 = 100.0;
/// The lifecycles the memory target is stated for.
const MEMORY_LIFECYCLES: f64 = 10_000.0;

pub(super) struct TraceEngine {
    /// The bench's `trace_engine input:` line, as printed.
    input: String,
    reps: f64,
    events: f64,
    bytes: f64,
    lifecycles: f64,
    /// criterion median, ns per run over the whole long input.
    ns: f64,
    /// The input's observations (what its decoding gives).
    observations: f64,
    /// criterion median of the engine alone, ns per run.
    engine_ns: f64,
    /// The bench's `trace_engine memory:` line, as printed.
    memory: String,
    pub(super) mem_lifecycles: f64,
    mem_events: f64,
    mem_seconds: f64,
    rss_before_kib: f64,
    rss_after_kib: f64,
    pub(super) hwm_kib: f64,
    pods_kept: f64,
    /// (lifecycles, VmRSS KiB, seconds) along the memory run.
    progress: Vec<(f64, f64, f64)>,
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

impl TraceEngine {
    pub(super) fn memory_verdict(&self) -> &'static str {
        if self.mem_lifecycles < MEMORY_LIFECYCLES {
            "not measured"
        } else if self.hwm_kib < MEMORY_TARGET_MIB * 1024.0 {
            "met"
        } else {
            "MISSED"
        }
    }
}

/// Build and run the trace_engine bench (criterion, then its memory run),
/// then read its median and its memory lines.
pub(super) fn trace_engine(quick: bool) -> Result<TraceEngine> {
    let run = run_decode_bench(
        "trace_engine",
        &[TRACE_ENGINE_ID.to_string(), ENGINE_ALONE_ID.to_string()],
        quick,
    )?;
    let input = run.inputs[0].clone();
    let line = |prefix: &str| {
        run.output
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::to_string)
            .with_context(|| format!("the trace_engine bench printed no `{prefix}` line"))
    };
    let memory = line("trace_engine memory: ")?;
    let progress = line("trace_engine memory progress: ")?
        .split_whitespace()
        .map(|p| {
            let v: Vec<f64> = p.split(':').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [l, kib, t] => Ok((l, kib, t)),
                _ => bail!("bad memory progress point {p:?}"),
            }
        })
        .collect::<Result<_>>()?;
    Ok(TraceEngine {
        reps: input_number(&input, "reps")?,
        events: input_number(&input, "events")?,
        bytes: input_number(&input, "bytes")?,
        lifecycles: input_number(&input, "lifecycles")?,
        ns: run.median_ns(TRACE_ENGINE_ID)?,
        observations: input_number(&input, "observations")?,
        engine_ns: run.median_ns(ENGINE_ALONE_ID)?,
        input,
        mem_lifecycles: input_number(&memory, "lifecycles")?,
        mem_events: input_number(&memory, "events")?,
        mem_seconds: input_number(&memory, "seconds")?,
        rss_before_kib: input_number(&memory, "rss_before_kib")?,
        rss_after_kib: input_number(&memory, "rss_after_kib")?,
        hwm_kib: input_number(&memory, "hwm_kib")?,
        pods_kept: input_number(&memory, "pods_kept")?,
        memory,
        progress,
        cpu: run.cpu,
    })
}

pub(super) fn trace_engine_section(e: &TraceEngine) -> String {
    let mib = |kib: f64| kib / 1024.0;
    let mut s = format!(
        "## Engine throughput and memory\n\n\
         One run = the whole long input ({} repetitions of the happy trace recording, each \
         with its own ids, connections and times) through a fresh `Pipeline` (decoders and \
         engine) and `PodModel`, on one core ({}); criterion median. MB/s = captured payload bytes (10^6) \
         per second.\n\n\
         Input: `{}`\n\n\
         | benchmark | time per run (ms) | events/s | MB/s | pod lifecycles/s |\n\
         | --- | ---: | ---: | ---: | ---: |\n\
         | full | {:.1} | {:.0} | {:.1} | {:.0} |\n\n\
         Engine alone: the same input decoded beforehand into {} observations, moved \
         into a fresh `TraceEngine` (records dropped as they come; the clone of the \
         observations is outside the timing): {:.1} ms per run, **{:.0} observations/s**; \
         target {} observations/s on one core: **{}**.\n\n",
        fmt_f0(e.reps),
        e.cpu
            .map_or_else(|| "not pinned".to_string(), |c| format!("pinned to CPU {c}")),
        e.input,
        e.ns / 1e6,
        e.events * 1e9 / e.ns,
        e.bytes * 1e3 / e.ns,
        e.lifecycles * 1e9 / e.ns,
        fmt_f0(e.observations),
        e.engine_ns / 1e6,
        e.observations * 1e9 / e.engine_ns,
        fmt_f0(ENGINE_TARGET_OBS_S),
        if e.observations * 1e9 / e.engine_ns >= ENGINE_TARGET_OBS_S {
            "met"
        } else {
            "MISSED"
        },
    );
    s += &format!(
        "Memory: a fresh process streams {} pod lifecycles ({} events, one repetition \
         generated at a time) through one `Pipeline` and one `PodModel`; \
         /proc/self/status.\n\n\
         Memory run: `{}`\n\n\
         | | |\n| --- | ---: |\n\
         | VmRSS, the recording loaded (before) | {:.1} MiB |\n\
         | VmRSS after {} lifecycles | {:.1} MiB |\n\
         | VmHWM (peak) | {:.1} MiB |\n\
         | pods kept in the model | {} |\n\
         | run time | {:.1} s ({:.0} events/s, {:.0} lifecycles/s) |\n\n",
        fmt_f0(e.mem_lifecycles),
        fmt_f0(e.mem_events),
        e.memory,
        mib(e.rss_before_kib),
        fmt_f0(e.mem_lifecycles),
        mib(e.rss_after_kib),
        mib(e.hwm_kib),
        fmt_f0(e.pods_kept),
        e.mem_seconds,
        e.mem_events / e.mem_seconds,
        e.mem_lifecycles / e.mem_seconds,
    );
    s += "| lifecycles | VmRSS (MiB) | seconds | lifecycles/s since the previous row |\n\
          | ---: | ---: | ---: | ---: |\n";
    let mut prev = (0.0, 0.0);
    for &(l, kib, t) in &e.progress {
        s += &format!(
            "| {} | {:.1} | {:.1} | {:.0} |\n",
            fmt_f0(l),
            mib(kib),
            t,
            (l - prev.0) / (t - prev.1)
        );
        prev = (l, t);
    }
    s += &format!(
        "\nTarget: under {MEMORY_TARGET_MIB} MiB after {} pod lifecycles (VmHWM of the memory \
         run): {:.1} MiB, **{}**.\n",
        fmt_f0(MEMORY_LIFECYCLES),
        mib(e.hwm_kib),
        e.memory_verdict()
    );
    s
}
