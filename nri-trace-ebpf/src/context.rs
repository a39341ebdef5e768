//! What a program reads of its syscall and task: the configuration
//! userspace set, the syscall's arguments (from the saved user registers,
//! or by hand for the fallback programs), a `sys_exit_*` record's return
//! value, and whether an exiting task is its process's last thread.

use aya_ebpf::{
    helpers::{
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_get_current_task_btf, bpf_task_pt_regs},
    },
    programs::TracePointContext,
    EbpfContext,
};
use nri_trace_common::{Config, DEFAULT_SNAP, KERNEL_EVENTS_EXPLAINING};

use crate::maps::CONFIG;

#[inline(always)]
pub(crate) fn config() -> Config {
    match CONFIG.get(0) {
        Some(c) => *c,
        None => Config {
            snap_len: DEFAULT_SNAP,
            wakeup_bytes: 0,
            exit_code_off: 0,
            sandbox_rate: Config::DEFAULT_SANDBOX_RATE,
            signal_mask: Config::DEFAULT_SIGNAL_MASK,
            task_stack_off: 0,
            exit_group_dead_off: 0,
            task_signal_off: 0,
            signal_live_off: 0,
            kernel_events: KERNEL_EVENTS_EXPLAINING,
            pad: 0,
        },
    }
}

/// struct pt_regs offsets on x86_64 (arch/x86/include/asm/ptrace.h).
const R10: usize = 7 * 8;
const DX: usize = 12 * 8;
const SI: usize = 13 * 8;
const DI: usize = 14 * 8;
const ORIG_AX: usize = 15 * 8;

/// The current task's saved user registers (its struct pt_regs).
/// bpf_task_pt_regs returns a BTF pointer (PTR_TO_BTF_ID of struct
/// pt_regs): the verifier lets the program load from it directly (the JIT
/// emits fault-checked loads), no bpf_probe_read_kernel call.
#[inline(always)]
fn user_regs() -> Option<*const u8> {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const u8;
    (!regs.is_null()).then_some(regs)
}

#[inline(always)]
fn reg(regs: *const u8, off: usize) -> u64 {
    unsafe { core::ptr::read_volatile(regs.add(off) as *const u64) }
}

/// The current task's syscall arguments 0..=3 (x86_64 ABI: di, si, dx, r10),
/// read from its saved user registers. `COMPAT`: the fallback programs'
/// way, for kernels without bpf_task_pt_regs (5.15) and
/// bpf_get_current_task_btf (5.11).
#[inline(always)]
pub(crate) fn syscall_args<const COMPAT: bool>() -> Option<[u64; 4]> {
    if COMPAT {
        return syscall_args_from_stack();
    }
    user_regs().map(args_of)
}

/// Syscall arguments 0..=3 in saved user registers `regs` (x86_64 ABI:
/// di, si, dx, r10).
#[inline(always)]
fn args_of(regs: *const u8) -> [u64; 4] {
    [reg(regs, DI), reg(regs, SI), reg(regs, DX), reg(regs, R10)]
}

/// The number of the syscall the current task is in (`orig_ax`, which the
/// x86_64 entry code saves and nothing overwrites until return; -1 outside
/// a syscall, arch/x86/entry/entry_64.S) and its arguments 0..=3: what a
/// program on a kernel function (`socket_fexit`) knows of the syscall that
/// called it.
#[inline(always)]
pub(crate) fn current_syscall() -> Option<(u64, [u64; 4])> {
    let regs = user_regs()?;
    Some((reg(regs, ORIG_AX), args_of(regs)))
}

/// The syscall arguments as bpf_task_pt_regs finds them, by hand: the user
/// registers are saved at the top of the task's kernel stack,
/// `task_pt_regs(task)` = `task->stack + THREAD_SIZE` minus one `struct
/// pt_regs` (arch/x86/include/asm/processor.h; TOP_OF_KERNEL_STACK_PADDING
/// is 0 on x86_64 before FRED, 6.9). THREAD_SIZE is 16 KiB on x86_64
/// without KASAN (arch/x86/include/asm/page_64_types.h), as Debian builds
/// it. `task->stack`'s offset comes from the kernel's BTF (`Config`).
#[inline(always)]
fn syscall_args_from_stack() -> Option<[u64; 4]> {
    const THREAD_SIZE: u64 = 16 * 1024;
    const PT_REGS_SIZE: u64 = 21 * 8;
    let off = config().task_stack_off;
    if off == 0 {
        return None;
    }
    let task = unsafe { bpf_get_current_task() };
    let stack: u64 = unsafe { bpf_probe_read_kernel((task + off as u64) as *const u64) }.ok()?;
    let regs = stack + THREAD_SIZE - PT_REGS_SIZE;
    // Words 7 (r10) to 14 (di) of struct pt_regs in one read.
    let w: [u64; 8] = unsafe { bpf_probe_read_kernel((regs + 7 * 8) as *const [u64; 8]) }.ok()?;
    Some([w[7], w[6], w[5], w[0]])
}

/// Whether the task running sched/sched_process_exit is the last thread of
/// its process. Its record's `group_dead` says so where it has one (6.18
/// here; not 6.12 and older); else
/// `task->signal->live`, which do_exit decrements to 0 for the last thread
/// before the tracepoint (kernel/exit.c). Two threads exiting at once may
/// both see 0 there: a process's exit can then be reported twice, which
/// its reader takes as one. Without the offsets, the thread group leader's
/// exit stands for the process's.
#[inline(always)]
pub(crate) fn group_dead(ctx: &TracePointContext, cfg: &Config, pid_tgid: u64) -> bool {
    if cfg.exit_group_dead_off != 0 {
        let v: u8 = unsafe { ctx.read_at(cfg.exit_group_dead_off as usize) }.unwrap_or(0);
        return v != 0;
    }
    if cfg.task_signal_off != 0 {
        let task = unsafe { bpf_get_current_task() };
        let signal = unsafe {
            bpf_probe_read_kernel((task + cfg.task_signal_off as u64) as *const u64)
        };
        if let Ok(signal) = signal {
            let live = unsafe {
                bpf_probe_read_kernel((signal + cfg.signal_live_off as u64) as *const i32)
            };
            if let Ok(live) = live {
                return live == 0;
            }
        }
    }
    pid_tgid as u32 == (pid_tgid >> 32) as u32
}

#[inline(always)]
pub(crate) fn ret_of(ctx: &TracePointContext) -> i64 {
    // sys_exit_* format: `long ret` at offset 16 (events/syscalls/*/format).
    // A tracepoint program may load from its context directly
    // (kernel/trace/bpf_trace.c tp_prog_is_valid_access): no helper call.
    unsafe { *(ctx.as_ptr().add(16) as *const i64) }
}
