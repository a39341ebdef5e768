//! nri-trace kernel programs: capture what a tracked process reads and writes
//! on its tracked unix-socket fds, plus the lifecycle of those fds.
//!
//! Design (measured in docs/benchmarks.md): classic per-syscall tracepoints,
//! **exit only** (except close, see `enter_close`). A `sys_exit_*` tracepoint gives the return value; the
//! syscall's arguments are read from the task's saved user registers
//! (`bpf_task_pt_regs`), which the kernel leaves intact until return to user
//! space on x86_64 (arch/x86/entry/common.c: only `ax` is overwritten). One
//! program per probed syscall instead of an enter/exit pair halves the cost
//! that every *other* process pays on a probed syscall, and the payload is
//! copied after the kernel has touched the pages (reading it at sys_enter can
//! fail with -EFAULT on non-resident pages).
//!
//! Every program first checks the caller's tgid against a direct-mapped array
//! (`TGID_FILTER`), whose lookup the JIT inlines: untracked processes pay a
//! few instructions on top of the tracepoint itself. The same value says
//! where a tracked process's fds live: a row of the `FD_TABLE` array (also
//! inlined) or the `FDS` hash.
//!
//! The parts, in the order a syscall meets them: `maps` (the shared maps),
//! `tracking` (tracked processes and their fds), `context` (the
//! configuration, the syscall's arguments and return value), `emit`
//! (records out to the ring), `data` (the read/write family and the copy
//! of their payload), `socket_fexit` (the fentry backend's data programs,
//! where the kernel allows them: see there), `sockets` (the syscalls that
//! start and stop tracking fds), `process` (fork and exit), `sandbox` (the
//! sandbox probes), `helper_probe` (never attached: which helpers the kernel has) and
//! `floor` (benchmarks only).
#![no_std]
#![no_main]

mod context;
mod data;
mod emit;
mod floor;
mod helper_probe;
mod maps;
mod process;
mod sandbox;
mod socket_fexit;
mod sockets;
mod tracking;

// What the sandbox probes take from the capture's parts (`crate::...`).
use context::{config, group_dead, ret_of, syscall_args};
use emit::{bump, lost, wake_flags};
use maps::{EVENTS, SCRATCH};

/// A program and its fallback twin (`<name>_compat`: no bpf_loop, no
/// bpf_task_pt_regs, for kernels before 5.17; userspace loads one of the
/// two, capture/ebpf.rs `FALLBACK_PROGRAMS`): `$body::<false>` and
/// `$body::<true>` on the same tracepoint context.
macro_rules! with_fallback {
    ($(#[$doc:meta])* $name:ident, $compat:ident, |$ctx:ident| $body:ident($($arg:expr),*)) => {
        $(#[$doc])*
        #[tracepoint]
        pub fn $name($ctx: TracePointContext) -> u32 {
            $body::<false>(&$ctx, $($arg),*)
        }
        $(#[$doc])*
        #[tracepoint]
        pub fn $compat($ctx: TracePointContext) -> u32 {
            $body::<true>(&$ctx, $($arg),*)
        }
    };
}
pub(crate) use with_fallback;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
