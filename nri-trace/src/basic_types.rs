//! The words every stage shares: which connection ([`ConnId`]), which way
//! its bytes went ([`Direction`]) and when something happened
//! ([`Timestamp`]). Here, not in capture, so that decode, the assemblers,
//! the engine and the sinks name a connection or a moment without
//! depending on the capture stage; capture re-exports them for its events.

use serde::{Deserialize, Serialize};

/// Stable id of one traced connection for the lifetime of a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Direction of bytes relative to the process holding the connection
/// (`ConnOpen::tgid`): the traced process (the runtime), or the peer for a
/// followed peer end (`ConnOpen::other_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The holding process read these bytes (peer -> traced process).
    In,
    /// The holding process wrote these bytes (traced process -> peer).
    Out,
}

/// When something happened: the kernel's CLOCK_MONOTONIC at syscall exit,
/// and the matching wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp {
    pub mono_ns: u64,
    /// Nanoseconds since the Unix epoch (derived from mono_ns with the
    /// REALTIME-MONOTONIC offset taken when the capture started).
    pub wall_ns: u64,
}
