//! The tracked processes' lifecycle: a fork (a new process, not a
//! thread) and a process's exit (its last thread's).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};
use nri_trace_common::{EntryKind, Syscall};

use crate::{
    context::{config, group_dead},
    emit::{emit_header, header},
    tracking::tracked,
};

/// task/task_newtask runs in the parent for every new task; only a new
/// process (not a thread: CLONE_THREAD) is a fork worth reporting.
#[tracepoint]
pub fn task_newtask(ctx: TracePointContext) -> u32 {
    const CLONE_THREAD: u64 = 0x0001_0000; // include/uapi/linux/sched.h
    let pid_tgid = bpf_get_current_pid_tgid();
    if tracked((pid_tgid >> 32) as u32).is_none() {
        return 0;
    }
    // Format (events/task/task_newtask/format): pid at 8, clone_flags at 32.
    let flags: u64 = unsafe { ctx.read_at(32) }.unwrap_or(CLONE_THREAD);
    if flags & CLONE_THREAD != 0 {
        return 0;
    }
    let child: i32 = unsafe { ctx.read_at(8) }.unwrap_or(0);
    let hdr = header(EntryKind::Fork, Syscall::Sched, pid_tgid, -1, child, 0);
    emit_header(&hdr, config().wakeup_bytes);
    0
}

#[tracepoint]
pub fn sched_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if tracked((pid_tgid >> 32) as u32).is_none() {
        return 0;
    }
    if group_dead(&ctx, &config(), pid_tgid) {
        let hdr = header(EntryKind::ProcessExit, Syscall::Sched, pid_tgid, -1, 0, 0);
        emit_header(&hdr, config().wakeup_bytes);
    }
    0
}
