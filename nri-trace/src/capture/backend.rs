//! The interface between the capture session and whatever produces raw
//! records. Today: eBPF syscall tracepoints ([`super::ebpf::EbpfBackend`]).
//! A uprobe backend on the runtime binary (no cost for other processes)
//! would implement the same trait.

use std::{os::fd::RawFd, path::Path};

use thiserror::Error;

use super::Loss;

/// What went wrong loading, attaching or driving the probes. Each
/// message names the fix; the library's own error stays as the source
/// (boxed: aya's errors are large, and every backend call returns this).
#[derive(Debug, Error)]
pub enum BackendError {
    #[error(
        "the nri-trace binary embeds no eBPF object: build it with `cargo xtask build` \
         (see docs/building.md)"
    )]
    NoObject,
    /// The object did not load (BTF, maps, relocations).
    #[error(
        "loading the eBPF object failed: {summary}. Run `nri-trace doctor` to see what is missing"
    )]
    Object {
        /// The error, its verifier log shortened.
        summary: String,
        #[source]
        source: Box<aya::EbpfError>,
    },
    /// The object has no such program, or one of another type.
    #[error("eBPF program {program} {problem}: rebuild the binary with `cargo xtask build`")]
    Program {
        program: String,
        problem: &'static str,
    },
    /// A program failed to load (the verifier refused it, a helper is
    /// missing from this kernel).
    #[error(
        "loading eBPF program {program} failed: {summary}. Run `nri-trace doctor` to see what is \
         missing"
    )]
    ProgramLoad {
        program: String,
        /// The error, its verifier log shortened.
        summary: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error(
        "attaching {program} to {tracepoint} failed. Is tracefs mounted at /sys/kernel/tracing? \
         Run `nri-trace doctor`"
    )]
    Attach {
        program: String,
        tracepoint: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// The kernel's information on a loaded program (its statistics).
    #[error("reading the kernel's information on eBPF program {program}")]
    ProgramInfo {
        program: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// `--backend fentry` where the fentry programs cannot run.
    #[error(
        "the fentry backend cannot run here: {reason}. Use `--backend auto` (the tracepoint \
         backend where fentry is refused); `nri-trace doctor` says which one runs"
    )]
    Fentry { reason: String },
    #[error("eBPF map {map}")]
    Map {
        map: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error(
        "eBPF map {map} is missing from the object: rebuild the binary with `cargo xtask build`"
    )]
    MapMissing { map: &'static str },
    #[error("unix socket path {0} is longer than sun_path (107 bytes)")]
    PathTooLong(String),
}

/// A source of raw capture records (layout: `nri_trace_common::EntryHeader`).
/// What a record costs in userspace beyond its bytes, for
/// [`CaptureBackend::drain`]'s budget: the event it becomes, its
/// allocation. Measured against a flood of 8-byte reads (a million empty
/// NRI multiplexer frames, containerd reading each 8-byte header with its
/// own read(2)): 820,000 records held about 170 MB, some 200 bytes each.
pub(crate) const RECORD_COST: usize = 256;

pub trait CaptureBackend: Send {
    /// Capture syscalls of this process (tgid).
    fn track_process(&mut self, tgid: u32) -> Result<(), BackendError>;
    /// Stop capturing this process and forget its tracked fds.
    fn untrack_process(&mut self, tgid: u32) -> Result<(), BackendError>;
    /// Track one fd of a tracked process (`FD_LISTEN` / `FD_CONN` bits).
    fn track_fd(&mut self, tgid: u32, fd: u32, flags: u32) -> Result<(), BackendError>;
    /// Start tracking connections a tracked process makes to this path.
    fn track_connect_path(&mut self, path: &Path) -> Result<(), BackendError>;
    /// Start tracking any process that binds this listening path, with
    /// that socket as a listener, from the bind on (a restarted runtime);
    /// its record carries `name` (see `EntryKind::Bound`).
    fn watch_bind_path(&mut self, path: &Path, name: u32) -> Result<(), BackendError>;
    /// Report the sandbox events of these processes and of the processes
    /// they make (a backend without sandbox probes ignores it).
    fn watch_tasks(&mut self, _tgids: &[u32]) -> Result<(), BackendError> {
        Ok(())
    }
    /// Cumulative loss counters over all CPUs.
    fn loss(&self) -> Result<Loss, BackendError>;
    /// Sandbox events the kernel counted instead of sending (they explain
    /// nothing: `--kernel explaining`), over all CPUs: not a loss.
    fn kernel_filtered(&self) -> Result<u64, BackendError> {
        Ok(0)
    }
    /// The kernel times (CLOCK_MONOTONIC ns) of the first record dropped
    /// since the last call (None: no CPU stamped one, and then 0) and of
    /// the latest dropped record; the first stamps are cleared, so each
    /// call covers the drops since the one before.
    fn take_loss_times(&mut self) -> Result<(Option<u64>, u64), BackendError> {
        Ok((None, 0))
    }
    /// Hand the records now available to `f`, up to `budget` bytes (each
    /// record counted as its length plus [`RECORD_COST`]); true when it
    /// stopped at the budget (more may wait).
    fn drain(&mut self, budget: usize, f: &mut dyn FnMut(&[u8])) -> bool;
    /// A descriptor that becomes readable when records wait (for epoll).
    fn poll_fd(&self) -> RawFd;
    /// The reader is about to sleep until [`Self::poll_fd`] is readable
    /// (true), or is awake and drains on its own clock (false): a backend
    /// that wakes it for its first record while it sleeps says true. One
    /// that cannot (false, the default) is drained on the sleeping clock.
    fn set_reader_asleep(&mut self, _asleep: bool) -> Result<bool, BackendError> {
        Ok(false)
    }
}
