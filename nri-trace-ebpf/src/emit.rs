//! Records out to the ring: the counters and the lost-record stamps, the
//! record header, the reader's wakeup policy, and the copy of one chunk of
//! user bytes into a Data record (reserved in the ring by size class, or
//! through the per-CPU scratch buffer).

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_ktime_get_ns,
        generated::{
            bpf_probe_read_user as raw_probe_read_user, bpf_ringbuf_output, bpf_ringbuf_query,
        },
    },
    macros::map,
    maps::{Array, PerCpuArray, RingBuf},
};
use nri_trace_common::{
    counter, EntryHeader, EntryKind, Syscall, FLAG_READ_FAULT, MAX_CHUNK, ENTRY_HEADER_LEN,
};

use crate::maps::{Scratch, COUNTERS, EVENTS, SCRATCH};

#[inline(always)]
pub(crate) fn bump(idx: u32, by: u64) {
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
pub(crate) fn lost(bytes: u64) {
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

/// Non-zero while the reader sleeps until woken (userspace sets it after a
/// quiet spell of empty drains and clears it when it drains records again:
/// capture/session/drain.rs `Idle`). Written by userspace only.
#[map]
pub(crate) static READER_ASLEEP: Array<u32> = Array::with_max_entries(1, 0);

/// Wake the reader only when enough data waits, or when it sleeps, and
/// look at most once per millisecond per CPU; otherwise the reader's timed
/// drain collects it. A wakeup per record costs the traced process
/// microseconds per syscall, and forcing one per record once the ring is
/// busy doubled the cost of a captured write exactly when the ring was
/// under pressure (benchmarks.md). The look itself is rate-limited too:
/// while the ring stays below `wakeup_bytes` (the usual case), querying it
/// on every record was one more helper call per captured write. A reader
/// that sleeps has seen no record for a while (drain.rs `IDLE_AFTER`,
/// many times `WAKE_INTERVAL_NS`), so the first record after a quiet spell
/// always gets a look, and wakes it.
#[inline(always)]
pub(crate) fn wake_flags(now_ns: u64, wakeup_bytes: u32) -> u64 {
    let Some(last) = LAST_WAKE.get_ptr_mut(0) else {
        return BPF_RB_NO_WAKEUP as u64;
    };
    if now_ns.wrapping_sub(unsafe { *last }) < WAKE_INTERVAL_NS {
        return BPF_RB_NO_WAKEUP as u64;
    }
    unsafe { *last = now_ns };
    if READER_ASLEEP.get(0).is_some_and(|a| *a != 0) {
        return BPF_RB_FORCE_WAKEUP as u64;
    }
    let avail = unsafe { bpf_ringbuf_query(&EVENTS as *const RingBuf as *mut c_void, 0) };
    if avail >= wakeup_bytes as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
pub(crate) fn emit_header(hdr: &EntryHeader, wakeup_bytes: u32) {
    if EVENTS
        .output::<EntryHeader>(hdr, wake_flags(hdr.ts_ns, wakeup_bytes))
        .is_err()
    {
        lost(0);
    }
}

#[inline(always)]
pub(crate) fn header(
    kind: EntryKind,
    sc: Syscall,
    pid_tgid: u64,
    fd: i32,
    aux: i32,
    ret: i64,
) -> EntryHeader {
    EntryHeader {
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
    hdr: EntryHeader,
    data: [u8; N],
}

/// Copy `len` (<= N) user bytes at `src` straight into a ring record of
/// class `N`: one copy instead of two (scratch, then ring). The record may
/// be longer than its payload; userspace reads `hdr.len`.
#[inline(always)]
fn emit_reserved<const N: usize>(
    hdr: &EntryHeader,
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
pub(crate) fn emit_chunk(
    hdr: &EntryHeader,
    src: u64,
    len: u32,
    offset: u32,
    flags: u32,
    wakeup: u32,
) {
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
pub(crate) fn emit_scratch(
    hdr: &EntryHeader,
    src: u64,
    len: u32,
    offset: u32,
    flags: u32,
    wakeup: u32,
) {
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
    let size = ENTRY_HEADER_LEN + n;
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
