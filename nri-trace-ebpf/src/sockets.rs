//! The socket-syscall programs that start and stop tracking fds: close
//! (at enter), accept/accept4 on a tracked listener, connect to a path in
//! `CONNECT_PATHS`, bind of a path in `LISTEN_PATHS` (by any process),
//! socketpair, and dup/dup2/dup3/fcntl(F_DUPFD*) of a tracked connection.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::tracepoint,
    programs::TracePointContext,
};
use nri_trace_common::{
    filter_row, filter_tgid, filter_value, EntryKind, SunPath, Syscall, FD_CONN, FD_LISTEN,
    SUN_PATH_LEN, TGID_SLOTS, TGID_SLOT_SHARED,
};

use crate::{
    context::{config, ret_of, syscall_args},
    emit::{emit_header, header},
    maps::{CONNECT_PATHS, LISTEN_PATHS, TGID_FILTER, TRACKED_TGIDS},
    tracking::{fd_get, fd_remove, track_fd, track_fd_reported, tracked, Tracked},
    with_fallback,
};

/// close is the one syscall probed at *enter*: once close returns, the fd
/// number is free and another thread's accept/socketpair may already have
/// reused it (and its exit program may already have run), so untracking at
/// exit would untrack the new connection. On Linux, close of a valid fd
/// always releases it, even when it returns an error (fs/open.c).
#[tracepoint]
pub fn enter_close(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    // sys_enter_close format: `unsigned int fd` at offset 16.
    let Ok(fd) = (unsafe { ctx.read_at::<u64>(16) }) else {
        return 0;
    };
    if fd_remove(t, fd as u32) {
        let hdr = header(EntryKind::Close, Syscall::Close, pid_tgid, fd as i32, 0, 0);
        emit_header(&hdr, config().wakeup_bytes);
    }
    0
}

#[inline(always)]
fn accept_exit<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall) -> u32 {
    let ret = ret_of(ctx);
    if ret < 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    match fd_get(t, args[0] as u32) {
        Some(f) if unsafe { (*f).flags } & FD_LISTEN != 0 => {
            track_fd(sc, t, pid_tgid, ret as i32, args[0] as i32)
        }
        _ => {}
    }
    0
}

with_fallback!(exit_accept, exit_accept_compat, |ctx| accept_exit(Syscall::Accept));
with_fallback!(exit_accept4, exit_accept4_compat, |ctx| accept_exit(Syscall::Accept4));

/// The path of the AF_UNIX `struct sockaddr_un` at `addr` (sa_family, a
/// u16, then sun_path[108]); None for another family or a fault.
#[inline(always)]
fn unix_path(addr: u64) -> Option<SunPath> {
    let family = unsafe { bpf_probe_read_user(addr as *const u16) }.ok()?;
    if family != 1 {
        return None; // not AF_UNIX
    }
    let mut key = SunPath {
        bytes: [0u8; SUN_PATH_LEN],
    };
    unsafe { bpf_probe_read_user_str_bytes((addr + 2) as *const u8, &mut key.bytes) }.ok()?;
    Some(key)
}

with_fallback!(exit_connect, exit_connect_compat, |ctx| connect_exit());

#[inline(always)]
fn connect_exit<const COMPAT: bool>(ctx: &TracePointContext) -> u32 {
    // A non-blocking unix connect completes at once or fails with EAGAIN;
    // EINPROGRESS does not happen for AF_UNIX (net/unix/af_unix.c).
    if ret_of(ctx) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    let Some(key) = unix_path(args[1]) else {
        return 0;
    };
    if unsafe { CONNECT_PATHS.get(&key) }.is_some() {
        track_fd(Syscall::Connect, t, pid_tgid, args[0] as i32, 0);
    }
    0
}

with_fallback!(
    /// bind() of a watched path: see `bind_exit`.
    exit_bind, exit_bind_compat, |ctx| bind_exit()
);

/// bind() of a watched path, by any process (the runtime that binds it
/// again after a restart is not tracked yet; bind is rare, so the
/// unfiltered program costs the node nothing measurable). Tracking starts
/// here, in the kernel, so the connections accepted right after the new
/// runtime's listen() are captured from their first byte: a userspace
/// scan for the new listener came up to 100 ms late, and a plugin that
/// connected in between lost its registration (CI, runtime-restart).
#[inline(always)]
fn bind_exit<const COMPAT: bool>(ctx: &TracePointContext) -> u32 {
    if ret_of(ctx) != 0 {
        return 0;
    }
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    let Some(key) = unix_path(args[1]) else {
        return 0;
    };
    let Some(&name) = (unsafe { LISTEN_PATHS.get(&key) }) else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // A process tracked already keeps its value (and `FD_TABLE` row); a
    // new one has none: its fds live in `FDS` (a row is given only by
    // userspace, before any fd of the process is tracked, so that each fd
    // has one home).
    const EEXIST: i32 = 17; // include/uapi/asm-generic/errno-base.h
    let new = filter_value(tgid, None);
    let v = match TRACKED_TGIDS.insert(&tgid, &new, BPF_NOEXIST as u64) {
        Ok(()) => new,
        Err(e) if e == -EEXIST => match unsafe { TRACKED_TGIDS.get(&tgid) } {
            Some(&v) => v,
            None => return 0,
        },
        Err(_) => return 0,
    };
    // The filter slot: this tgid if free, else "shared" (ask
    // TRACKED_TGIDS), which is right for every tgid of the slot.
    // Userspace adds the tgid to its own view of the slot when it reads
    // the record (EbpfBackend::track_process).
    if let Some(slot) = TGID_FILTER.get_ptr_mut(tgid & (TGID_SLOTS - 1)) {
        unsafe {
            if *slot == 0 {
                *slot = v;
            } else if filter_tgid(*slot) != Some(tgid) {
                *slot = TGID_SLOT_SHARED;
            }
        }
    }
    let t = Tracked {
        tgid,
        row: filter_row(v),
    };
    let hdr = header(EntryKind::Bound, Syscall::Bind, pid_tgid, args[0] as i32, name as i32, 0);
    // Wakeup threshold 0: wake the reader for this rare record unless this
    // CPU looked at the ring in the last millisecond (`wake_flags`); then
    // the reader's timed drain takes it. The kernel tracks the listener
    // already, so nothing is lost while it waits.
    track_fd_reported(t, &hdr, FD_LISTEN, 0);
    0
}

with_fallback!(exit_socketpair, exit_socketpair_compat, |ctx| socketpair_exit());

#[inline(always)]
fn socketpair_exit<const COMPAT: bool>(ctx: &TracePointContext) -> u32 {
    if ret_of(ctx) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    if args[0] != 1 {
        return 0; // AF_UNIX only
    }
    // int sv[2] is argument 3.
    let Ok(sv) = (unsafe { bpf_probe_read_user(args[3] as *const [i32; 2]) }) else {
        return 0;
    };
    track_fd(Syscall::Socketpair, t, pid_tgid, sv[0], sv[1]);
    track_fd(Syscall::Socketpair, t, pid_tgid, sv[1], sv[0]);
    0
}

/// fcntl(2) commands that duplicate an fd (include/uapi/linux/fcntl.h,
/// asm-generic/fcntl.h): Go's `net.FileConn` dups with F_DUPFD_CLOEXEC
/// (internal/poll `DupCloseOnExec`), so an NRI plugin's inherited fd 3 and
/// the runtime's end of a launched plugin's socketpair move so.
const F_DUPFD: u64 = 0;
const F_DUPFD_CLOEXEC: u64 = 1030;

/// dup/dup2/dup3 (and fcntl F_DUPFD*) of a tracked fd: the new fd is the
/// same connection.
#[inline(always)]
fn dup_exit<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall) -> u32 {
    let ret = ret_of(ctx);
    if ret < 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(t) = tracked((pid_tgid >> 32) as u32) else {
        return 0;
    };
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    if matches!(sc, Syscall::Fcntl) && !matches!(args[1], F_DUPFD | F_DUPFD_CLOEXEC) {
        return 0; // any other fcntl: its return value is no fd
    }
    if args[0] as i64 == ret {
        return 0; // dup2(fd, fd)
    }
    if let Some(f) = fd_get(t, args[0] as u32) {
        if unsafe { (*f).flags } & FD_CONN != 0 {
            // dup2/dup3 onto a tracked fd closes it first.
            if fd_remove(t, ret as u32) {
                let hdr = header(EntryKind::Close, sc, pid_tgid, ret as i32, 0, 0);
                emit_header(&hdr, config().wakeup_bytes);
            }
            track_fd(sc, t, pid_tgid, ret as i32, args[0] as i32);
        }
    }
    0
}

with_fallback!(exit_dup, exit_dup_compat, |ctx| dup_exit(Syscall::Dup));
with_fallback!(exit_dup2, exit_dup2_compat, |ctx| dup_exit(Syscall::Dup2));
with_fallback!(exit_dup3, exit_dup3_compat, |ctx| dup_exit(Syscall::Dup3));
with_fallback!(exit_fcntl, exit_fcntl_compat, |ctx| dup_exit(Syscall::Fcntl));
