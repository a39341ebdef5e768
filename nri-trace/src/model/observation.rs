//! What the model stage hands the engine: one time-ordered stream of CRI
//! calls, NRI calls, connection and plugin events, capture loss, and the
//! capture clock.
//!
//! This is the boundary `nri-trace watch --save` writes (one [`Observation`] per
//! NDJSON line, docs/schema.md) and `nri-trace replay` reads back: the
//! engine sees the same stream live and replayed, so it gives the same
//! findings. The [`Observation::Clock`] lines carry what the decoders know
//! about time that no call shows (how far the capture has got, which CRI
//! call is still being decoded), so the engine settles correlations at the
//! same points in both.

use serde::{Deserialize, Serialize};

use super::{
    cri_call::{CriCall, CriObservation},
    cri_client::CriClient,
    nri_call::{NriCall, NriObservation, NriVersions, PluginId},
};
use crate::{
    basic_types::{ConnId, Timestamp},
    capture::{cri_state::CriState, sandbox::SandboxEvent, Loss},
    decode::nri::message::Event,
};

/// One engine input.
// Observations are handed over one by one; calls dominate the stream.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Observation {
    /// A finished CRI call.
    CriCall(CriCall),
    /// A CRI teardown call (StopContainer, StopPodSandbox,
    /// RemovePodSandbox) was made; its `cri_call` follows when it ends.
    /// Until then a terminating pod waits on it (a grace period, or a
    /// runtime that does not answer).
    CriPending(CriCall),
    /// A CRI connection seen for the first time, and its client: `client`
    /// is its `comm[pid]` label (a string since version 1 of the schema),
    /// `client_process` the client itself (model/cri_client.rs; absent in
    /// record files written before it was).
    CriConnection {
        conn: ConnId,
        ts: Timestamp,
        client: Option<String>,
        #[serde(default)]
        client_process: Option<CriClient>,
    },
    /// A CRI connection closed: its client (kubelet) went, or the runtime
    /// closed it. A terminating pod whose calls came on it has nobody
    /// asking for its teardown until a client asks again.
    CriConnectionGone {
        conn: ConnId,
        ts: Timestamp,
        client: Option<String>,
    },
    /// The CRI decoder skipped bytes to find a frame boundary.
    CriResync {
        conn: ConnId,
        ts: Timestamp,
        skipped: usize,
    },
    /// A finished NRI call.
    NriCall(NriCall),
    /// An NRI teardown hook was called (StopContainer, RemoveContainer,
    /// StopPodSandbox, RemovePodSandbox); its `nri_call` follows when it
    /// ends. Until then a stuck pod may wait on it.
    NriPending(NriCall),
    /// An NRI connection and its plugin (again when its identity or
    /// subscription becomes known).
    NriPlugin {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "crate::model::nri_call::subscribed_events"
        )]
        events: Option<Vec<Event>>,
        /// The NRI versions its two ends announced, when seen.
        #[serde(default, skip_serializing_if = "NriVersions::is_empty")]
        nri_version: NriVersions,
    },
    /// An NRI connection closed.
    NriPluginGone {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
    },
    /// The NRI decoder skipped bytes (`mux_conn` 0: the multiplexer layer).
    NriResync {
        conn: ConnId,
        ts: Timestamp,
        mux_conn: u32,
        skipped: usize,
    },
    /// The capture lost data (cumulative counters): calls may be missing.
    CaptureLoss(Loss),
    /// The runtime process serving the traced sockets exited.
    RuntimeExited { ts: Timestamp, pid: u32 },
    /// A new runtime process serves the traced sockets: the runtime
    /// restarted (the capture follows it).
    RuntimeStarted { ts: Timestamp, pid: u32 },
    /// A signal, exit, unmount, unlink, namespace or cgroup event of the
    /// runtime's process tree (`--sandbox`).
    Sandbox(SandboxEvent),
    /// The runtime's pods and containers as it listed them when nri-trace
    /// asked (at start, after a runtime restart): names for the ids of
    /// pods made before the trace (capture/cri_state.rs).
    CriState(CriState),
    /// The capture has reached `now_ns` (monotonic); no CRI call still
    /// being decoded started before `cri_oldest_ns`, and no NRI event
    /// delivery still awaiting its response before `nri_open_ns`.
    Clock {
        now_ns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cri_oldest_ns: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nri_open_ns: Option<u64>,
    },
}

impl Observation {
    /// When it happened (capture time); `None` for loss counters.
    pub fn ts(&self) -> Option<Timestamp> {
        match self {
            Observation::CriCall(c) | Observation::CriPending(c) => c.end.or(c.start),
            Observation::NriCall(c) | Observation::NriPending(c) => c.end.or(c.start),
            Observation::CriConnection { ts, .. }
            | Observation::CriResync { ts, .. }
            | Observation::CriConnectionGone { ts, .. }
            | Observation::NriPlugin { ts, .. }
            | Observation::NriPluginGone { ts, .. }
            | Observation::NriResync { ts, .. }
            | Observation::RuntimeExited { ts, .. }
            | Observation::RuntimeStarted { ts, .. } => Some(*ts),
            Observation::Sandbox(s) => Some(s.ts),
            Observation::CriState(s) => Some(s.ts),
            Observation::CaptureLoss(_) => None,
            Observation::Clock { now_ns, .. } => Some(Timestamp {
                mono_ns: *now_ns,
                wall_ns: 0,
            }),
        }
    }
}

impl From<CriObservation> for Observation {
    fn from(o: CriObservation) -> Self {
        match o {
            CriObservation::Call(c) => Observation::CriCall(c),
            CriObservation::Pending(c) => Observation::CriPending(c),
            CriObservation::Connection {
                conn,
                ts,
                client,
                client_process,
            } => Observation::CriConnection {
                conn,
                ts,
                client,
                client_process,
            },
            CriObservation::ConnectionGone { conn, ts, client } => {
                Observation::CriConnectionGone { conn, ts, client }
            }
            CriObservation::Resync { conn, ts, skipped } => {
                Observation::CriResync { conn, ts, skipped }
            }
        }
    }
}

impl From<NriObservation> for Observation {
    fn from(o: NriObservation) -> Self {
        match o {
            NriObservation::Call(c) => Observation::NriCall(c),
            NriObservation::Pending(c) => Observation::NriPending(c),
            NriObservation::Plugin {
                conn,
                ts,
                plugin,
                events,
                nri_version,
            } => Observation::NriPlugin {
                conn,
                ts,
                plugin,
                events,
                nri_version,
            },
            NriObservation::PluginGone { conn, ts, plugin } => {
                Observation::NriPluginGone { conn, ts, plugin }
            }
            NriObservation::Resync {
                conn,
                ts,
                mux_conn,
                skipped,
            } => Observation::NriResync {
                conn,
                ts,
                mux_conn,
                skipped,
            },
        }
    }
}
