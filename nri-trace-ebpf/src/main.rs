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
#![no_std]
#![no_main]

mod sandbox;

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        bpf_probe_read_user_str_bytes,
        generated::{
            bpf_get_current_task, bpf_get_current_task_btf, bpf_loop,
            bpf_probe_read_user as raw_probe_read_user, bpf_ringbuf_output, bpf_ringbuf_query,
            bpf_task_pt_regs,
        },
    },
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};
use nri_trace_common::{
    counter, fd_table_index, filter_row, filter_tgid, filter_value, Config, FdKey, FdState,
    COMPAT_TAIL_STEPS,
    RecordHeader, RecordKind, SunPath, Syscall, DEFAULT_RING_BYTES, DEFAULT_SNAP, FD_CONN,
    FD_LISTEN, FD_TABLE_FDS, FD_TABLE_ROWS, FLAG_LAST, FLAG_READ_FAULT,
    FLAG_TRUNCATED, MAX_CHUNK, MAX_IOV, MAX_SNAP, RECORD_HEADER_LEN, SUN_PATH_LEN, TGID_SLOTS,
    TGID_SLOT_SHARED,
};

// ---------------------------------------------------------------- maps

/// Direct-mapped tgid filter: slot `tgid & (TGID_SLOTS-1)` holds that
/// tgid's `filter_value`, 0 (empty) or TGID_SLOT_SHARED (ask TRACKED_TGIDS).
#[map]
static TGID_FILTER: Array<u32> = Array::with_max_entries(TGID_SLOTS, 0);

/// Authoritative set of tracked tgids, each with its `filter_value`.
#[map]
static TRACKED_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(1024, 0);

/// Tracked fds (FD_LISTEN and/or FD_CONN) of processes with an `FD_TABLE`
/// row, row-major: entry `row * FD_TABLE_FDS + fd` (`fd_table_index`).
#[map]
static FD_TABLE: Array<FdState> = Array::with_max_entries(FD_TABLE_ROWS * FD_TABLE_FDS, 0);

/// Tracked fds of the other processes, and fds past `FD_TABLE_FDS`.
#[map]
static FDS: HashMap<FdKey, FdState> = HashMap::with_max_entries(65536, 0);

/// Unix socket paths whose connect() by a tracked process starts tracking.
#[map]
static CONNECT_PATHS: HashMap<SunPath, u32> = HashMap::with_max_entries(64, 0);

/// Listening socket paths whose bind() by *any* process starts tracking
/// that process and the socket as a listener: a restarted runtime is
/// traced from its first accept (the value is userspace's name for the
/// path, returned in the record's `aux`).
#[map]
static LISTEN_PATHS: HashMap<SunPath, u32> = HashMap::with_max_entries(64, 0);

#[map]
static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

/// Per-CPU counters, see `nri_trace_common::counter`.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// A record under construction: header then payload, contiguous so that one
/// bpf_ringbuf_output copies both.
#[repr(C)]
pub struct Scratch {
    hdr: RecordHeader,
    data: [u8; MAX_CHUNK],
}

#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

// ---------------------------------------------------------------- helpers

/// A tracked process: its tgid and `FD_TABLE` row (`FD_TABLE_ROWS`: none).
#[derive(Clone, Copy)]
struct Tracked {
    tgid: u32,
    row: u32,
}

#[inline(always)]
fn tracked(tgid: u32) -> Option<Tracked> {
    let v = *TGID_FILTER.get(tgid & (TGID_SLOTS - 1))?;
    // The usual answers first: the slot is this tgid's, or not shared.
    if filter_tgid(v) == Some(tgid) {
        return Some(Tracked {
            tgid,
            row: filter_row(v),
        });
    }
    if v != TGID_SLOT_SHARED {
        return None;
    }
    let v = *unsafe { TRACKED_TGIDS.get(tgid) }?;
    Some(Tracked {
        tgid,
        row: filter_row(v),
    })
}

/// The state of tracked fd `fd` of `t`, wherever `fd_table_index` puts it.
#[inline(always)]
fn fd_get(t: Tracked, fd: u32) -> Option<*mut FdState> {
    match fd_table_index(t.row, fd) {
        Some(i) => {
            let p = FD_TABLE.get_ptr_mut(i)?;
            unsafe { (*p).is_of(t.tgid) }.then_some(p)
        }
        None => FDS.get_ptr_mut(&FdKey { tgid: t.tgid, fd }),
    }
}

/// Start tracking `fd` of `t` with `flags` (sequence numbers from 0);
/// false when `FDS` is full.
#[inline(always)]
fn fd_insert(t: Tracked, fd: u32, flags: u32) -> bool {
    let st = FdState::new(t.tgid, flags);
    match fd_table_index(t.row, fd) {
        Some(i) => match FD_TABLE.get_ptr_mut(i) {
            Some(p) => {
                unsafe { *p = st };
                true
            }
            None => false,
        },
        None => FDS.insert(&FdKey { tgid: t.tgid, fd }, &st, 0).is_ok(),
    }
}

/// Stop tracking `fd` of `t`; whether it was tracked.
#[inline(always)]
fn fd_remove(t: Tracked, fd: u32) -> bool {
    match fd_table_index(t.row, fd) {
        Some(i) => {
            let Some(p) = FD_TABLE.get_ptr_mut(i) else {
                return false;
            };
            unsafe {
                if (*p).is_of(t.tgid) {
                    (*p).flags = 0;
                    true
                } else {
                    false
                }
            }
        }
        None => FDS.remove(&FdKey { tgid: t.tgid, fd }).is_ok(),
    }
}

#[inline(always)]
fn bump(idx: u32, by: u64) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        unsafe { *p += by };
    }
}

/// A record dropped on a full ring: counted, with its payload bytes, and
/// stamped, so userspace can say *when* the capture has a hole and not
/// only how big it is (`counter::LOST_FIRST_NS`, `LOST_LAST_NS`). A
/// reader behind by a whole ring reads the counters long before it
/// reaches the records around the hole; the stamps place the loss.
#[inline(always)]
fn lost(bytes: u64) {
    bump(counter::LOST_RECORDS, 1);
    if bytes > 0 {
        bump(counter::LOST_BYTES, bytes);
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = COUNTERS.get_ptr_mut(counter::LOST_FIRST_NS) {
        unsafe {
            if *p == 0 {
                *p = now;
            }
        }
    }
    if let Some(p) = COUNTERS.get_ptr_mut(counter::LOST_LAST_NS) {
        unsafe { *p = now };
    }
}

#[inline(always)]
fn config() -> Config {
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
        },
    }
}

/// The current task's syscall arguments 0..=3 (x86_64 ABI: di, si, dx, r10),
/// read from its saved user registers. `COMPAT`: the fallback programs'
/// way, for kernels without bpf_task_pt_regs (5.15) and
/// bpf_get_current_task_btf (5.11).
#[inline(always)]
fn syscall_args<const COMPAT: bool>() -> Option<[u64; 4]> {
    // struct pt_regs offsets on x86_64 (arch/x86/include/asm/ptrace.h).
    const R10: usize = 7 * 8;
    const DX: usize = 12 * 8;
    const SI: usize = 13 * 8;
    const DI: usize = 14 * 8;
    if COMPAT {
        return syscall_args_from_stack();
    }
    // bpf_task_pt_regs returns a BTF pointer (PTR_TO_BTF_ID of struct
    // pt_regs): the verifier lets the program load from it directly (the
    // JIT emits fault-checked loads), no bpf_probe_read_kernel call.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const u8;
    if regs.is_null() {
        return None;
    }
    let word = |off: usize| unsafe { core::ptr::read_volatile(regs.add(off) as *const u64) };
    Some([word(DI), word(SI), word(DX), word(R10)])
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

/// `v` if it is at most `max`, checked in a form every verifier tracks: a
/// compare of the register with a constant, on the path that goes on with
/// `v` itself. The volatile read hides `v`'s origin from LLVM, which
/// would otherwise drop a check it can prove redundant (the callers pass
/// lengths <= `max`) and leave a bound the verifier can only derive from a
/// register-register compare: 6.1's learns nothing from one (kernel/bpf/
/// verifier.c reg_set_min_max only narrows against a constant there) and
/// rejected the probe read's size as unbounded ("R2 unbounded memory
/// access"); 6.12's accepted the same code. No clamp to
/// `max` either: 5.10 forgets a constant stored to the stack, and the
/// clamped size came back unbounded ("R2 min value is negative").
#[inline(always)]
fn bounded_for_verifier(v: u64, max: u64) -> Option<u64> {
    let v = unsafe { core::ptr::read_volatile(&v) };
    if v > max {
        None
    } else {
        Some(v)
    }
}

/// Per-CPU time of the last forced wakeup (see `wake_flags`).
#[map]
static LAST_WAKE: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// At most one forced wakeup per CPU per this many ns.
const WAKE_INTERVAL_NS: u64 = 1_000_000;

/// Wake the reader only when enough data waits, and look at most once per
/// millisecond per CPU; otherwise the reader's timed drain collects it. A
/// wakeup per record costs the traced process microseconds per syscall, and
/// forcing one per record once the ring is busy doubled the cost of a
/// captured write exactly when the ring was under pressure (benchmarks.md).
/// The look itself is rate-limited too: while the ring stays below
/// `wakeup_bytes` (the usual case), querying it on every record was one
/// more helper call per captured write.
#[inline(always)]
fn wake_flags(now_ns: u64, wakeup_bytes: u32) -> u64 {
    let Some(last) = LAST_WAKE.get_ptr_mut(0) else {
        return BPF_RB_NO_WAKEUP as u64;
    };
    if now_ns.wrapping_sub(unsafe { *last }) < WAKE_INTERVAL_NS {
        return BPF_RB_NO_WAKEUP as u64;
    }
    unsafe { *last = now_ns };
    let avail = unsafe { bpf_ringbuf_query(&EVENTS as *const RingBuf as *mut c_void, 0) };
    if avail >= wakeup_bytes as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
fn emit_header(hdr: &RecordHeader, wakeup_bytes: u32) {
    if EVENTS
        .output::<RecordHeader>(hdr, wake_flags(hdr.ts_ns, wakeup_bytes))
        .is_err()
    {
        lost(0);
    }
}

#[inline(always)]
fn header(
    kind: RecordKind,
    sc: Syscall,
    pid_tgid: u64,
    fd: i32,
    aux: i32,
    ret: i64,
) -> RecordHeader {
    RecordHeader {
        kind: kind as u16,
        syscall: sc as u16,
        flags: 0,
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        fd,
        aux,
        ret,
        offset: 0,
        len: 0,
    }
}

/// A record reserved in the ring with room for `N` payload bytes.
#[repr(C)]
struct Reserved<const N: usize> {
    hdr: RecordHeader,
    data: [u8; N],
}

/// Copy `len` (<= N) user bytes at `src` straight into a ring record of
/// class `N`: one copy instead of two (scratch, then ring). The record may
/// be longer than its payload; userspace reads `hdr.len`.
#[inline(always)]
fn emit_reserved<const N: usize>(
    hdr: &RecordHeader,
    src: u64,
    len: u32,
    offset: u32,
    flags: u32,
    wakeup: u32,
) {
    let Some(mut e) = EVENTS.reserve::<Reserved<N>>(0) else {
        lost(u64::from(len));
        return;
    };
    // Checked after the reservation, right before the read: a bound
    // checked before a helper call is spilled to the stack across it, and
    // 5.10 reloads the spilled copy without the bound.
    let Some(n) = bounded_for_verifier(len as u64, N as u64) else {
        e.discard(0);
        bump(counter::LOST_RECORDS, 1);
        return;
    };
    let n = n as usize;
    let r = e.as_mut_ptr();
    let ok = unsafe {
        raw_probe_read_user(
            (*r).data.as_mut_ptr() as *mut c_void,
            n as u32,
            src as *const c_void,
        )
    } == 0;
    let mut h = *hdr;
    h.offset = offset;
    h.flags = flags;
    h.len = if ok {
        n as u32
    } else {
        h.flags |= FLAG_READ_FAULT;
        bump(counter::READ_FAULTS, 1);
        0
    };
    unsafe { (*r).hdr = h };
    e.submit(wake_flags(hdr.ts_ns, wakeup));
}

/// Copy `len` (<= MAX_CHUNK) user bytes at `src` into one Data record.
#[inline(always)]
fn emit_chunk(hdr: &RecordHeader, src: u64, len: u32, offset: u32, flags: u32, wakeup: u32) {
    // Large chunks go straight into a reserved record, in power-of-two size
    // classes (a reservation's size must be a constant: at most half of it
    // is padding); small ones through the scratch buffer, exact size. The
    // second copy costed 0.02 ns per byte (docs/benchmarks.md).
    if len > 8192 {
        emit_reserved::<MAX_CHUNK>(hdr, src, len, offset, flags, wakeup);
        return;
    }
    if len > 4096 {
        emit_reserved::<8192>(hdr, src, len, offset, flags, wakeup);
        return;
    }
    if len > 2048 {
        emit_reserved::<4096>(hdr, src, len, offset, flags, wakeup);
        return;
    }
    if len > 1024 {
        emit_reserved::<2048>(hdr, src, len, offset, flags, wakeup);
        return;
    }
    emit_scratch(hdr, src, len, offset, flags, wakeup);
}

/// Copy `len` (<= MAX_CHUNK) user bytes at `src` into one Data record
/// through the per-CPU scratch buffer, exact size: one path for any
/// length, which the fallback programs' unrolled loop can afford (the
/// size classes of `emit_chunk` multiplied its verifier states past the
/// 1M-instruction limit of 5.10).
#[inline(always)]
fn emit_scratch(hdr: &RecordHeader, src: u64, len: u32, offset: u32, flags: u32, wakeup: u32) {
    let Some(s) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let s = unsafe { &mut *s };
    s.hdr = *hdr;
    s.hdr.offset = offset;
    s.hdr.flags = flags;
    // Bound for the verifier: 0..=MAX_CHUNK.
    let Some(n) = bounded_for_verifier(len as u64, MAX_CHUNK as u64) else {
        bump(counter::LOST_RECORDS, 1);
        return;
    };
    let n = n as usize;
    let ok = unsafe {
        raw_probe_read_user(
            s.data.as_mut_ptr() as *mut c_void,
            n as u32,
            src as *const c_void,
        )
    } == 0;
    let n = if ok {
        n
    } else {
        s.hdr.flags |= FLAG_READ_FAULT;
        bump(counter::READ_FAULTS, 1);
        0
    };
    s.hdr.len = n as u32;
    let size = RECORD_HEADER_LEN + n;
    if size > core::mem::size_of::<Scratch>() {
        return;
    }
    let r = unsafe {
        bpf_ringbuf_output(
            &EVENTS as *const RingBuf as *mut c_void,
            s as *mut Scratch as *mut c_void,
            size as u64,
            wake_flags(hdr.ts_ns, wakeup),
        )
    };
    if r != 0 {
        lost(n as u64);
    }
}

/// The syscall's arguments and the fd's sequence number for this direction,
/// if the caller is tracked and the fd is a tracked connection.
#[inline(always)]
fn tracked_conn<const COMPAT: bool>(pid_tgid: u64, inbound: bool) -> Option<([u64; 4], u32)> {
    let t = tracked((pid_tgid >> 32) as u32)?;
    let args = syscall_args::<COMPAT>()?;
    let st = fd_get(t, args[0] as u32)?;
    if unsafe { (*st).flags } & FD_CONN == 0 {
        return None;
    }
    let seq = unsafe {
        let p = if inbound {
            &raw mut (*st).seq_in
        } else {
            &raw mut (*st).seq_out
        };
        let v = *p;
        *p = v.wrapping_add(1);
        v
    };
    Some((args, seq))
}

#[inline(always)]
fn ret_of(ctx: &TracePointContext) -> i64 {
    // sys_exit_* format: `long ret` at offset 16 (events/syscalls/*/format).
    // A tracepoint program may load from its context directly
    // (kernel/trace/bpf_trace.c tp_prog_is_valid_access): no helper call.
    unsafe { *(ctx.as_ptr().add(16) as *const i64) }
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
    hdr: RecordHeader,
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
fn capture_payload<const COMPAT: bool>(
    ctx: &TracePointContext,
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
    let hdr = header(RecordKind::Data, sc, pid_tgid, fd as i32, seq as i32, ret);
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

/// read/write/recvfrom/sendto: one contiguous buffer in arg 1.
#[inline(always)]
fn data_contiguous<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall) -> u32 {
    let ret = ret_of(ctx);
    if ret <= 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some((args, seq)) = tracked_conn::<COMPAT>(pid_tgid, sc.is_inbound()) else {
        return 0;
    };
    let seg = Iovec {
        base: args[1],
        len: ret as u64,
    };
    capture_payload::<COMPAT>(
        ctx,
        sc,
        pid_tgid,
        args[0] as u32,
        seq,
        ret,
        seg,
        Iovec { base: 0, len: 0 },
    );
    0
}

/// readv/writev (iovec array, count) and recvmsg/sendmsg (struct msghdr).
#[inline(always)]
fn data_vectored<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall, msghdr: bool) -> u32 {
    let ret = ret_of(ctx);
    if ret <= 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some((args, seq)) = tracked_conn::<COMPAT>(pid_tgid, sc.is_inbound()) else {
        return 0;
    };
    let iov = if msghdr {
        // struct user_msghdr (include/linux/socket.h): msg_iov at 16,
        // msg_iovlen at 24.
        let Ok(m) = (unsafe { bpf_probe_read_user((args[1] + 16) as *const [u64; 2]) }) else {
            return 0;
        };
        Iovec {
            base: m[0],
            len: m[1],
        }
    } else {
        Iovec {
            base: args[1],
            len: args[2],
        }
    };
    capture_payload::<COMPAT>(
        ctx,
        sc,
        pid_tgid,
        args[0] as u32,
        seq,
        ret,
        Iovec { base: 0, len: 0 },
        iov,
    );
    0
}

/// Start tracking `fd` of `t` as a connection and tell userspace.
#[inline(always)]
fn track_fd(sc: Syscall, t: Tracked, pid_tgid: u64, fd: i32, aux: i32) {
    let hdr = header(RecordKind::Open, sc, pid_tgid, fd, aux, fd as i64);
    track_fd_reported(t, &hdr, FD_CONN, config().wakeup_bytes);
}

/// Start tracking the fd `hdr` names of `t` with `flags`, then emit `hdr`;
/// a full fd map is counted instead.
#[inline(always)]
fn track_fd_reported(t: Tracked, hdr: &RecordHeader, flags: u32, wakeup_bytes: u32) {
    if !fd_insert(t, hdr.fd as u32, flags) {
        bump(counter::FD_MAP_FULL, 1);
        return;
    }
    emit_header(hdr, wakeup_bytes);
}

// ---------------------------------------------------------------- programs

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

with_fallback!(exit_read, exit_read_compat, |ctx| data_contiguous(Syscall::Read));
with_fallback!(exit_recvfrom, exit_recvfrom_compat, |ctx| data_contiguous(Syscall::Recvfrom));
with_fallback!(exit_write, exit_write_compat, |ctx| data_contiguous(Syscall::Write));
with_fallback!(exit_sendto, exit_sendto_compat, |ctx| data_contiguous(Syscall::Sendto));
with_fallback!(exit_readv, exit_readv_compat, |ctx| data_vectored(Syscall::Readv, false));
with_fallback!(exit_writev, exit_writev_compat, |ctx| data_vectored(Syscall::Writev, false));
with_fallback!(exit_recvmsg, exit_recvmsg_compat, |ctx| data_vectored(Syscall::Recvmsg, true));
with_fallback!(exit_sendmsg, exit_sendmsg_compat, |ctx| data_vectored(Syscall::Sendmsg, true));

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
        let hdr = header(RecordKind::Close, Syscall::Close, pid_tgid, fd as i32, 0, 0);
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
    let hdr = header(RecordKind::Bound, Syscall::Bind, pid_tgid, args[0] as i32, name as i32, 0);
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
                let hdr = header(RecordKind::Close, sc, pid_tgid, ret as i32, 0, 0);
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
    let hdr = header(RecordKind::Fork, Syscall::Sched, pid_tgid, -1, child, 0);
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
        let hdr = header(RecordKind::ProcessExit, Syscall::Sched, pid_tgid, -1, 0, 0);
        emit_header(&hdr, config().wakeup_bytes);
    }
    0
}

// ------------------------------------------------------- helper probe

/// Never attached: userspace loads it to learn whether the kernel has
/// bpf_loop, bpf_task_pt_regs and bpf_get_current_task_btf (the verifier
/// rejects an unknown helper id), and loads the fallback programs if not
/// (capture/ebpf.rs `probe_helpers`).
#[tracepoint]
pub fn probe_helpers(_ctx: TracePointContext) -> u32 {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) };
    let mut steps = 0u64;
    unsafe {
        bpf_loop(
            1,
            probe_step as *mut c_void,
            &mut steps as *mut u64 as *mut c_void,
            0,
        )
    };
    u32::from(regs == 0) + steps as u32
}

#[inline(never)]
extern "C" fn probe_step(_index: u64, ctx: *mut c_void) -> i64 {
    unsafe { *(ctx as *mut u64) += 1 };
    1
}

// ------------------------------------------- floor programs (benchmarks only)

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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
