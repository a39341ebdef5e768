//! The fentry backend's data programs: fexit on `unix_stream_sendmsg` and
//! `unix_stream_recvmsg` (net/unix/af_unix.c), the `proto_ops` of a unix
//! stream socket that every data syscall on one ends in (write, writev,
//! sendto and sendmsg through `sock_sendmsg`; read, readv, recvfrom and
//! recvmsg through `sock_recvmsg`, once per syscall). A write to a file,
//! a pipe or a TCP socket runs neither, so it runs no BPF at all; a unix
//! socket write of an untracked process pays the trampoline and the tgid
//! check, where the tracepoint backend's `sys_exit_*` programs run for
//! every read and write of every process.
//!
//! The capture is the tracepoint backend's, record for record: the
//! syscall and its arguments come from the task's saved user registers, as
//! the exit tracepoints read them (`context::current_syscall`), the
//! connection from the fd in argument 0, the bytes from the user buffers
//! the syscall named (`data::capture_data`). The kernel's own `struct
//! msghdr` is not read: its iov_iter has advanced by the time fexit runs,
//! and its layout differs between kernels. A call that comes from no data
//! syscall of ours (io_uring, splice, sendfile; the tracepoint backend
//! captures none of those either) is left alone.
//!
//! Needs bpf_loop and bpf_task_pt_regs (5.17): userspace attaches these
//! only where the full programs load (capture/ebpf.rs).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::fexit, programs::FExitContext, EbpfContext,
};
use nri_trace_common::Syscall;

use crate::{
    context::current_syscall,
    data::{capture_data, conn_seq, Shape},
    tracking::tracked,
};

/// x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl) of the
/// data syscalls, with what each is to the capture.
#[inline(always)]
fn data_syscall(nr: u64) -> Option<(Syscall, Shape)> {
    Some(match nr {
        0 => (Syscall::Read, Shape::Contiguous),
        1 => (Syscall::Write, Shape::Contiguous),
        19 => (Syscall::Readv, Shape::Iovecs),
        20 => (Syscall::Writev, Shape::Iovecs),
        44 => (Syscall::Sendto, Shape::Contiguous),
        45 => (Syscall::Recvfrom, Shape::Contiguous),
        46 => (Syscall::Sendmsg, Shape::Msghdr),
        47 => (Syscall::Recvmsg, Shape::Msghdr),
        _ => return None,
    })
}

/// The return value of the traced function, an `int`, at slot `slot` of
/// the fexit context (the function's arguments, one u64 each, then its
/// return value: kernel/bpf/trampoline.c, arch_prepare_bpf_trampoline).
/// Only the low 32 bits are the int's (the x86_64 ABI leaves the rest of
/// rax undefined).
#[inline(always)]
fn int_return(ctx: &FExitContext, slot: usize) -> i64 {
    let v = unsafe { *(ctx.as_ptr() as *const u64).add(slot) };
    i64::from(v as u32 as i32)
}

#[inline(always)]
fn data_fexit(ctx: &FExitContext, inbound: bool, ret: i64) -> u32 {
    if ret <= 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some((nr, args)) = current_syscall() else {
        return 0;
    };
    let Some((sc, shape)) = data_syscall(nr) else {
        return 0;
    };
    if sc.is_inbound() != inbound {
        return 0;
    }
    let Some(seq) = conn_seq(t, args[0] as u32, inbound) else {
        return 0;
    };
    capture_data::<_, false>(ctx, sc, shape, pid_tgid, args, seq, ret);
    0
}

/// `int unix_stream_sendmsg(struct socket *sock, struct msghdr *msg,
/// size_t len)`: its return value follows the three arguments.
#[fexit(function = "unix_stream_sendmsg")]
pub fn fexit_sendmsg(ctx: FExitContext) -> u32 {
    data_fexit(&ctx, false, int_return(&ctx, 3))
}

/// `int unix_stream_recvmsg(struct socket *sock, struct msghdr *msg,
/// size_t size, int flags)`: its return value follows the four arguments.
#[fexit(function = "unix_stream_recvmsg")]
pub fn fexit_recvmsg(ctx: FExitContext) -> u32 {
    data_fexit(&ctx, true, int_return(&ctx, 4))
}
