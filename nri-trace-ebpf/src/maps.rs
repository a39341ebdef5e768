//! The maps the capture programs share: the tgid filter and tracked
//! tgids, the fd table and hash, the watched socket paths, the
//! configuration, the counters, the ring and its per-CPU scratch record.
//! (The copy's maps are in `data`, the wakeup clock in `emit`, the sandbox
//! probes' own in `sandbox`.)

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use nri_trace_common::{
    counter, Config, FdKey, FdState, EntryHeader, SunPath, DEFAULT_RING_BYTES, FD_TABLE_FDS,
    FD_TABLE_ROWS, MAX_CHUNK, TGID_SLOTS,
};

/// Direct-mapped tgid filter: slot `tgid & (TGID_SLOTS-1)` holds that
/// tgid's `filter_value`, 0 (empty) or TGID_SLOT_SHARED (ask TRACKED_TGIDS).
#[map]
pub(crate) static TGID_FILTER: Array<u32> = Array::with_max_entries(TGID_SLOTS, 0);

/// Authoritative set of tracked tgids, each with its `filter_value`.
#[map]
pub(crate) static TRACKED_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(1024, 0);

/// Tracked fds (FD_LISTEN and/or FD_CONN) of processes with an `FD_TABLE`
/// row, row-major: entry `row * FD_TABLE_FDS + fd` (`fd_table_index`).
#[map]
pub(crate) static FD_TABLE: Array<FdState> =
    Array::with_max_entries(FD_TABLE_ROWS * FD_TABLE_FDS, 0);

/// Tracked fds of the other processes, and fds past `FD_TABLE_FDS`.
#[map]
pub(crate) static FDS: HashMap<FdKey, FdState> = HashMap::with_max_entries(65536, 0);

/// Unix socket paths whose connect() by a tracked process starts tracking.
#[map]
pub(crate) static CONNECT_PATHS: HashMap<SunPath, u32> = HashMap::with_max_entries(64, 0);

/// Listening socket paths whose bind() by *any* process starts tracking
/// that process and the socket as a listener: a restarted runtime is
/// traced from its first accept (the value is userspace's name for the
/// path, returned in the record's `aux`).
#[map]
pub(crate) static LISTEN_PATHS: HashMap<SunPath, u32> = HashMap::with_max_entries(64, 0);

#[map]
pub(crate) static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

/// Per-CPU counters, see `nri_trace_common::counter`.
#[map]
pub(crate) static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// A record under construction: header then payload, contiguous so that one
/// bpf_ringbuf_output copies both.
#[repr(C)]
pub struct Scratch {
    pub(crate) hdr: EntryHeader,
    pub(crate) data: [u8; MAX_CHUNK],
}

#[map]
pub(crate) static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
