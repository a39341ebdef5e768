//! The report's own sections: the run's header (command, machine, load)
//! and the targets of the issue checked against what the parts measured.

use std::{env, fs, process::Command, thread};

use super::{
    criterion::{BENCH_CPU, HELPER_CPU},
    nri_decode::NriDecode,
    paced::{PacedCost, PACED_SIZES, PACED_WRITES_S},
    probe::{ProbeCost, State},
    tables::{fmt_f0, verdict},
    trace_engine::{TraceEngine, MEMORY_TARGET_MIB},
    traced::{TracedCost, TRACED_CASES},
};

// ---------------------------------------------------------------- report

pub(super) fn header_section() -> String {
    let cmd = format!(
        "cargo xtask {}",
        env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    let nproc = thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "## Run\n\n\
         - command: `{cmd}`\n\
         - date: {date}\n\
         - machine: {nproc} CPUs, {cpu}, kernel {}\n\
         - load average at the start: {}\n\
         - measured process pinned to CPU {BENCH_CPU} (`taskset`); captures, probes holders \
         and bpftrace on CPU {HELPER_CPU}\n",
        kernel.trim(),
        loadavg()
    )
}

/// /proc/loadavg's 1, 5 and 15 minute figures: other work on the machine
/// during the run shows here.
pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The targets of the issue, checked against what was measured.
pub(super) fn targets_section(
    p: Option<&ProbeCost>,
    t: Option<&TracedCost>,
    paced: Option<&PacedCost>,
    d: Option<&NriDecode>,
    e: Option<&TraceEngine>,
) -> String {
    let mut s = String::from("## Targets\n\n| target | measured | |\n| --- | --- | --- |\n");
    if let Some(p) = p {
        // Paired per round, like the added costs.
        let (dw, dg) = p.diff(State::NriTrace, State::FloorClassic);
        let (bw, _) = p.diff(State::NriTrace, State::BpftracePair);
        s += &format!(
            "| nri-trace within 35 ns of floor-classic, write | {dw:+.1} ns | {} |\n\
             | nri-trace within 35 ns of floor-classic, getppid | {dg:+.1} ns | {} |\n\
             | nri-trace below the bpftrace pair, write | {bw:+.1} ns vs the pair | {} |\n",
            verdict(dw <= 35.0),
            verdict(dg <= 35.0),
            verdict(bw < 0.0)
        );
        let (sw, sg) = p.diff(State::Sandbox, State::FloorSandbox);
        let su = p.diff_unlinkat(State::Sandbox, State::FloorSandbox);
        let sx = p.exec_added();
        let (sbw, _) = p.diff(State::Sandbox, State::BpftracePair);
        s += &format!(
            "| nri-trace + sandbox probes within 35 ns of floor-sandbox, write | {sw:+.1} ns | {} |\n\
             | nri-trace + sandbox probes within 35 ns of floor-sandbox, getppid | {sg:+.1} ns | {} |\n\
             | nri-trace + sandbox probes within 35 ns of floor-sandbox, unlinkat (a probed path syscall) | {su:+.1} ns | {} |\n\
             | the exec probe within 35 ns of its floor, per exec (BPF statistics) | {sx:+.1} ns | {} |\n\
             | nri-trace + sandbox probes below the bpftrace pair, write | {sbw:+.1} ns vs the pair | {} |\n",
            verdict(sw <= 35.0),
            verdict(sg <= 35.0),
            verdict(su <= 35.0),
            verdict(sx <= 35.0),
            verdict(sbw < 0.0)
        );
    }
    if let Some(t) = t {
        for (i, &(_, size)) in TRACED_CASES.iter().enumerate() {
            let Some(size) = size else { continue };
            let added = t.added(i);
            s += &format!(
                "| under 1 us added per captured write, {size} B | {added:+.1} ns | {} |\n",
                verdict(added < 1000.0)
            );
        }
        s += &t.fit().target_row("under 1 us per captured write");
    }
    if let Some(p) = paced {
        for (i, size) in PACED_SIZES.iter().enumerate() {
            let added = p.added(i);
            s += &format!(
                "| under 1 us added per captured write at {PACED_WRITES_S:.0} writes/s, {size} B \
                 | {added:+.1} ns | {} |\n",
                verdict(added < 1000.0)
            );
        }
        s += &p.fit().target_row(&format!(
            "under 1 us per captured write at {PACED_WRITES_S:.0} writes/s"
        ));
    }
    if let Some(d) = d {
        s += &format!(
            "| NRI decoding: framing + bookkeeping below protobuf decoding \
             (full - prost_only < prost_only) | {:.1} us vs {:.1} us ({:.2} x) | {} |\n",
            d.rest() / 1e3,
            d.prost() / 1e3,
            d.rest() / d.prost(),
            verdict(d.rest() < d.prost())
        );
    }
    if let Some(e) = e {
        s += &format!(
            "| engine memory after {} pod lifecycles under {} MiB (VmHWM) | {:.1} MiB | {} |\n",
            fmt_f0(e.mem_lifecycles),
            MEMORY_TARGET_MIB,
            e.hwm_kib / 1024.0,
            e.memory_verdict()
        );
    }
    s
}
