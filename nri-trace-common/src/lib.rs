//! Types shared byte-for-byte by the eBPF programs (`nri-trace-ebpf`) and the
//! userspace collector (`nri-trace`).
//!
//! Everything here is `#[repr(C)]`, `Copy` and free of pointers: the kernel
//! side writes these structs into BPF maps and the ring buffer, and userspace
//! reads them back as plain bytes. Change a layout on one side only and the
//! other side reads garbage, so the layouts are asserted in tests.
#![no_std]

/// Payload bytes carried by one ring-buffer record. A syscall moving more
/// than this is split into several records (`RecordHeader::offset`).
pub const MAX_CHUNK: usize = 16 * 1024;

/// Upper bound on the per-syscall snap length. A syscall may carry up to
/// `MAX_SNAP` bytes split in `MAX_SNAP / MAX_CHUNK` records; NRI's ttrpc caps a
/// message at 4 MiB (containerd/ttrpc channel.go `messageLengthMax`).
pub const MAX_SNAP: u32 = 4 * 1024 * 1024;

/// Default snap length: whole NRI and CRI messages in practice (a Synchronize
/// of a few hundred pods fits), while bounding the cost of one syscall.
pub const DEFAULT_SNAP: u32 = 1024 * 1024;

/// At most this many iovecs of a readv/writev/sendmsg/recvmsg are copied; the
/// rest is reported as truncated. Go and Rust peers use one or two.
pub const MAX_IOV: u32 = 64;

/// Size of the direct-mapped tgid filter (`TGID_FILTER`). Must be a power of
/// two: slot = tgid & (TGID_SLOTS - 1).
pub const TGID_SLOTS: u32 = 4096;

/// Filter slot value meaning "more than one tracked tgid maps here: ask the
/// `TRACKED_TGIDS` hash map". Never a real tgid (pid_max is at most 2^22).
pub const TGID_SLOT_SHARED: u32 = u32::MAX;

/// Default ring buffer size in bytes (power of two, multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 16 * 1024 * 1024;

/// What a ring-buffer record describes.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Payload moved by a read- or write-family syscall on a tracked fd.
    Data = 1,
    /// A tracked connection appeared (accept, connect, socketpair, dup).
    Open = 2,
    /// A tracked fd was closed.
    Close = 3,
    /// A tracked process forked (parent tgid in `tgid`, child pid in `aux`).
    Fork = 4,
    /// The last thread of a tracked process exited.
    ProcessExit = 5,
}

impl RecordKind {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Data,
            2 => Self::Open,
            3 => Self::Close,
            4 => Self::Fork,
            5 => Self::ProcessExit,
            _ => return None,
        })
    }
}

/// The syscall that produced a record. The numbering is ours, not the
/// kernel's syscall numbers (which differ per architecture).
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    Read = 1,
    Readv = 2,
    Recvfrom = 3,
    Recvmsg = 4,
    Write = 5,
    Writev = 6,
    Sendto = 7,
    Sendmsg = 8,
    Close = 9,
    Accept = 10,
    Accept4 = 11,
    Connect = 12,
    Socketpair = 13,
    Dup = 14,
    Dup2 = 15,
    Dup3 = 16,
    /// Not a syscall: task_newtask / sched_process_exit tracepoints.
    Sched = 17,
}

impl Syscall {
    pub fn from_u16(v: u16) -> Option<Self> {
        use Syscall::*;
        Some(match v {
            1 => Read,
            2 => Readv,
            3 => Recvfrom,
            4 => Recvmsg,
            5 => Write,
            6 => Writev,
            7 => Sendto,
            8 => Sendmsg,
            9 => Close,
            10 => Accept,
            11 => Accept4,
            12 => Connect,
            13 => Socketpair,
            14 => Dup,
            15 => Dup2,
            16 => Dup3,
            17 => Sched,
            _ => return None,
        })
    }

    /// True for the read family: bytes flowed from the peer into the traced
    /// process.
    pub fn is_inbound(self) -> bool {
        matches!(
            self,
            Syscall::Read | Syscall::Readv | Syscall::Recvfrom | Syscall::Recvmsg
        )
    }

    pub fn name(self) -> &'static str {
        use Syscall::*;
        match self {
            Read => "read",
            Readv => "readv",
            Recvfrom => "recvfrom",
            Recvmsg => "recvmsg",
            Write => "write",
            Writev => "writev",
            Sendto => "sendto",
            Sendmsg => "sendmsg",
            Close => "close",
            Accept => "accept",
            Accept4 => "accept4",
            Connect => "connect",
            Socketpair => "socketpair",
            Dup => "dup",
            Dup2 => "dup2",
            Dup3 => "dup3",
            Sched => "sched",
        }
    }

    /// The inverse of [`Syscall::name`]: recordings name syscalls rather
    /// than number them, so they stay readable and do not depend on our
    /// numbering. Exact, case-sensitive match.
    pub fn from_name(name: &str) -> Option<Self> {
        use Syscall::*;
        Some(match name {
            "read" => Read,
            "readv" => Readv,
            "recvfrom" => Recvfrom,
            "recvmsg" => Recvmsg,
            "write" => Write,
            "writev" => Writev,
            "sendto" => Sendto,
            "sendmsg" => Sendmsg,
            "close" => Close,
            "accept" => Accept,
            "accept4" => Accept4,
            "connect" => Connect,
            "socketpair" => Socketpair,
            "dup" => Dup,
            "dup2" => Dup2,
            "dup3" => Dup3,
            "sched" => Sched,
            _ => return None,
        })
    }
}

/// `RecordHeader::flags`: the syscall moved more bytes than the snap length
/// (or than `MAX_IOV` iovecs hold); `ret` says how many it really moved.
pub const FLAG_TRUNCATED: u32 = 1;
/// `RecordHeader::flags`: the payload could not be read from user memory
/// (bpf_probe_read_user failed); the record carries no bytes for this chunk.
pub const FLAG_READ_FAULT: u32 = 2;
/// `RecordHeader::flags`: the last record of this syscall.
pub const FLAG_LAST: u32 = 4;

/// Header of every ring-buffer record; for `Data` records `len` payload bytes
/// follow it directly.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `RecordKind` as u16.
    pub kind: u16,
    /// `Syscall` as u16.
    pub syscall: u16,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// bpf_ktime_get_ns(): CLOCK_MONOTONIC nanoseconds at syscall exit.
    pub ts_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    /// The fd the record is about (for Fork/ProcessExit: -1).
    pub fd: i32,
    /// Data: the fd's syscall sequence number (`FdState::seq`). Open: the
    /// other fd (socketpair peer end, accept's listening fd, dup's old fd).
    /// Fork: the child pid. Otherwise 0.
    pub aux: i32,
    /// The syscall's return value (bytes moved for Data records).
    pub ret: i64,
    /// Offset of this chunk in the syscall's payload.
    pub offset: u32,
    /// Payload bytes following this header.
    pub len: u32,
}

pub const RECORD_HEADER_LEN: usize = core::mem::size_of::<RecordHeader>();

/// Key of the `FDS` map: one fd of one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FdKey {
    pub tgid: u32,
    pub fd: u32,
}

/// Value of the `FDS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdState {
    /// FD_LISTEN and/or FD_CONN.
    pub flags: u32,
    /// Read-family syscalls seen on this fd so far. Each Data record carries
    /// its syscall's number in `aux`, so userspace can tell which connection
    /// lost records when the ring buffer overflowed. Plain increments (BPF
    /// has no 32-bit fetch-add in `core`): a race between two threads reading
    /// one fd can repeat a number but never skip one, so it never fakes a loss.
    pub seq_in: u32,
    /// Write-family syscalls seen on this fd so far (same rules).
    pub seq_out: u32,
    pub _pad: u32,
}

impl FdState {
    pub const fn new(flags: u32) -> Self {
        Self {
            flags,
            seq_in: 0,
            seq_out: 0,
            _pad: 0,
        }
    }
}

/// `FDS` value bit: a listening socket whose accepted connections are tracked.
pub const FD_LISTEN: u32 = 1;
/// `FDS` value bit: a connection whose payload is captured.
pub const FD_CONN: u32 = 2;

/// Key of the `CONNECT_PATHS` map: a unix socket path, NUL padded, as in
/// `struct sockaddr_un::sun_path` (108 bytes on Linux).
pub const SUN_PATH_LEN: usize = 108;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SunPath {
    pub bytes: [u8; SUN_PATH_LEN],
}

/// Runtime settings read by the programs (single-entry `CONFIG` array).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bytes captured per syscall at most (<= MAX_SNAP).
    pub snap_len: u32,
    /// Wake the reader only once this many bytes wait in the ring buffer;
    /// below it, records are written with BPF_RB_NO_WAKEUP and the reader's
    /// timed drain picks them up.
    pub wakeup_bytes: u32,
}

/// Indexes of the per-CPU `COUNTERS` array.
pub mod counter {
    /// Records dropped because the ring buffer was full.
    pub const LOST_RECORDS: u32 = 0;
    /// Payload bytes in those dropped records.
    pub const LOST_BYTES: u32 = 1;
    /// Chunks whose user memory could not be read.
    pub const READ_FAULTS: u32 = 2;
    /// Tracked fds that could not be added because `FDS` was full.
    pub const FD_MAP_FULL: u32 = 3;
    pub const COUNT: u32 = 4;
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data, repr(C), no padding that the kernel reads.
    unsafe impl aya::Pod for super::FdKey {}
    unsafe impl aya::Pod for super::SunPath {}
    unsafe impl aya::Pod for super::FdState {}
    unsafe impl aya::Pod for super::Config {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_stable() {
        // The eBPF side and userspace must agree on these exact sizes.
        assert_eq!(RECORD_HEADER_LEN, 48);
        assert_eq!(core::mem::size_of::<FdKey>(), 8);
        assert_eq!(core::mem::size_of::<Config>(), 8);
        assert_eq!(core::mem::size_of::<FdState>(), 16);
        assert_eq!(core::mem::align_of::<RecordHeader>(), 8);
        assert!(TGID_SLOTS.is_power_of_two());
        assert_eq!(MAX_SNAP as usize % MAX_CHUNK, 0);
    }

    #[test]
    fn enums_round_trip() {
        for v in 1..=17u16 {
            assert_eq!(Syscall::from_u16(v).unwrap() as u16, v);
        }
        assert!(Syscall::from_u16(0).is_none());
        for v in 1..=5u16 {
            assert_eq!(RecordKind::from_u16(v).unwrap() as u16, v);
        }
        assert!(Syscall::Recvmsg.is_inbound() && !Syscall::Sendmsg.is_inbound());
    }

    #[test]
    fn syscall_names_round_trip() {
        for v in 1..=17u16 {
            let s = Syscall::from_u16(v).unwrap();
            assert_eq!(Syscall::from_name(s.name()), Some(s));
        }
        for bad in ["", "READ", "read ", "recv", "dup4", "Sched"] {
            assert_eq!(Syscall::from_name(bad), None, "{bad:?}");
        }
    }
}
