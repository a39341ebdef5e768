//! Types shared byte-for-byte by the eBPF programs (`nri-trace-ebpf`) and the
//! userspace collector (`nri-trace`).
//!
//! Everything here is `#[repr(C)]`, `Copy` and free of pointers: the kernel
//! side writes these structs into BPF maps and the ring buffer, and userspace
//! reads them back as plain bytes. Change a layout on one side only and the
//! other side reads garbage, so the layouts are asserted in tests.
#![no_std]

/// Payload bytes carried by one ring-buffer record. A syscall moving more
/// than this is split into several records (`EntryHeader::offset`).
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

/// Steps (16 KiB chunks, or iovec fetches) of one syscall's copy in each
/// run of the fallback programs' `copy_tail`, for kernels without bpf_loop
/// (before 5.17): a bounded loop the verifier walks step by step, so
/// short; `copy_tail` goes on by tail-calling itself.
pub const COMPAT_TAIL_STEPS: u32 = 4;

/// Runs of `copy_tail` per syscall: the kernel allows 32 tail calls per
/// program run (MAX_TAIL_CALL_CNT, include/linux/bpf.h; 33 since 5.17),
/// and the data program's own call into `copy_tail` is the first.
pub const COMPAT_TAIL_RUNS: u32 = 32;

/// Steps of one syscall's copy in the fallback programs: past them, the
/// rest of the syscall's bytes are dropped and the call marked truncated.
pub const COMPAT_STEPS: u32 = COMPAT_TAIL_STEPS * COMPAT_TAIL_RUNS;

/// Size of the direct-mapped tgid filter (`TGID_FILTER`). Must be a power of
/// two: slot = tgid & (TGID_SLOTS - 1).
pub const TGID_SLOTS: u32 = 4096;

/// Filter slot value meaning "more than one tracked tgid maps here: ask the
/// `TRACKED_TGIDS` hash map". Never a real tgid (pid_max is at most 2^22).
pub const TGID_SLOT_SHARED: u32 = u32::MAX;

/// A tracked tgid's value in `TGID_FILTER` (when it has the slot alone) and
/// in `TRACKED_TGIDS`: bits 0..22 the tgid (PID_MAX_LIMIT is 2^22,
/// include/linux/threads.h), bits 24..32 its `FD_TABLE` row + 1, 0 when its
/// fds live in `FDS` only. The filter lookup the programs make anyway thus
/// also says where the process's fds are, at no extra cost.
pub const FILTER_TGID_MASK: u32 = (1 << 22) - 1;
const FILTER_ROW_SHIFT: u32 = 24;

/// Rows of `FD_TABLE`: processes whose tracked fds live in an array, which
/// the JIT inlines, instead of the `FDS` hash (a lookup there cost about
/// 45 ns per captured write here: hashing and two kernel calls,
/// docs/benchmarks.md). More tracked processes than rows use `FDS`.
pub const FD_TABLE_ROWS: u32 = 8;
/// Fds 0..FD_TABLE_FDS of a process with a row live in `FD_TABLE`, higher
/// ones in `FDS` (Linux hands out the lowest free fd, so a runtime's
/// sockets are below this unless it holds thousands of files).
pub const FD_TABLE_FDS: u32 = 4096;

/// The filter value of `tgid`, with its `FD_TABLE` row if it has one.
pub const fn filter_value(tgid: u32, row: Option<u32>) -> u32 {
    match row {
        Some(r) if r < FD_TABLE_ROWS => (tgid & FILTER_TGID_MASK) | ((r + 1) << FILTER_ROW_SHIFT),
        _ => tgid & FILTER_TGID_MASK,
    }
}

/// The tgid a filter value names; None for an empty or shared slot.
pub const fn filter_tgid(v: u32) -> Option<u32> {
    if v == 0 || v == TGID_SLOT_SHARED {
        None
    } else {
        Some(v & FILTER_TGID_MASK)
    }
}

/// The `FD_TABLE` row a filter value carries; `FD_TABLE_ROWS` (no row)
/// when it has none.
pub const fn filter_row(v: u32) -> u32 {
    let r = (v >> FILTER_ROW_SHIFT).wrapping_sub(1);
    if r < FD_TABLE_ROWS {
        r
    } else {
        FD_TABLE_ROWS
    }
}

/// Where the state of `fd` lives for a process with `row` (as
/// [`filter_row`] gives it): `Some(index)` in `FD_TABLE`, or None for
/// `FDS`. Both sides place fds by this rule alone, so each fd has exactly
/// one home and a miss in the table is final.
pub const fn fd_table_index(row: u32, fd: u32) -> Option<u32> {
    if row < FD_TABLE_ROWS && fd < FD_TABLE_FDS {
        Some(row * FD_TABLE_FDS + fd)
    } else {
        None
    }
}

/// Default ring buffer size in bytes (power of two, multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 16 * 1024 * 1024;

/// What a ring-buffer record describes.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
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
    /// A sandbox event (signal, exit, unmount, ...) of the runtime's process
    /// tree; a [`SandboxRecord`] follows the header.
    Sandbox = 6,
    /// A process bound a watched socket path (`LISTEN_PATHS`) and is now
    /// tracked, with that fd as a listener: `fd` is the socket, `aux` the
    /// path's value in `LISTEN_PATHS`.
    Bound = 7,
}

impl EntryKind {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Data,
            2 => Self::Open,
            3 => Self::Close,
            4 => Self::Fork,
            5 => Self::ProcessExit,
            6 => Self::Sandbox,
            7 => Self::Bound,
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
    /// Not a syscall: signal/signal_generate (kill, tgkill,
    /// pidfd_send_signal and kernel-sent signals alike).
    Signal = 18,
    /// Not a syscall: sched_process_exit of a watched process.
    Exit = 19,
    Umount2 = 20,
    Unlinkat = 21,
    Unlink = 22,
    Rmdir = 23,
    Mount = 24,
    Unshare = 25,
    Setns = 26,
    /// Not a syscall: task_newtask with CLONE_NEW* flags (clone, clone3).
    CloneNs = 27,
    /// Not a syscall: cgroup/cgroup_mkdir.
    CgroupMkdir = 28,
    /// Not a syscall: cgroup/cgroup_rmdir.
    CgroupRmdir = 29,
    Bind = 30,
    /// Not a syscall: sched/sched_process_exec of a process of the tree.
    Exec = 31,
    /// fcntl(F_DUPFD / F_DUPFD_CLOEXEC): a dup (Go's `net.FileConn`).
    Fcntl = 32,
}

/// Every `Syscall`, in numbering order (for tests and name lookups).
pub const ALL_SYSCALLS: [Syscall; 32] = {
    use Syscall::{
        Accept, Accept4, Bind, CgroupMkdir, CgroupRmdir, CloneNs, Close, Connect, Dup, Dup2, Dup3,
        Exec, Exit, Fcntl, Mount, Read, Readv, Recvfrom, Recvmsg, Rmdir, Sched, Sendmsg, Sendto,
        Setns, Signal, Socketpair, Umount2, Unlink, Unlinkat, Unshare, Write, Writev,
    };
    [
        Read,
        Readv,
        Recvfrom,
        Recvmsg,
        Write,
        Writev,
        Sendto,
        Sendmsg,
        Close,
        Accept,
        Accept4,
        Connect,
        Socketpair,
        Dup,
        Dup2,
        Dup3,
        Sched,
        Signal,
        Exit,
        Umount2,
        Unlinkat,
        Unlink,
        Rmdir,
        Mount,
        Unshare,
        Setns,
        CloneNs,
        CgroupMkdir,
        CgroupRmdir,
        Bind,
        Exec,
        Fcntl,
    ]
};

impl Syscall {
    pub fn from_u16(v: u16) -> Option<Self> {
        use Syscall::{
            Accept, Accept4, Bind, CgroupMkdir, CgroupRmdir, CloneNs, Close, Connect, Dup, Dup2,
            Dup3, Exec, Exit, Fcntl, Mount, Read, Readv, Recvfrom, Recvmsg, Rmdir, Sched, Sendmsg,
            Sendto, Setns, Signal, Socketpair, Umount2, Unlink, Unlinkat, Unshare, Write, Writev,
        };
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
            18 => Signal,
            19 => Exit,
            20 => Umount2,
            21 => Unlinkat,
            22 => Unlink,
            23 => Rmdir,
            24 => Mount,
            25 => Unshare,
            26 => Setns,
            27 => CloneNs,
            28 => CgroupMkdir,
            29 => CgroupRmdir,
            30 => Bind,
            31 => Exec,
            32 => Fcntl,
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
        use Syscall::{
            Accept, Accept4, Bind, CgroupMkdir, CgroupRmdir, CloneNs, Close, Connect, Dup, Dup2,
            Dup3, Exec, Exit, Fcntl, Mount, Read, Readv, Recvfrom, Recvmsg, Rmdir, Sched, Sendmsg,
            Sendto, Setns, Signal, Socketpair, Umount2, Unlink, Unlinkat, Unshare, Write, Writev,
        };
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
            Signal => "signal",
            Exit => "exit",
            Umount2 => "umount2",
            Unlinkat => "unlinkat",
            Unlink => "unlink",
            Rmdir => "rmdir",
            Mount => "mount",
            Unshare => "unshare",
            Setns => "setns",
            CloneNs => "clone_ns",
            CgroupMkdir => "cgroup_mkdir",
            CgroupRmdir => "cgroup_rmdir",
            Bind => "bind",
            Exec => "exec",
            Fcntl => "fcntl",
        }
    }

    /// The inverse of [`Syscall::name`]: recordings name syscalls rather
    /// than number them, so they stay readable and do not depend on our
    /// numbering. Exact, case-sensitive match.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_SYSCALLS.into_iter().find(|s| s.name() == name)
    }
}

/// `EntryHeader::flags`: the syscall moved more bytes than the snap length
/// (or than `MAX_IOV` iovecs hold); `ret` says how many it really moved.
pub const FLAG_TRUNCATED: u32 = 1;
/// `EntryHeader::flags`: the payload could not be read from user memory
/// (bpf_probe_read_user failed); the record carries no bytes for this chunk.
pub const FLAG_READ_FAULT: u32 = 2;
/// `EntryHeader::flags`: the last record of this syscall.
pub const FLAG_LAST: u32 = 4;

/// Header of every ring-buffer record; for `Data` records `len` payload bytes
/// follow it directly.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    /// `EntryKind` as u16.
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

pub const ENTRY_HEADER_LEN: usize = size_of::<EntryHeader>();

/// Key of the `FDS` map: one fd of one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FdKey {
    pub tgid: u32,
    pub fd: u32,
}

/// Value of the `FDS` map and entry of the `FD_TABLE` array.
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
    /// The tgid this entry belongs to. An `FD_TABLE` entry counts only
    /// while it matches the row's process: a row given to a new process may
    /// still hold entries a program wrote while the old one was untracked.
    pub owner: u32,
}

impl FdState {
    pub const fn new(owner: u32, flags: u32) -> Self {
        Self {
            flags,
            seq_in: 0,
            seq_out: 0,
            owner,
        }
    }

    /// An entry of `tgid`'s that is tracked (an `FD_TABLE` slot in use).
    pub const fn is_of(&self, tgid: u32) -> bool {
        self.flags != 0 && self.owner == tgid
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
    /// Byte offset of `exit_code` in the kernel's `struct task_struct`
    /// (from its BTF); 0: unknown, exits are reported without a code.
    pub exit_code_off: u32,
    /// Sandbox records allowed per CPU per second; the rest are counted in
    /// `counter::SANDBOX_SUPPRESSED` (never a flood).
    pub sandbox_rate: u32,
    /// Bit `1 << sig` set: signals of that number sent to the runtime's
    /// process tree are reported (not SIGCHLD, SIGURG, ...: a flood).
    pub signal_mask: u64,
    /// Byte offset of `stack` in the kernel's `struct task_struct` (from
    /// its BTF): how the fallback programs find a task's saved user
    /// registers on kernels without bpf_task_pt_regs (before 5.15); 0:
    /// unknown, those programs see no syscall arguments.
    pub task_stack_off: u32,
    /// Offset of `bool group_dead` in the sched_process_exit tracepoint's
    /// record (its tracefs format; 6.18's record has it, 6.12's and older
    /// ones do not); 0: the
    /// kernel's record has none, and `task_signal_off` says instead.
    pub exit_group_dead_off: u32,
    /// Offsets of `signal` in `struct task_struct` and of `live` in
    /// `struct signal_struct` (BTF): `task->signal->live` is 0 once the
    /// last thread of a process exits (kernel/exit.c do_exit decrements it
    /// before the tracepoint). 0: unknown.
    pub task_signal_off: u32,
    pub signal_live_off: u32,
    /// `KERNEL_EVENTS_*`: which sandbox events go to userspace.
    pub kernel_events: u32,
    pub pad: u32,
}

/// `Config::kernel_events`: only what explain and the rules use (the
/// default, `--kernel explaining`). Not sent, counted in
/// `counter::SANDBOX_FILTERED` instead: removals that fail the way a
/// directory walk's probing fails (ENOENT, EISDIR, and ENOTEMPTY but for a
/// cgroup: runc's and containerd's cleanup, dozens per pod), successful
/// removals of paths that neither failed before nor were a namespace's
/// bind mount, and cgroup creation. About 60 % of a pod lifecycle's kernel
/// events on a cgroup v1 node (docs/explain.md, "What explains nothing").
pub const KERNEL_EVENTS_EXPLAINING: u32 = 0;
/// `Config::kernel_events`: every event the probes see (`--kernel all`).
pub const KERNEL_EVENTS_ALL: u32 = 1;

/// Whether an unmount (`umount`) or a removal that ended with `errno`
/// (positive; 0 for success) cannot hold a pod: EINVAL on an unmount (not
/// mounted), ENOENT (already gone), EISDIR and, but for a cgroup
/// (`names_cgroup`: a cgroup holds only its control files), ENOTEMPTY on a
/// removal: os.RemoveAll's normal probing of a directory tree. One rule for
/// the probes' filter (`KERNEL_EVENTS_EXPLAINING`) and userspace's
/// `SandboxOp::failure`. Numbers: include/uapi/asm-generic/errno-base.h,
/// errno.h.
#[must_use]
pub const fn removal_errno_is_benign(umount: bool, errno: i32, names_cgroup: bool) -> bool {
    const ENOENT: i32 = 2;
    const EISDIR: i32 = 21;
    const EINVAL: i32 = 22;
    const ENOTEMPTY: i32 = 39;
    if umount {
        matches!(errno, 0 | EINVAL | ENOENT)
    } else {
        matches!(errno, 0 | ENOENT | EISDIR) || (errno == ENOTEMPTY && !names_cgroup)
    }
}

impl Config {
    /// The sandbox defaults: 1000 records/s per CPU; HUP, INT, QUIT, ABRT,
    /// KILL, TERM, STOP (include/uapi/asm-generic/signal.h numbers).
    pub const DEFAULT_SANDBOX_RATE: u32 = 1000;
    pub const DEFAULT_SIGNAL_MASK: u64 =
        (1 << 1) | (1 << 2) | (1 << 3) | (1 << 6) | (1 << 9) | (1 << 15) | (1 << 19);
}

/// Size of the `POD_TASKS` map: processes of the runtime's tree (runtime,
/// shims, runc, containers) whose sandbox events are reported.
pub const POD_TASK_SLOTS: u32 = 32768;

/// `POD_TASKS` value bit: report this process's exit (set when a signal
/// in `Config::signal_mask` was sent to it, or by userspace).
pub const TASK_WATCH_EXIT: u32 = 1;

/// Bytes of each path a [`SandboxRecord`] carries; longer paths are cut
/// (`SANDBOX_PATH_CUT`). Pod paths (kubelet pod dirs, netns files,
/// container rootfs and cgroups) fit.
pub const SANDBOX_PATH_LEN: usize = 256;

/// `SandboxRecord::flags`: `path` was cut at `SANDBOX_PATH_LEN`.
pub const SANDBOX_PATH_CUT: u32 = 1;
/// `SandboxRecord::flags`: `path2` was cut.
pub const SANDBOX_PATH2_CUT: u32 = 2;
/// `SandboxRecord::flags`: the exit code could not be read.
pub const SANDBOX_NO_CODE: u32 = 4;

/// Payload of a `EntryKind::Sandbox` record. What each field means
/// depends on the header's `Syscall`:
///
/// | syscall | `arg` | `target` | `aux` | `path` / `path2` |
/// |---|---|---|---|---|
/// | signal | signal number | target pid | si_code | - |
/// | exit | exit code (wait status form) | pid | - | - |
/// | umount2 | flags | - | - | target |
/// | unlinkat | flags | - | dirfd | path |
/// | unlink, rmdir | - | - | - | path |
/// | mount | flags | - | - | target / source |
/// | unshare | flags | - | - | - |
/// | setns | nstype | - | fd | - |
/// | clone_ns | clone flags | child pid | - | - |
/// | cgroup_mkdir/rmdir | cgroup id | level | hierarchy | cgroup path |
/// | exec | - | pid | old pid | the file executed |
///
/// The header's `ret` is the syscall's return value (negative errno), or
/// the signal's result (`TRACE_SIGNAL_*`, 0 delivered).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxRecord {
    /// bpf_get_current_cgroup_id() of the calling task (for exit: the
    /// exiting task).
    pub cgroup_id: u64,
    pub arg: u64,
    pub target: u32,
    pub aux: i32,
    /// The calling task's comm, NUL padded.
    pub comm: [u8; 16],
    pub flags: u32,
    /// Explicit padding, zeroed by the probe (no uninitialized bytes
    /// reach the ring buffer).
    pub pad: u32,
    pub path: [u8; SANDBOX_PATH_LEN],
    pub path2: [u8; SANDBOX_PATH_LEN],
}

pub const SANDBOX_RECORD_LEN: usize = size_of::<SandboxRecord>();

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
    /// Sandbox records not sent: over `Config::sandbox_rate`.
    pub const SANDBOX_SUPPRESSED: u32 = 4;
    /// New processes of the runtime's tree not followed: `POD_TASKS` full.
    pub const POD_MAP_FULL: u32 = 5;
    /// Kernel time (CLOCK_MONOTONIC, ns) of this CPU's first record
    /// dropped since userspace last cleared it (0: none): where in the
    /// capture the loss begins. Userspace zeroes it after each reading.
    pub const LOST_FIRST_NS: u32 = 6;
    /// Kernel time of this CPU's latest dropped record: where the loss
    /// ends. Never cleared (the reading compares it with the last one).
    pub const LOST_LAST_NS: u32 = 7;
    /// Sandbox events not sent because they explain nothing
    /// (`KERNEL_EVENTS_EXPLAINING`): counted, not lost.
    pub const SANDBOX_FILTERED: u32 = 8;
    pub const COUNT: u32 = 9;
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
        assert_eq!(ENTRY_HEADER_LEN, 48);
        assert_eq!(size_of::<FdKey>(), 8);
        // 4 x u32, u64, 6 x u32: no padding.
        assert_eq!(size_of::<Config>(), 48);
        assert_eq!(SANDBOX_RECORD_LEN, 48 + 2 * SANDBOX_PATH_LEN);
        assert_eq!(align_of::<SandboxRecord>(), 8);
        assert_eq!(size_of::<FdState>(), 16);
        assert_eq!(align_of::<EntryHeader>(), 8);
        assert!(TGID_SLOTS.is_power_of_two());
        assert_eq!(MAX_SNAP as usize % MAX_CHUNK, 0);
    }

    #[test]
    fn filter_values_carry_tgid_and_row() {
        let max_tgid = FILTER_TGID_MASK; // pid_max can be 2^22: last pid 2^22 - 1
        for tgid in [1, 4097, max_tgid] {
            let plain = filter_value(tgid, None);
            assert_eq!(plain, tgid);
            assert_eq!(filter_tgid(plain), Some(tgid));
            assert_eq!(filter_row(plain), FD_TABLE_ROWS);
            for row in 0..FD_TABLE_ROWS {
                let v = filter_value(tgid, Some(row));
                assert_ne!(v, TGID_SLOT_SHARED);
                assert_eq!(filter_tgid(v), Some(tgid));
                assert_eq!(filter_row(v), row);
            }
            // A row out of range is no row.
            assert_eq!(filter_value(tgid, Some(FD_TABLE_ROWS)), plain);
        }
        assert_eq!(filter_tgid(0), None);
        assert_eq!(filter_tgid(TGID_SLOT_SHARED), None);
        assert_eq!(filter_row(TGID_SLOT_SHARED), FD_TABLE_ROWS);
        assert_eq!(filter_row(0), FD_TABLE_ROWS);
    }

    #[test]
    fn fds_have_one_home() {
        assert_eq!(fd_table_index(0, 0), Some(0));
        assert_eq!(fd_table_index(2, 7), Some(2 * FD_TABLE_FDS + 7));
        let last = fd_table_index(FD_TABLE_ROWS - 1, FD_TABLE_FDS - 1).unwrap();
        assert_eq!(last, FD_TABLE_ROWS * FD_TABLE_FDS - 1);
        assert_eq!(fd_table_index(0, FD_TABLE_FDS), None);
        assert_eq!(fd_table_index(FD_TABLE_ROWS, 3), None);
        let e = FdState::new(42, FD_CONN);
        assert!(e.is_of(42) && !e.is_of(43));
        assert!(!FdState::new(42, 0).is_of(42));
    }

    #[test]
    fn enums_round_trip() {
        let n = ALL_SYSCALLS.len() as u16;
        for v in 1..=n {
            assert_eq!(Syscall::from_u16(v).unwrap() as u16, v);
            assert_eq!(ALL_SYSCALLS[v as usize - 1] as u16, v);
        }
        assert!(Syscall::from_u16(n + 1).is_none());
        assert!(Syscall::from_u16(0).is_none());
        for v in 1..=7u16 {
            assert_eq!(EntryKind::from_u16(v).unwrap() as u16, v);
        }
        assert!(EntryKind::from_u16(8).is_none());
        assert!(Syscall::Recvmsg.is_inbound() && !Syscall::Sendmsg.is_inbound());
    }

    #[test]
    fn syscall_names_round_trip() {
        for v in 1..=29u16 {
            let s = Syscall::from_u16(v).unwrap();
            assert_eq!(Syscall::from_name(s.name()), Some(s));
        }
        for bad in ["", "READ", "read ", "recv", "dup4", "Sched"] {
            assert_eq!(Syscall::from_name(bad), None, "{bad:?}");
        }
    }
}
