//! The data syscalls (read, write, recvfrom, sendto, readv, writev,
//! recvmsg, sendmsg) on tracked connections: their tracepoint programs
//! and the copy of their payload into the ring, in one step for a small
//! buffer, else under bpf_loop or, in the fallback programs, by tail calls
//! (`copy_tail`). The fentry backend's programs (`socket_fexit`) capture
//! through the same `capture_data`.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, generated::bpf_loop},
    macros::{map, tracepoint},
    maps::{PerCpuArray, ProgramArray},
    programs::TracePointContext,
    EbpfContext,
};
use nri_trace_common::{
    EntryHeader, EntryKind, Syscall, COMPAT_TAIL_STEPS, FD_CONN, FLAG_LAST, FLAG_TRUNCATED,
    MAX_CHUNK, MAX_IOV, MAX_SNAP,
};

use crate::{
    context::{config, ret_of, syscall_args},
    emit::{emit_chunk, emit_header, emit_scratch, header},
    tracking::{fd_get, tracked, Tracked},
    with_fallback,
};

/// Where a data syscall's bytes are (its man page's arguments).
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    /// read/write/recvfrom/sendto: one buffer at arg 1.
    Contiguous,
    /// readv/writev: an iovec array at arg 1, its count in arg 2.
    Iovecs,
    /// recvmsg/sendmsg: a struct msghdr at arg 1.
    Msghdr,
}

/// The next sequence number of tracked connection `fd` of `t` for this
/// direction; None if `fd` is not a tracked connection.
#[inline(always)]
pub(crate) fn conn_seq(t: Tracked, fd: u32, inbound: bool) -> Option<u32> {
    let st = fd_get(t, fd)?;
    if unsafe { (*st).flags } & FD_CONN == 0 {
        return None;
    }
    Some(unsafe {
        let p = if inbound {
            &raw mut (*st).seq_in
        } else {
            &raw mut (*st).seq_out
        };
        let v = *p;
        *p = v.wrapping_add(1);
        v
    })
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Iovec {
    base: u64,
    len: u64,
}

/// State of one syscall's payload copy, advanced by `copy_step` under
/// bpf_loop. A contiguous buffer is a single pre-fetched segment.
#[repr(C)]
pub struct CopyState {
    hdr: EntryHeader,
    /// Current segment: next user address and bytes left in it.
    base: u64,
    left: u64,
    /// iovec array still to fetch (0 entries for contiguous buffers).
    iov_ptr: u64,
    iov_cnt: u64,
    idx: u64,
    /// Bytes to capture in total (min(ret, snap)) and captured so far.
    total: u32,
    off: u32,
    flags: u32,
    wakeup: u32,
}

/// The copy state lives in a map, not on the stack: the verifier knows
/// nothing of a map value's contents, so it walks every branch of the
/// loop body. 6.1's verifier checks a bpf_loop callback once, with the
/// caller's state at the call (newer ones go on until the callback's
/// state converges): with the state on the stack, 6.1 saw `left == 0`
/// (no iovec fetched yet) as a constant, dropped the copy branch as dead
/// code, and a readv's bytes were never captured (6.12 captured them).
#[map]
static COPY_STATE: PerCpuArray<CopyState> = PerCpuArray::with_max_entries(1, 0);

/// One bpf_loop step: fetch the next iovec, or copy one chunk. Running the
/// copy as a bpf_loop callback lets the verifier check the body once;
/// an unrolled loop over 256 chunks exceeds its 1M-instruction budget.
/// `ctx` points at a stack slot holding the `COPY_STATE` value's address.
#[inline(never)]
extern "C" fn copy_step(_index: u64, ctx: *mut c_void) -> i64 {
    copy_one::<false>(unsafe { &mut **(ctx as *mut *mut CopyState) })
}

/// The body of one copy step (`copy_step`); 1 ends the loop. `COMPAT`
/// copies every chunk through the scratch buffer (`emit_scratch`).
#[inline(always)]
fn copy_one<const COMPAT: bool>(st: &mut CopyState) -> i64 {
    if st.off >= st.total {
        return 1;
    }
    if st.left == 0 {
        if st.idx >= st.iov_cnt || st.idx >= MAX_IOV as u64 {
            return 1;
        }
        let Ok(v) = (unsafe { bpf_probe_read_user((st.iov_ptr + st.idx * 16) as *const Iovec) })
        else {
            return 1;
        };
        st.idx += 1;
        st.base = v.base;
        st.left = v.len;
        return 0;
    }
    let n = ((st.total - st.off) as u64)
        .min(st.left)
        .min(MAX_CHUNK as u64) as u32;
    let last = if st.off + n >= st.total { FLAG_LAST } else { 0 };
    if COMPAT {
        emit_scratch(&st.hdr, st.base, n, st.off, st.flags | last, st.wakeup);
    } else {
        emit_chunk(&st.hdr, st.base, n, st.off, st.flags | last, st.wakeup);
    }
    st.off += n;
    st.base += n as u64;
    st.left -= n as u64;
    0
}

/// Capture the payload of a data syscall that returned `ret` bytes.
#[inline(always)]
fn capture_payload<C: EbpfContext, const COMPAT: bool>(
    ctx: &C,
    sc: Syscall,
    pid_tgid: u64,
    fd: u32,
    seq: u32,
    ret: i64,
    seg: Iovec,
    iov: Iovec,
) {
    let cfg = config();
    let snap = cfg.snap_len.min(MAX_SNAP);
    let total = (ret as u64).min(snap as u64) as u32;
    let flags = if (ret as u64) > total as u64 {
        FLAG_TRUNCATED
    } else {
        0
    };
    let hdr = header(EntryKind::Data, sc, pid_tgid, fd as i32, seq as i32, ret);
    // Most NRI/CRI syscalls move one buffer of less than a chunk: copy it
    // here, before building the loop state, and skip bpf_loop and its
    // indirect callback calls.
    if seg.len >= total as u64 && total as usize <= MAX_CHUNK {
        emit_chunk(&hdr, seg.base, total, 0, flags | FLAG_LAST, cfg.wakeup_bytes);
        return;
    }
    let Some(st) = COPY_STATE.get_ptr_mut(0) else {
        return;
    };
    let st = unsafe { &mut *st };
    *st = CopyState {
        hdr,
        base: seg.base,
        left: seg.len,
        iov_ptr: iov.base,
        iov_cnt: iov.len,
        idx: 0,
        total,
        off: 0,
        flags,
        wakeup: cfg.wakeup_bytes,
    };
    const STEPS: u32 = MAX_SNAP / MAX_CHUNK as u32 + MAX_IOV;
    if COMPAT {
        // No bpf_loop (before 5.17): `copy_tail` copies, in runs of a few
        // steps. A tail call does not return unless it fails (no program
        // in the slot): then the copy ends here, marked truncated.
        unsafe { COPY_TAIL.tail_call(ctx, 0) };
    } else {
        let mut ctx: *mut CopyState = st;
        unsafe {
            bpf_loop(
                STEPS,
                copy_step as *mut c_void,
                &mut ctx as *mut *mut CopyState as *mut c_void,
                0,
            )
        };
    }
    copy_done(st);
}

/// The end of a syscall's copy: if it ran out of iovecs we may copy (or
/// could not read one, or of steps), close the syscall with an empty
/// record so userspace knows bytes are missing.
#[inline(always)]
fn copy_done(st: &CopyState) {
    if st.off < st.total {
        let mut end = st.hdr;
        end.offset = st.off;
        end.flags = st.flags | FLAG_TRUNCATED | FLAG_LAST;
        emit_header(&end, st.wakeup);
    }
}

/// The fallback programs' copy loop, continued by tail calls: slot 0 holds
/// `copy_tail` (userspace puts it there when it loads the fallback
/// programs).
#[map]
static COPY_TAIL: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// The fallback programs' copy (no bpf_loop, before 5.17): up to
/// `COMPAT_TAIL_STEPS` steps of the `COPY_STATE` copy, then a tail call
/// to itself for the next ones; the kernel's tail-call limit ends it after
/// `COMPAT_TAIL_RUNS` runs. The verifier checks the few steps once, where
/// one loop over all of them exceeded 5.10's 1M-instruction budget.
#[tracepoint]
pub fn copy_tail(ctx: TracePointContext) -> u32 {
    let Some(st) = COPY_STATE.get_ptr_mut(0) else {
        return 0;
    };
    let st = unsafe { &mut *st };
    for _ in 0..COMPAT_TAIL_STEPS {
        if copy_one::<true>(st) != 0 {
            copy_done(st);
            return 0;
        }
    }
    unsafe { COPY_TAIL.tail_call(&ctx, 0) };
    // The tail-call limit: the copy ends here.
    copy_done(st);
    0
}

/// Capture the `ret` bytes data syscall `sc` moved on tracked connection
/// `args[0]` (sequence number `seq`), found where `shape` says. One body
/// for the tracepoint programs (`data_exit`) and the fentry backend's
/// (`socket_fexit`).
#[inline(always)]
pub(crate) fn capture_data<C: EbpfContext, const COMPAT: bool>(
    ctx: &C,
    sc: Syscall,
    shape: Shape,
    pid_tgid: u64,
    args: [u64; 4],
    seq: u32,
    ret: i64,
) {
    let none = Iovec { base: 0, len: 0 };
    let (seg, iov) = match shape {
        Shape::Contiguous => (
            Iovec {
                base: args[1],
                len: ret as u64,
            },
            none,
        ),
        Shape::Iovecs => (
            none,
            Iovec {
                base: args[1],
                len: args[2],
            },
        ),
        Shape::Msghdr => {
            // struct user_msghdr (include/linux/socket.h): msg_iov at 16,
            // msg_iovlen at 24.
            let Ok(m) = (unsafe { bpf_probe_read_user((args[1] + 16) as *const [u64; 2]) })
            else {
                return;
            };
            (
                none,
                Iovec {
                    base: m[0],
                    len: m[1],
                },
            )
        }
    };
    capture_payload::<C, COMPAT>(ctx, sc, pid_tgid, args[0] as u32, seq, ret, seg, iov);
}

/// A data syscall's exit tracepoint: its bytes if the caller is tracked
/// and the fd a tracked connection.
#[inline(always)]
fn data_exit<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall, shape: Shape) -> u32 {
    let ret = ret_of(ctx);
    if ret <= 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some(args) = syscall_args::<COMPAT>() else {
        return 0;
    };
    let Some(seq) = conn_seq(t, args[0] as u32, sc.is_inbound()) else {
        return 0;
    };
    capture_data::<_, COMPAT>(ctx, sc, shape, pid_tgid, args, seq, ret);
    0
}

with_fallback!(exit_read, exit_read_compat, |ctx| data_exit(Syscall::Read, Shape::Contiguous));
with_fallback!(exit_recvfrom, exit_recvfrom_compat, |ctx| data_exit(
    Syscall::Recvfrom,
    Shape::Contiguous
));
with_fallback!(exit_write, exit_write_compat, |ctx| data_exit(Syscall::Write, Shape::Contiguous));
with_fallback!(exit_sendto, exit_sendto_compat, |ctx| data_exit(
    Syscall::Sendto,
    Shape::Contiguous
));
with_fallback!(exit_readv, exit_readv_compat, |ctx| data_exit(Syscall::Readv, Shape::Iovecs));
with_fallback!(exit_writev, exit_writev_compat, |ctx| data_exit(Syscall::Writev, Shape::Iovecs));
with_fallback!(exit_recvmsg, exit_recvmsg_compat, |ctx| data_exit(Syscall::Recvmsg, Shape::Msghdr));
with_fallback!(exit_sendmsg, exit_sendmsg_compat, |ctx| data_exit(Syscall::Sendmsg, Shape::Msghdr));
