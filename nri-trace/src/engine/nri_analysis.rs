//! The NRI analysis of one capture: capture events in, [`NriRecord`]s out
//! (calls as hook spans, plugins coming and going, resyncs, capture loss),
//! plus per (plugin, hook) latency at the end.
//!
//! The same function serves a live capture and a replayed recording, so
//! both give the same records for the same events.

use std::path::PathBuf;

use serde::Serialize;

use super::hook_latency::{Buckets, HookSpan, HookSummary, HookTimer};
use crate::{
    capture::{CaptureEvent, ConnId, Loss, Timestamp},
    model::nri_call::{AssemblerStats, NriCall, NriCallAssembler, NriObservation, PluginId},
};

/// One line of `nri-trace nri` output.
// Records are printed and dropped one by one; calls dominate the stream.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NriRecord {
    /// A finished NRI call (request and how it ended), as a hook span.
    NriCall(HookSpan),
    /// An NRI connection and its plugin (again when the identity or the
    /// subscription becomes known).
    NriPlugin {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
        #[serde(skip_serializing_if = "Option::is_none")]
        events: Option<Vec<String>>,
    },
    /// An NRI connection closed.
    NriPluginGone {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
    },
    /// Bytes skipped to find the next frame boundary.
    NriResync {
        conn: ConnId,
        ts: Timestamp,
        mux_conn: u32,
        skipped: usize,
    },
    /// The capture lost data (cumulative counters): calls may be missing.
    CaptureLoss(Loss),
    /// A teardown hook was called; its `nri_call` follows when it ends.
    NriPending(NriCall),
}

/// Capture events to NRI records.
pub struct NriAnalysis {
    assembler: NriCallAssembler,
    timer: HookTimer,
    obs: Vec<NriObservation>,
}

impl NriAnalysis {
    /// `nri_paths`: the NRI socket paths being traced.
    pub fn new(nri_paths: Vec<PathBuf>) -> Self {
        NriAnalysis {
            assembler: NriCallAssembler::new(nri_paths),
            timer: HookTimer::new(),
            obs: Vec::new(),
        }
    }

    /// Feed one capture event; append what it completes to `out`.
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<NriRecord>) {
        if let CaptureEvent::Loss(l) = ev {
            out.push(NriRecord::CaptureLoss(*l));
        }
        self.assembler.on_capture(ev, &mut self.obs);
        self.convert(out);
    }

    /// The capture ended: report calls still waiting for a response.
    pub fn finish(&mut self, out: &mut Vec<NriRecord>) {
        self.assembler.finish(&mut self.obs);
        self.convert(out);
    }

    fn convert(&mut self, out: &mut Vec<NriRecord>) {
        for o in self.obs.drain(..) {
            out.push(match o {
                NriObservation::Call(c) => NriRecord::NriCall(self.timer.on_call(c)),
                NriObservation::Pending(c) => NriRecord::NriPending(c),
                NriObservation::Plugin {
                    conn,
                    ts,
                    plugin,
                    events,
                } => NriRecord::NriPlugin {
                    conn,
                    ts,
                    plugin,
                    events,
                },
                NriObservation::PluginGone { conn, ts, plugin } => {
                    NriRecord::NriPluginGone { conn, ts, plugin }
                }
                NriObservation::Resync {
                    conn,
                    ts,
                    mux_conn,
                    skipped,
                } => NriRecord::NriResync {
                    conn,
                    ts,
                    mux_conn,
                    skipped,
                },
            });
        }
    }

    /// Own-time histograms per (plugin, hook) at `bounds_ns`.
    pub fn buckets(&self, bounds_ns: &[u64]) -> Vec<(String, String, Buckets)> {
        self.timer.buckets(bounds_ns)
    }

    /// Latency per (plugin, hook) so far.
    pub fn summary(&self) -> Vec<HookSummary> {
        self.timer.summary()
    }

    /// What the decoders met that was not a call.
    pub fn stats(&self) -> AssemblerStats {
        self.assembler.stats()
    }

    /// Calls waiting for a response now.
    pub fn in_flight(&self) -> usize {
        self.assembler.in_flight()
    }
}

/// Analyse a whole recorded capture: every record, then the summary.
pub fn analyze(
    events: impl IntoIterator<Item = CaptureEvent>,
    nri_paths: Vec<PathBuf>,
) -> (Vec<NriRecord>, Vec<HookSummary>) {
    let mut a = NriAnalysis::new(nri_paths);
    let mut out = Vec::new();
    for ev in events {
        a.on_capture(&ev, &mut out);
    }
    a.finish(&mut out);
    (out, a.summary())
}
