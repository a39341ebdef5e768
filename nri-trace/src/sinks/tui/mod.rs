//! The on-node terminal UI: which pods are stuck or slow, in which CRI
//! call, in which plugin's hook, and which contract rule was broken.
//!
//! Built like tokio-console: a model apart from its views.
//!
//! - [`state::TuiState`]: what is shown, fed only with the engine's
//!   records, its latency tables, a status and the capture clock; bounded.
//! - [`app::App`]: UI state (view, selection, sort, filter, zoom, pause,
//!   help); [`keys`]: keys handled by the pure [`app::App::on_key`].
//! - [`views`]: one module per view (pods, timeline, plugins, findings,
//!   calls, status line, help); they render and decide nothing.
//! - untrusted text is made inert before the terminal sees it
//!   ([`crate::human::sanitize`], as in every text sink).
//! - [`export`]: the rows on screen, or the session's records, as NDJSON.
//! - [`terminal`]: raw mode and the alternate screen, restored on `q`, on
//!   panic and on SIGTERM.
//!
//! [`run`] is the blocking loop; the caller feeds the shared state from
//! another thread. [`replay_state`] builds a state from a recording (tests,
//! `nri-trace replay`). docs/tui.md describes the screens and keys.

pub(crate) mod app;
pub(crate) mod export;
pub(crate) mod keys;
pub(crate) mod sink;
pub(crate) mod state;
pub(crate) mod terminal;
pub(crate) mod views;

use std::{
    io::{self, IsTerminal},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use crossterm::event::{self, Event, KeyEventKind};
use ratatui::{
    layout::{Constraint, Layout},
    Frame,
};

use crate::capture::CaptureEvent;
// What the commands, the benches and the TUI tests drive: the sink, its
// state and the app over it, drawing and exporting (issue 35).
pub use app::{Action, App, CallFilter, ExportScope, PodKey, PodSort, View};
pub use export::{export, ExportError};
pub use sink::{Mode, TuiSink};
pub use state::{
    CallKind, CallRow, Counts, Dropped, Finding, HookBar, PluginConn, SpanDetail, StatusInfo,
    TuiState,
};
pub use views::{pods::rows as pod_rows, Theme};

/// How long a poll for a key waits.
pub const POLL: Duration = Duration::from_millis(200);
/// Redraw at least this often (live data, ages).
pub const REDRAW: Duration = Duration::from_millis(250);

/// How the TUI runs.
#[derive(Debug, Clone)]
pub struct TuiOptions {
    /// Where exports are written.
    pub export_dir: PathBuf,
    /// Colors on or off; `None`: on unless `NO_COLOR` is set.
    pub color: Option<bool>,
    /// Set by the feeder to close the TUI (a live trace that ended on
    /// `--duration`): checked at every poll.
    pub close: Option<Arc<AtomicBool>>,
    /// Every CRI call a row of its own (`--calls all`), not the
    /// steady-state polls counted per window (sinks/polls.rs).
    pub all_calls: bool,
}

impl Default for TuiOptions {
    fn default() -> Self {
        TuiOptions {
            export_dir: PathBuf::from("."),
            color: None,
            close: None,
            all_calls: false,
        }
    }
}

/// The state, even if a feeder panicked while holding it (the model stays
/// readable; what it shows is at worst one record short).
pub fn lock(shared: &Mutex<TuiState>) -> MutexGuard<'_, TuiState> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Draw the whole screen: status line, tabs, the current view, footer,
/// and the help on top when open.
pub fn draw(f: &mut Frame<'_>, app: &App, st: &TuiState, th: &Theme) {
    let th = *th;
    let [status, tabs, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    views::status::render_status(f, status, st, th);
    views::status::render_tabs(f, tabs, app, st, th);
    match app.view {
        View::Pods => views::pods::render(f, body, app, st, th),
        View::Timeline => views::timeline::render(f, body, app, st, th),
        View::Plugins => views::plugins::render(f, body, app, st, th),
        View::Findings => views::findings::render(f, body, app, st, th),
        View::Calls => views::calls::render(f, body, app, st, th),
    }
    views::status::render_footer(f, footer, app, th);
    if app.help {
        views::help::render(f, f.area(), th);
    }
}

/// Run the TUI on this terminal until `q` (or SIGTERM, SIGHUP, SIGINT);
/// `shared` is fed by the caller meanwhile. The terminal is restored on
/// every way out, panics included.
pub fn run(shared: Arc<Mutex<TuiState>>, opts: TuiOptions) -> io::Result<()> {
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err(io::Error::other(
            "the TUI needs a terminal; use `-o text` or `-o json` for line output",
        ));
    }
    let signals = terminal::Signals::register()?;
    let theme = opts
        .color
        .map_or_else(Theme::from_env, |color| Theme { color });
    let mut app = App::new();
    app.paused = lock(&shared).paused();
    let (guard, mut term) = terminal::TerminalGuard::enter()?;
    let mut last_draw: Option<Instant> = None;
    let mut dirty = true;
    let result = loop {
        if signals.raised()
            || opts
                .close
                .as_ref()
                .is_some_and(|c| c.load(Ordering::SeqCst))
        {
            break Ok(());
        }
        if terminal::panicked() {
            break Err(io::Error::other("a panic stopped the TUI"));
        }
        if dirty || last_draw.is_none_or(|t| t.elapsed() >= REDRAW) {
            // Page keys move by the body's height.
            app.page = term.size()?.height.saturating_sub(6).max(1) as usize;
            let st = lock(&shared);
            term.draw(|f| draw(f, &app, &st, &theme))?;
            drop(st);
            last_draw = Some(Instant::now());
            dirty = false;
        }
        if !event::poll(POLL)? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                dirty = true;
                let action = app.on_key(k, &lock(&shared));
                match action {
                    Action::None => {}
                    Action::Quit => break Ok(()),
                    Action::Pause(p) => lock(&shared).set_paused(p),
                    Action::Export(scope) => {
                        let st = lock(&shared);
                        app.message = Some(match export(&app, &st, scope, &opts.export_dir) {
                            Ok((path, n)) => {
                                format!("exported {n} rows to {}", path.display())
                            }
                            Err(e) => format!("export failed: {e}"),
                        });
                    }
                }
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    };
    drop(term);
    let restored = guard.restore();
    result.and(restored)
}

/// A state built from recorded capture events, as the live TUI would have
/// it at the recording's end: every record, the latency tables, the
/// capture clock at the end, and a status naming the sockets (through the
/// pipeline `replay` runs, with the TUI's sink).
pub fn replay_state(events: &[CaptureEvent]) -> TuiState {
    let session = crate::pipeline::session_of_events(events);
    let (sink, shared) = TuiSink::headless(status_of(&session, "replay".into()));
    let mut p = crate::pipeline::Pipeline::new(&session, Default::default());
    p.add_sink(Box::new(sink));
    // The headless sink writes nowhere: it cannot fail.
    let _ = crate::pipeline::replay::events(events, p);
    let st = std::mem::take(&mut *lock(&shared));
    st
}

/// The status line of a run on the runtime `session` describes.
pub fn status_of(session: &crate::store::record_file::SessionInfo, source: String) -> StatusInfo {
    StatusInfo {
        runtime: session.runtime.as_ref().map(|r| match session.runtime_pid {
            Some(pid) if source == "live" => format!("{r} pid {pid}"),
            _ => format!("{r} (recorded)"),
        }),
        cri_sockets: vec![session.cri_socket.clone()],
        nri_sockets: vec![session.nri_socket.clone()],
        source,
        recording: None,
        events_per_s: None,
    }
}
