//! The floor programs (benchmarks only): programs that do nothing, or
//! only filter, to measure what the design costs before any capture.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use nri_trace_common::counter;

use crate::{emit::bump, tracking::tracked};

/// Does nothing: attached to the same tracepoints as the real programs, it
/// measures the design's floor (tracepoint + dispatch cost) in benchmarks.
#[tracepoint]
pub fn floor_empty(_ctx: TracePointContext) -> u32 {
    0
}

/// Does nothing, on sched/sched_process_exec only: the floor of the exec
/// probe (`sandbox_exec`). A program of its own because the kernel's BPF
/// statistics (`run_time_ns`, `run_cnt`) are per program, and `floor_empty`
/// also runs on every probed syscall.
#[tracepoint]
pub fn floor_exec(_ctx: TracePointContext) -> u32 {
    0
}

/// The raw-tracepoint design's floor: runs on every syscall of every process.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn floor_raw_empty(_ctx: RawTracePointContext) -> i32 {
    0
}

/// The raw-tracepoint design with the same tgid filter the real programs
/// use: what "raw sys_exit + filter" costs every process.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn floor_raw_filtered(_ctx: RawTracePointContext) -> i32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if tracked(tgid).is_some() {
        bump(counter::READ_FAULTS, 0);
    }
    0
}
