//! The TUI as a pipeline sink: records go into the shared [`TuiState`]
//! while the UI runs on its own thread.
//!
//! Live, the UI opens at once and `q` stops the trace; when the trace
//! ends otherwise (`--duration`, a signal) the UI closes. On a replay the
//! UI opens at once too and stays open on the whole recording until `q`.

use std::{
    collections::VecDeque,
    io,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Instant,
};

use super::{lock, StatusInfo, TuiOptions, TuiState};
use crate::{
    engine::record::Record,
    pipeline::{Ending, Progress, Sink, Stop, Tables},
};

/// Whether the records come live or from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    Replay,
}

/// Inputs per second over this many of the loop's idle calls (teardowns
/// wait seconds in silence: a short window would swing to 0).
const RATE_WINDOW: usize = 20;

/// Feeds the TUI's state; the UI itself runs on a thread of its own.
pub struct TuiSink {
    shared: Arc<Mutex<TuiState>>,
    ui: Option<JoinHandle<io::Result<()>>>,
    close: Arc<AtomicBool>,
    mode: Mode,
    status: StatusInfo,
    /// (when, inputs so far) at recent idle calls.
    rate: VecDeque<(Instant, u64)>,
}

impl TuiSink {
    /// Open the UI now; `stop` is requested when the user quits it.
    pub fn open(mode: Mode, status: StatusInfo, mut opts: TuiOptions, stop: Stop) -> Self {
        let state = if opts.all_calls {
            TuiState::new().with_all_calls()
        } else {
            TuiState::new()
        };
        let shared = Arc::new(Mutex::new(state));
        lock(&shared).set_status(status.clone());
        let close = Arc::new(AtomicBool::new(false));
        opts.close = Some(Arc::clone(&close));
        let ui = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let r = super::run(shared, opts);
                stop.request();
                r
            })
        };
        TuiSink {
            shared,
            ui: Some(ui),
            close,
            mode,
            status,
            rate: VecDeque::new(),
        }
    }

    /// A sink that only builds the state (no UI): what the UI would show,
    /// for tests and benchmarks.
    pub fn headless(status: StatusInfo) -> (Self, Arc<Mutex<TuiState>>) {
        let shared = Arc::new(Mutex::new(TuiState::new()));
        lock(&shared).set_status(status.clone());
        let sink = TuiSink {
            shared: Arc::clone(&shared),
            ui: None,
            close: Arc::new(AtomicBool::new(false)),
            mode: Mode::Replay,
            status,
            rate: VecDeque::new(),
        };
        (sink, shared)
    }

    fn events_per_s(&mut self, inputs: u64) -> Option<u64> {
        let now = Instant::now();
        self.rate.push_back((now, inputs));
        while self.rate.len() > RATE_WINDOW {
            self.rate.pop_front();
        }
        let (t0, n0) = *self.rate.front()?;
        let secs = now.duration_since(t0).as_secs_f64();
        (secs >= 0.5).then(|| ((inputs - n0) as f64 / secs) as u64)
    }
}

impl Sink for TuiSink {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        lock(&self.shared).on_record(r);
        Ok(())
    }

    fn idle(&mut self, p: &Progress<'_>) -> io::Result<()> {
        let rate = match self.mode {
            Mode::Live => self.events_per_s(p.inputs),
            Mode::Replay => None,
        };
        let mut st = lock(&self.shared);
        if let Some(t) = p.now_ns {
            st.set_now(t);
        }
        let Tables {
            hooks,
            methods,
            conformance,
        } = p.tables();
        st.set_summaries(hooks, methods);
        st.set_conformance(conformance);
        if rate.is_some() {
            st.set_status(StatusInfo {
                events_per_s: rate,
                ..self.status.clone()
            });
        }
        Ok(())
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        {
            let mut st = lock(&self.shared);
            if let Some(t) = end.now_ns {
                st.set_now(t);
            }
            st.set_summaries(end.tables.hooks.clone(), end.tables.methods.clone());
            st.set_conformance(end.tables.conformance.clone());
            st.close_polls();
        }
        if self.mode == Mode::Live {
            self.close.store(true, Ordering::SeqCst);
        }
        match self.ui.take() {
            Some(ui) => ui
                .join()
                .map_err(|_panic| io::Error::other("the TUI thread panicked"))?,
            None => Ok(()),
        }
    }
}
