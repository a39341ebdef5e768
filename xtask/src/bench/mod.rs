//! `cargo xtask bench`: what nri-trace's probes cost, measured around real
//! attachments, printed as markdown tables for docs/benchmarks.md.
//!
//! Twelve parts (see docs/benchmarks.md for how to read them), each in its
//! own file, whose doc says what it measures: probe (`probe.rs`, with the
//! design comparison), traced, paced, throughput, mix (with the break-even
//! share), nri-decode, cri-decode, trace-engine, tui-frame, named-span, and
//! - nri-rate: nri-trace (`debug nri -o json`) tracing a ttrpc NRI peer
//!   at 10,000 calls/s and a ramp above it: calls sent and decoded, lost
//!   records, nri-trace's CPU per call (issue 23 item 4; xtask/src/
//!   nri_rate.rs);
//! - idle: nri-trace's CPU on the same peer's sockets while nothing
//!   happens, then a short run its sleeping reader must wake for (issue
//!   34 item 3; xtask/src/nri_rate.rs);
//! - cluster, opt-in: nri-trace's CPU per call with OTLP export off and
//!   on, and kubelet's runtime latency without and with nri-trace, while
//!   kubelet starts and deletes pods on the lab's one-node cluster (issues
//!   32 and 33; xtask/src/cluster_cost.rs).
//!
//! This file holds the arguments and runs the parts in order. What they
//! share: `criterion.rs` (the criterion benches built and run pinned to a
//! CPU, the tool checks), `child.rs` (child processes, the capture started
//! and stopped), `rounds.rs` (medians over rounds), `fit.rs` (the line
//! through the write sizes), `tables.rs` (table cells), `report.rs` (the
//! run's header and the targets) and `json.rs`.
//!
//! Every probe measurement runs the criterion benchmark `nri-trace/benches/
//! syscall_cost.rs` (built once) pinned to one CPU; everything attached runs
//! on the other CPU so that its own work does not land in the measurement.
//! States are interleaved over rounds and medians over rounds are reported,
//! so slow drift of the VM spreads over all states instead of biasing one.

mod child;
mod cri_decode;
mod criterion;
mod fit;
mod json;
mod mix;
mod named_span;
mod nri_decode;
mod paced;
mod probe;
mod report;
mod rounds;
mod tables;
mod throughput;
mod trace_engine;
mod traced;
mod tui_frame;
mod write_cost;

use std::{fs, time::Instant};

use anyhow::Result;

use self::{
    cri_decode::{cri_decode, cri_decode_section},
    criterion::Ctx,
    mix::{mix_section, syscall_mix},
    named_span::{named_span, named_span_section},
    nri_decode::{nri_decode, nri_decode_section},
    paced::{paced_cost, paced_section},
    probe::{design_section, probe_cost, probe_section},
    report::{header_section, targets_section},
    throughput::{throughput, throughput_section},
    trace_engine::{trace_engine, trace_engine_section},
    traced::{traced_cost, traced_section},
    tui_frame::{tui_frame, tui_frame_section},
};
pub(crate) use self::{
    criterion::work_dir,
    json::{json_number, json_string},
    report::loadavg,
};

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Rounds over all states (interleaved); medians over rounds are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Rounds of the paced part. A 3 s paced round's added cost moves by
    /// about 0.2 us (standard deviation) from round to round on this VM,
    /// several times the flat-out loop's spread, so its median needs more
    /// rounds than the other parts (docs/benchmarks.md).
    #[arg(long, default_value_t = 9)]
    paced_rounds: usize,
    /// Seconds of system-wide syscall counting for the mix.
    #[arg(long, default_value_t = 10)]
    mix_seconds: u64,
    /// Shell command to run while the syscall mix is counted (a workload).
    #[arg(long, value_name = "CMD")]
    mix_while: Option<String>,
    /// Seconds each throughput writer runs.
    #[arg(long, default_value_t = 3.0)]
    throughput_seconds: f64,
    /// Bisection steps when searching the highest rate without loss.
    #[arg(long, default_value_t = 6)]
    loss_steps: usize,
    /// Parts to run (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "probe,traced,paced,throughput,mix,nri-decode,cri-decode,trace-engine,tui-frame,named-span,nri-rate,idle"
    )]
    only: Vec<Part>,
    /// Seconds of the idle part's quiet window, per mode.
    #[arg(long, default_value_t = 30.0)]
    idle_seconds: f64,
    /// Pods per run of the cluster part.
    #[arg(long, default_value_t = 20)]
    cluster_pods: usize,
    /// Rounds of each mode (no nri-trace, export off, export on) in the
    /// cluster part.
    #[arg(long, default_value_t = 3)]
    cluster_rounds: usize,
    /// Pods the cluster-steady part makes and keeps.
    #[arg(long, default_value_t = 100)]
    steady_pods: usize,
    /// Seconds of each window of the cluster-steady part.
    #[arg(long, default_value_t = 600.0)]
    steady_seconds: f64,
    /// Rounds of both modes (without, with nri-trace) in the
    /// cluster-steady part.
    #[arg(long, default_value_t = 2)]
    steady_rounds: usize,
    /// Seconds of paced NRI calls per rate in the nri-rate part.
    #[arg(long, default_value_t = 10.0)]
    rate_seconds: f64,
    /// Pod lifecycles the NRI peer keeps in flight (nri-rate part).
    #[arg(long, default_value_t = 16)]
    rate_in_flight: usize,
    /// Rates (calls/s) tried after 10,000 in the nri-rate part, ascending,
    /// until records are lost or the peer cannot keep up.
    #[arg(long, value_delimiter = ',', default_value = "20000,25000,30000,40000")]
    rates: Vec<f64>,
    /// Starts of `nri-trace watch` per mode in the named-span part.
    #[arg(long, default_value_t = 5)]
    span_rounds: usize,
    /// Rounds of write-cost (no probes, tracepoint, fentry) in each VM of
    /// the kernels part.
    #[arg(long, default_value_t = 3)]
    kernel_rounds: u32,
    /// Very short criterion runs: checks the harness, the numbers are noise.
    #[arg(long)]
    quick: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Part {
    Probe,
    Traced,
    Paced,
    Throughput,
    Mix,
    NriDecode,
    CriDecode,
    TraceEngine,
    TuiFrame,
    NamedSpan,
    NriRate,
    Idle,
    /// Opt-in: brings the lab's cluster up (xtask/src/cluster_cost.rs).
    Cluster,
    /// Opt-in: the cluster holding many pods for long windows
    /// (xtask/src/cluster_steady.rs).
    ClusterSteady,
    /// Opt-in: an untraced write's cost per backend in qemu on Debian's
    /// kernels (bench/write_cost.rs).
    Kernels,
}

impl Part {
    /// Parts that attach probes around the criterion loops: they need
    /// root, the tools and the eBPF build. named-span runs `nri-trace
    /// watch` itself (root, and the build it makes) and none of the tools.
    fn attaches_probes(self) -> bool {
        !matches!(
            self,
            Part::NriDecode
                | Part::CriDecode
                | Part::TraceEngine
                | Part::TuiFrame
                | Part::NamedSpan
                | Part::NriRate
                | Part::Idle
                | Part::Cluster
                | Part::ClusterSteady
                | Part::Kernels
        )
    }
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    let started = Instant::now();
    // Everything but the decode and engine parts attaches probes: only then
    // are root, the tools and the eBPF build needed.
    let ctx = if a.only.iter().any(|p| p.attaches_probes()) {
        Some(Ctx::prepare(a.quick)?)
    } else {
        None
    };
    let mut report = vec![header_section()];
    let probe = match &ctx {
        Some(ctx) if a.only.contains(&Part::Probe) => {
            let p = probe_cost(ctx, a.rounds)?;
            report.push(probe_section(&p));
            Some(p)
        }
        _ => None,
    };
    let traced = match &ctx {
        Some(ctx) if a.only.contains(&Part::Traced) => {
            let t = traced_cost(ctx, a.rounds)?;
            report.push(traced_section(&t));
            Some(t)
        }
        _ => None,
    };
    let paced = match &ctx {
        Some(ctx) if a.only.contains(&Part::Paced) => {
            let p = paced_cost(ctx, a.paced_rounds, a.throughput_seconds)?;
            report.push(paced_section(&p, a.throughput_seconds));
            Some(p)
        }
        _ => None,
    };
    if let Some(ctx) = ctx.as_ref().filter(|_| a.only.contains(&Part::Throughput)) {
        let t = throughput(ctx, a.throughput_seconds, a.loss_steps)?;
        report.push(throughput_section(&t, a.throughput_seconds));
    }
    if let Some(p) = &probe {
        report.push(design_section(p));
    }
    if a.only.contains(&Part::Mix) {
        let mix = syscall_mix(a.mix_seconds, a.mix_while.as_deref())?;
        report.push(mix_section(&mix, probe.as_ref(), a.mix_while.as_deref()));
    }
    if a.only.contains(&Part::NamedSpan) {
        report.push(named_span_section(&named_span(a.span_rounds)?));
    }
    if a.only.contains(&Part::NriRate) {
        let r = crate::nri_rate::nri_rate(a.rate_seconds, a.rate_in_flight, &a.rates)?;
        report.push(crate::nri_rate::nri_rate_section(&r));
    }
    if a.only.contains(&Part::Cluster) {
        let r = crate::cluster_cost::cluster_cost(a.cluster_pods, a.cluster_rounds)?;
        report.push(crate::cluster_cost::cluster_cost_section(&r));
    }
    if a.only.contains(&Part::ClusterSteady) {
        let r = crate::cluster_steady::cluster_steady(
            a.steady_pods,
            a.steady_seconds,
            a.steady_rounds,
        )?;
        report.push(crate::cluster_steady::cluster_steady_section(&r));
    }
    if a.only.contains(&Part::Kernels) {
        let r = write_cost::write_cost(a.kernel_rounds)?;
        report.push(write_cost::write_cost_section(&r, a.kernel_rounds));
    }
    if a.only.contains(&Part::Idle) {
        let r = crate::nri_rate::idle_cost(a.idle_seconds)?;
        report.push(crate::nri_rate::idle_section(&r));
    }
    // Last: they need no probe, and nothing is attached any more.
    let decode = if a.only.contains(&Part::NriDecode) {
        let d = nri_decode(a.quick)?;
        report.push(nri_decode_section(&d));
        Some(d)
    } else {
        None
    };
    if a.only.contains(&Part::CriDecode) {
        report.push(cri_decode_section(&cri_decode(a.quick)?));
    }
    let engine = if a.only.contains(&Part::TraceEngine) {
        let e = trace_engine(a.quick)?;
        report.push(trace_engine_section(&e));
        Some(e)
    } else {
        None
    };
    if a.only.contains(&Part::TuiFrame) {
        report.push(tui_frame_section(&tui_frame(a.quick)?));
    }
    // Only parts with a target (cri-decode has none) make rows.
    if probe.is_some()
        || traced.is_some()
        || paced.is_some()
        || decode.is_some()
        || engine.is_some()
    {
        report.push(targets_section(
            probe.as_ref(),
            traced.as_ref(),
            paced.as_ref(),
            decode.as_ref(),
            engine.as_ref(),
        ));
    }
    report.push(format!("Load average at the end: {}\n", loadavg()));
    let text = report.join("\n");
    let work = work_dir()?;
    let out = work.join("report.md");
    fs::write(&out, &text)?;
    println!("{text}");
    eprintln!(
        "bench: done in {:.0} s; report also in {}",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}
