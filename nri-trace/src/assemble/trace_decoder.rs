//! One runtime's CRI and NRI sockets decoded together: capture events in,
//! [`Observation`]s out, in capture-time order.
//!
//! Capture events are routed by connection: those of the CRI socket to the
//! CRI assembler, all others (NRI socket, pre-launched plugins'
//! socketpairs, followed plugin ends) to the NRI assembler; kubelet's end
//! of a CRI connection is ignored.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

use super::{cri::CriCallAssembler, nri::NriCallAssembler};
use crate::{
    basic_types::ConnId,
    capture::{CaptureEvent, ProcessEvent},
    model::{
        cri_call::{CriObservation, CriStats},
        nri_call::NriObservation,
        observation::Observation,
    },
};

/// A [`Observation::Clock`] is written when capture time has moved on by
/// this much since the last one (or a call came, or the oldest CRI call in
/// decoding or open NRI delivery changed). The engine settles correlations
/// 10 ms after a call (`engine::correlate::NRI_SETTLE_NS`): 1 ms keeps that
/// timing while a busy stream of chunks does not become a stream of clock
/// lines.
pub(super) const CLOCK_STEP_NS: u64 = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Cri,
    Nri,
    /// The client's end of a CRI connection (not analysed).
    Ignore,
}

/// Capture events of one runtime's sockets to observations.
pub struct TraceDecoder {
    cri_paths: Vec<PathBuf>,
    nri_paths: Vec<PathBuf>,
    /// Runtime pids already reported exited / started (one runtime serves
    /// both sockets: one observation each).
    runtime_exits: HashSet<u32>,
    runtime_starts: HashSet<u32>,
    routes: HashMap<ConnId, Route>,
    cri: CriCallAssembler,
    nri: NriCallAssembler,
    cri_obs: Vec<CriObservation>,
    nri_obs: Vec<NriObservation>,
    /// The last clock written: (now, oldest CRI call in decoding, oldest
    /// open NRI delivery).
    last_clock: Option<(u64, Option<u64>, Option<u64>)>,
}

impl TraceDecoder {
    pub fn new(cri_paths: Vec<PathBuf>, nri_paths: Vec<PathBuf>) -> Self {
        TraceDecoder {
            cri_paths,
            nri_paths: nri_paths.clone(),
            runtime_exits: HashSet::new(),
            runtime_starts: HashSet::new(),
            routes: HashMap::new(),
            cri: CriCallAssembler::new(),
            nri: NriCallAssembler::new(nri_paths),
            cri_obs: Vec::new(),
            nri_obs: Vec::new(),
            last_clock: None,
        }
    }

    /// Feed one capture event; append what it completes to `out` (NRI
    /// first, then CRI, then the clock).
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<Observation>) {
        let (conn, now) = match ev {
            CaptureEvent::Open(o) => {
                let cri = o
                    .socket_path
                    .as_ref()
                    .is_some_and(|p| self.cri_paths.iter().any(|c| c == p));
                let peer_of_cri = o
                    .other_end
                    .is_some_and(|e| self.routes.get(&e) == Some(&Route::Cri));
                let route = if peer_of_cri {
                    Route::Ignore
                } else if cri {
                    Route::Cri
                } else {
                    Route::Nri
                };
                self.routes.insert(o.conn, route);
                (Some(o.conn), Some(o.ts.mono_ns))
            }
            CaptureEvent::Chunk(c) => (Some(c.conn), Some(c.ts.mono_ns)),
            CaptureEvent::Close(c) => (Some(c.conn), Some(c.ts.mono_ns)),
            // Never behind a clock already written: a tick says only that
            // nothing older is still to come.
            CaptureEvent::Tick { ts } => (
                None,
                Some(ts.mono_ns.max(self.last_clock.map_or(0, |(n, ..)| n))),
            ),
            CaptureEvent::Process(_)
            | CaptureEvent::Loss(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_) => (None, None),
        };
        match ev {
            CaptureEvent::Loss(l) => out.push(Observation::CaptureLoss(*l)),
            // Kernel events, not connection bytes: nothing to decode.
            CaptureEvent::Sandbox(s) => {
                out.push(Observation::Sandbox(s.clone()));
                return;
            }
            // What the runtime listed when nri-trace asked: for the
            // engine's pod index (capture/cri_state.rs).
            CaptureEvent::CriState(s) => {
                out.push(Observation::CriState(s.clone()));
                return;
            }
            _ => {}
        }
        self.runtime_change(ev, out);
        let route = conn.map_or(Route::Nri, |c| {
            self.routes.get(&c).copied().unwrap_or(Route::Nri)
        });
        match route {
            // The clock is both assemblers'.
            _ if matches!(ev, CaptureEvent::Tick { .. }) => {
                self.cri.on_capture(ev, &mut self.cri_obs);
                self.nri.on_capture(ev, &mut self.nri_obs);
            }
            Route::Cri => self.cri.on_capture(ev, &mut self.cri_obs),
            Route::Nri => self.nri.on_capture(ev, &mut self.nri_obs),
            Route::Ignore => {}
        }
        if let CaptureEvent::Close(c) = ev {
            self.routes.remove(&c.conn);
        }
        let calls = !self.cri_obs.is_empty() || !self.nri_obs.is_empty();
        self.drain(out);
        if let Some(now) = now {
            let oldest = self.cri.oldest_unreported_start();
            let nri_open = self.nri.oldest_open_delivery();
            let due = match self.last_clock {
                None => true,
                Some((last, last_oldest, last_open)) => {
                    calls
                        || oldest != last_oldest
                        || nri_open != last_open
                        || now >= last.saturating_add(CLOCK_STEP_NS)
                }
            };
            if due {
                self.last_clock = Some((now, oldest, nri_open));
                out.push(Observation::Clock {
                    now_ns: now,
                    cri_oldest_ns: oldest,
                    nri_open_ns: nri_open,
                });
            }
        }
    }

    /// The runtime's listener exited, or a new one serves its sockets.
    fn runtime_change(&mut self, ev: &CaptureEvent, out: &mut Vec<Observation>) {
        let CaptureEvent::Process(p) = ev else {
            return;
        };
        let (ts, pid, path, exited) = match p {
            ProcessEvent::ListenerGone { ts, tgid, path } => (*ts, *tgid, path, true),
            ProcessEvent::Listening { ts, tgid, path } => (*ts, *tgid, path, false),
            _ => return,
        };
        if !self.cri_paths.contains(path) && !self.nri_paths.contains(path) {
            return;
        }
        let seen = if exited {
            &mut self.runtime_exits
        } else {
            &mut self.runtime_starts
        };
        // Pids come back only after wrapping: a few are plenty.
        if seen.len() > 64 {
            seen.clear();
        }
        if seen.insert(pid) {
            out.push(if exited {
                Observation::RuntimeExited { ts, pid }
            } else {
                Observation::RuntimeStarted { ts, pid }
            });
        }
    }

    /// What the CRI decoder met that was not a call (undecodable
    /// messages, resyncs...).
    pub fn cri_stats(&self) -> CriStats {
        self.cri.stats()
    }

    /// The capture ended: calls still in decoding come out.
    pub fn finish(&mut self, out: &mut Vec<Observation>) {
        self.cri.finish(&mut self.cri_obs);
        self.nri.finish(&mut self.nri_obs);
        self.drain(out);
    }

    fn drain(&mut self, out: &mut Vec<Observation>) {
        out.extend(self.nri_obs.drain(..).map(Observation::from));
        out.extend(self.cri_obs.drain(..).map(Observation::from));
    }
}
