//! Capture: the first stage of nri-trace. It turns what the probes saw into
//! ordered per-connection byte streams.
//!
//! ```text
//! probe (eBPF ring entries) -> ring_entry::parse -> tracker::ConnTracker -> CaptureEvent stream
//! ```
//!
//! The output, [`CaptureEvent`], is all later stages know about capture:
//! connections opening and closing, [`Chunk`]s of bytes with their direction,
//! process events, and loss reports. The kernel side sits behind
//! [`backend::CaptureBackend`] so that another backend (uprobes on the
//! runtime binary, or a recording) can produce the same events.
//!
//! A [`CaptureEvent`] serializes to one JSON object (chunk bytes as hex,
//! syscalls by name: `event_json`); `store::raw_capture` writes a stream
//! of them to NDJSON (the format of `nri-trace debug capture -o json`,
//! `watch --save-raw`) and reads it back exactly, so later stages give the
//! same results live or from a raw capture, and real captures serve as
//! test fixtures.

pub(crate) mod backend;
pub(crate) mod btf;
pub(crate) mod cri_state;
pub(crate) mod discovery;
pub(crate) mod ebpf;
mod event_json;
pub(crate) mod holders;
pub(crate) mod ring_entry;
pub(crate) mod runtimes;
pub(crate) mod sandbox;
pub(crate) mod selftest;
pub(crate) mod session;
pub(crate) mod tgid_filter;
pub(crate) mod tracker;
mod write_targets;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use nri_trace_common::Syscall;

pub use crate::basic_types::{ConnId, Direction, Timestamp};
// What the binary and the tests drive: the eBPF backend behind its trait,
// the session that turns its entries into events, the clocks the events
// carry, the sandbox events. The rest of capture is the crate's own
// (issue 35; the decoders' fuzzed layers are in `testing`).
pub use backend::{BackendError, CaptureBackend};
pub use cri_state::{CriState, StateContainer, StatePod};
pub use discovery::{ConnectedFd, DiscoveryError, EnvPeerSocket, Listener};
pub use ebpf::{BackendChoice, DataBackend, EbpfBackend, EbpfOptions, KernelHelpers, ProgramSet};
pub use event_json::{hex, unhex, HexError};
pub use holders::Holder;
pub use runtimes::{Runtime, RuntimeKind};
pub use sandbox::{runtime_tree, SandboxEvent, SandboxOp};
pub use session::{
    monotonic_ns, start_session, wall_offset_ns, AttachState, Session, SessionConfig, SessionError,
    DEFAULT_QUEUE_BYTES,
};
pub use write_targets::{OpenTarget, WriteTarget, DRAIN_EVERY};

/// How the traced process came to hold a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// Found in /proc, not seen opening: already open when the capture
    /// started, or a followed peer end (`ConnOpen::other_end`), registered
    /// when its traced end was found.
    Existing,
    /// Accepted on a tracked listening socket.
    Accept { listen_fd: i32 },
    /// Connected by the traced process to a tracked socket path.
    Connect,
    /// One end of a socketpair the traced process created.
    Socketpair { other_fd: i32 },
    /// A duplicate of a tracked fd (dup/dup2/dup3): same connection.
    Dup { old_fd: i32 },
}

/// A peer process, as far as /proc can tell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub comm: Option<String>,
    pub cmdline: Vec<String>,
    /// Selected environment variables of the peer (those the session was
    /// asked for, e.g. NRI_PLUGIN_NAME / NRI_PLUGIN_IDX of a pre-launched
    /// NRI plugin), when /proc shows them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Its cgroup path (`discovery::process_cgroup`: the v2 one, or
    /// systemd's where v2 says only `/`), when /proc showed it: which unit
    /// or session a CRI client runs in (kubelet.service, an SRE's
    /// session-N.scope). Absent in captures made before it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnOpen {
    pub conn: ConnId,
    pub ts: Timestamp,
    pub tgid: u32,
    pub fd: i32,
    pub origin: Origin,
    /// The socket path the connection belongs to (listener or connect
    /// target), when known.
    pub socket_path: Option<PathBuf>,
    /// The process at the other end (SO_PEERCRED), when it can be found.
    pub peer: Option<Peer>,
    /// Inode of the socket behind `fd` (as in its `socket:[N]` link in
    /// /proc/PID/fd), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    /// Set on the *peer's end* of a traced connection
    /// (`SessionConfig::follow_peer_ends`): the connection of the traced
    /// process (the runtime) this one is the other end of. `tgid` and `fd`
    /// are then the peer process's, and chunk directions are relative to
    /// it: what the runtime writes (`out` on `other_end`) the peer reads
    /// (`in` here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_end: Option<ConnId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnClose {
    pub conn: ConnId,
    pub ts: Timestamp,
    /// Why the capture considers it closed.
    pub reason: CloseReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The last fd referring to it was closed.
    Closed,
    /// The traced process exited.
    ProcessExit,
    /// The capture stopped tracking it.
    Untracked,
}

/// Bytes one syscall moved on a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    pub conn: ConnId,
    pub direction: Direction,
    pub ts: Timestamp,
    pub tid: u32,
    #[serde(
        serialize_with = "event_json::ser_syscall",
        deserialize_with = "event_json::de_syscall"
    )]
    pub syscall: Syscall,
    #[serde(
        serialize_with = "event_json::ser_hex",
        deserialize_with = "event_json::de_hex"
    )]
    pub bytes: Vec<u8>,
    /// The syscall moved more bytes than `bytes` holds (snap length, iovec
    /// limit, unreadable memory, or lost records): the stream has a hole
    /// after these bytes and decoders must resynchronize.
    pub truncated: bool,
    /// Syscalls on this connection and direction were lost before this one
    /// (ring buffer overflow): the stream has a hole before these bytes.
    pub gap_before: bool,
    /// Bytes the syscall really moved (its return value).
    pub syscall_len: u64,
}

/// Process lifecycle of a traced process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProcessEvent {
    Fork {
        ts: Timestamp,
        parent: u32,
        child: u32,
    },
    Exit {
        ts: Timestamp,
        tgid: u32,
    },
    /// The process listening on a traced socket exited (a runtime
    /// stopping or restarting): the socket is looked for again.
    ListenerGone {
        ts: Timestamp,
        tgid: u32,
        path: PathBuf,
    },
    /// A new process listens on a traced socket whose listener had exited
    /// (the runtime restarted); it is traced from now on.
    Listening {
        ts: Timestamp,
        tgid: u32,
        path: PathBuf,
    },
}

impl ProcessEvent {
    /// When it happened.
    pub fn ts(&self) -> Timestamp {
        match self {
            ProcessEvent::Fork { ts, .. }
            | ProcessEvent::Exit { ts, .. }
            | ProcessEvent::ListenerGone { ts, .. }
            | ProcessEvent::Listening { ts, .. } => *ts,
        }
    }
}

/// Cumulative loss counters (all CPUs), reported when they change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// Records dropped because the ring buffer was full.
    pub lost_records: u64,
    /// Payload bytes in those records.
    pub lost_bytes: u64,
    /// Chunks whose user memory could not be read.
    pub read_faults: u64,
    /// Connections not tracked because the fd map was full.
    pub fd_map_full: u64,
    /// Records userspace could not parse (should stay 0).
    pub malformed: u64,
    /// Sandbox records the kernel did not send: over the per-CPU rate
    /// limit (`--sandbox`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sandbox_suppressed: u64,
    /// New processes of the runtime's tree not followed: map full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pod_map_full: u64,
    /// When the records newly counted in this report were dropped: the
    /// kernel's time of the first and the last (`counter::LOST_FIRST_NS`,
    /// `LOST_LAST_NS`). A reader behind the ring counts a loss long
    /// before it reaches the records around it, so the report's place in
    /// the stream does not say when the hole is; these do. Absent in
    /// captures made before they existed, and when nothing was dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_from: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_to: Option<Timestamp>,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Loss {
    /// The counters alone (without the time of the newest drops).
    #[must_use]
    pub fn counts(&self) -> Loss {
        Loss {
            lost_from: None,
            lost_to: None,
            ..*self
        }
    }

    pub fn any(&self) -> bool {
        self.counts() != Loss::default()
    }
}

/// What the capture stage emits, in kernel order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CaptureEvent {
    Open(ConnOpen),
    Chunk(Chunk),
    Close(ConnClose),
    Process(ProcessEvent),
    Loss(Loss),
    /// A signal, exit, unmount, ... of the runtime's process tree.
    Sandbox(SandboxEvent),
    /// The runtime's pods and containers, asked over CRI at start and
    /// after a runtime restart (`SessionConfig::cri_state`).
    CriState(CriState),
    /// The capture's clock, sent while the traced sockets are quiet: every
    /// record the kernel stamped before `ts` has been read. Time-bound
    /// decisions (a CRI call's settle window, a hook's deadline) are made
    /// on capture time, so without it a runtime that goes idle would leave
    /// its last call held until its next one. It travels in the stream
    /// (and the raw capture file) like any event, so a replay decides
    /// exactly as the live run did (`session/drain.rs`, `drain_until_stopped`).
    Tick {
        ts: Timestamp,
    },
}
