//! The one live loop: capture events from a session through the pipeline
//! until a signal (SIGINT, SIGTERM), `--duration`, or a sink asks to stop
//! (the TUI's `q`). Then the session is stopped, its last events still go
//! through, and the pipeline finishes: every sink ends the same way.

use std::time::Duration;

use super::{PipelineError, Stop};
use crate::capture::{session::Session, CaptureEvent};

/// What the live loop feeds: the whole [`super::Pipeline`], or one stage
/// alone (`nri-trace debug`).
pub trait Stage {
    /// What the stage says when it is done.
    type Output;
    /// One capture event.
    fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError>;
    /// Nothing more is queued for now, and at least every [`TICK`].
    fn idle(&mut self) -> Result<(), PipelineError>;
    /// The capture ended.
    fn finish(self) -> Result<Self::Output, PipelineError>;
}

/// How often sinks hear from the loop while no event comes (metrics, the
/// TUI's rates).
const TICK: Duration = Duration::from_millis(500);

/// A [`Stop`] requested on SIGINT or SIGTERM, or once `duration` has
/// passed from now: made when the command starts, so `--duration` bounds
/// the whole run, a wait for the runtime included (`wait`).
pub fn stop_on_signal(duration: Option<Duration>) -> Stop {
    let stop = Stop::new();
    let requested = stop.clone();
    tokio::spawn(async move {
        until_signal(duration).await;
        requested.request();
    });
    stop
}

/// Run `p` on `session`'s events until `stop` is requested (a signal,
/// `--duration`: [`stop_on_signal`]; or a sink).
pub async fn run<S: Stage>(
    session: &mut Session,
    mut p: S,
    stop: Stop,
) -> Result<S::Output, PipelineError> {
    let mut stopping = false;
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        let ev = tokio::select! {
            () = stop.wait(), if !stopping => {
                // The session flushes what the kernel holds, then its
                // event stream ends.
                session.stop_signal();
                stopping = true;
                continue;
            }
            _ = ticks.tick() => {
                if let Err(e) = p.idle() {
                    break Err(e);
                }
                continue;
            }
            ev = session.events.recv() => ev,
        };
        let Some(ev) = ev else { break Ok(()) };
        if let Err(e) = p.on_capture(&ev) {
            break Err(e);
        }
        if session.events.is_empty() {
            if let Err(e) = p.idle() {
                break Err(e);
            }
        }
    };
    session.stop().await;
    result?;
    p.finish()
}

/// Resolves on SIGINT, SIGTERM, or after `duration`.
pub async fn until_signal(duration: Option<Duration>) {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    let sleep = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let term = async {
        match term {
            Ok(mut t) => {
                t.recv().await;
            }
            // No handler (should not happen on Linux): Ctrl-C still works.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
        () = sleep => {}
    }
}
