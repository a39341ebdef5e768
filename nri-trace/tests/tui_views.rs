//! Snapshot tests of every TUI view, rendered with ratatui's TestBackend
//! from the committed lab recordings (tests/fixtures/trace/<scenario>)
//! replayed through the engine, at 80x24 and 200x50; a hostile pod name
//! rendered inert; colors off under NO_COLOR. No root needed.
//!
//! Snapshots live in nri-trace/src/sinks/tui/snapshots (accept changes with
//! `INSTA_UPDATE=always` or `cargo insta accept`, after reading them).

use std::path::Path;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use nri_trace::{
    capture::CaptureEvent,
    engine::Record,
    human::is_inert,
    pipeline::{replay::records_of_events, session_of_events},
    sinks::tui::{draw, replay_state, App, Theme, TuiState, View},
    store::raw_capture,
};
use ratatui::{
    backend::{CrosstermBackend, TestBackend},
    buffer::Buffer,
    layout::Rect,
    style::Color,
    Terminal, TerminalOptions, Viewport,
};

const CRI: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
const NRI: &str = "/var/lib/nri-trace-lab/run/nri.sock";
const SCENARIOS: &[&str] = &[
    "happy",
    "happy-concurrent-stops",
    "slow-plugin",
    "teardown-error",
    "late-registration",
    "plugin-timeout",
    "cri-deadline-retry",
];
const SIZES: &[(u16, u16)] = &[(80, 24), (200, 50)];

fn events(name: &str) -> Vec<CaptureEvent> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/trace")
        .join(name)
        .join("recording.ndjson.gz");
    raw_capture::read_file(p).expect("recording fixture")
}

fn state(name: &str) -> TuiState {
    let evs = events(name);
    let session = session_of_events(&evs);
    assert_eq!(session.cri_socket, CRI, "{name}");
    assert_eq!(session.nri_socket, NRI, "{name}");
    replay_state(&evs)
}

fn key(app: &mut App, st: &TuiState, c: KeyCode) {
    app.on_key(KeyEvent::new(c, KeyModifiers::NONE), st);
}

fn buffer(st: &TuiState, app: &App, w: u16, h: u16, th: Theme) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    term.draw(|f| draw(f, app, st, &th)).expect("draw");
    term.backend().buffer().clone()
}

/// The screen as text, one line per row, trailing blanks cut.
fn text(b: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..b.area.height {
        let mut line = String::new();
        for x in 0..b.area.width {
            line.push_str(b[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn screen(st: &TuiState, app: &App, w: u16, h: u16) -> String {
    text(&buffer(st, app, w, h, Theme::colored()))
}

fn snap(name: &str, screen: &str) {
    insta::with_settings!({
        snapshot_path => "../src/sinks/tui/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, screen);
    });
}

fn app_on(view: View) -> App {
    let mut app = App::new();
    app.show(view);
    app
}

#[test]
fn pods_view() {
    let st = state("late-registration");
    // Three pods from the lab, the late one with its finding.
    let pods: Vec<String> = st
        .pods()
        .pods()
        .map(nri_trace::engine::PodView::label)
        .collect();
    assert!(pods.iter().any(|p| p.contains("late-pod")), "{pods:?}");
    for &(w, h) in SIZES {
        let s = screen(&st, &app_on(View::Pods), w, h);
        assert!(s.contains("late-pod"), "{s}");
        assert!(s.contains("NAMESPACE/NAME"), "{s}");
        snap(&format!("pods_late_registration_{w}x{h}"), &s);
    }
    let st = state("cri-deadline-retry");
    let s = screen(&st, &app_on(View::Pods), 80, 24);
    snap("pods_cri_deadline_retry_80x24", &s);
}

#[test]
fn pods_filter_and_sort() {
    let st = state("happy");
    let mut app = App::new();
    key(&mut app, &st, KeyCode::Char('/'));
    let first = st.pods().pods().next().expect("a pod").name.clone();
    for c in first.chars() {
        key(&mut app, &st, KeyCode::Char(c));
    }
    key(&mut app, &st, KeyCode::Enter);
    let s = screen(&st, &app, 80, 24);
    assert!(s.contains(&format!("filter: {first}")), "{s}");
    let shown = st.pods().pods().filter(|p| s.contains(&p.label())).count();
    assert_eq!(shown, 1, "{s}");
    key(&mut app, &st, KeyCode::Esc);
    key(&mut app, &st, KeyCode::Char('s'));
    let s = screen(&st, &app, 80, 24);
    assert!(s.contains("sort: name"), "{s}");
    assert_eq!(
        st.pods().pods().filter(|p| s.contains(&p.label())).count(),
        st.pods().len()
    );
}

#[test]
fn timeline_view() {
    let st = state("slow-plugin");
    let mut app = App::new();
    key(&mut app, &st, KeyCode::Char('s')); // by name: deterministic order
    key(&mut app, &st, KeyCode::Enter);
    assert_eq!(app.view, View::Timeline);
    let pod = app.timeline_pod.clone().expect("a pod chosen");
    for &(w, h) in SIZES {
        let s = screen(&st, &app, w, h);
        assert!(
            s.contains(&format!("Timeline {}/{}", pod.namespace, pod.name)),
            "{s}"
        );
        assert!(s.contains("RunPodSandbox"), "{s}");
        // The 500 ms hook of the slow plugin, with a bar.
        assert!(s.contains("10-slow"), "{s}");
        assert!(s.contains('▓') && s.contains('█'), "{s}");
        snap(&format!("timeline_slow_plugin_{w}x{h}"), &s);
    }
    key(&mut app, &st, KeyCode::Char('+'));
    key(&mut app, &st, KeyCode::Char('+'));
    key(&mut app, &st, KeyCode::Right);
    let s = screen(&st, &app, 80, 24);
    assert!(s.contains("x4"), "{s}");
    snap("timeline_slow_plugin_zoomed_80x24", &s);
}

#[test]
fn plugins_view() {
    let st = state("plugin-timeout");
    let hang = st
        .hook_summaries()
        .iter()
        .find(|h| h.plugin == "10-hang" && h.timeouts > 0)
        .expect("10-hang timed out");
    assert!(hang.calls > 0);
    for &(w, h) in SIZES {
        let s = screen(&st, &app_on(View::Plugins), w, h);
        assert!(s.contains("10-hang"), "{s}");
        assert!(s.contains("CRI METHOD"), "{s}");
        snap(&format!("plugins_plugin_timeout_{w}x{h}"), &s);
    }
}

#[test]
fn findings_view_and_evidence() {
    let st = state("teardown-error");
    assert_eq!(st.findings().len(), 2);
    let mut app = app_on(View::Findings);
    for &(w, h) in SIZES {
        let s = screen(&st, &app, w, h);
        assert!(s.contains("teardown-hook-failed"), "{s}");
        assert!(s.contains("05-failer"), "{s}");
        snap(&format!("findings_teardown_error_{w}x{h}"), &s);
    }
    key(&mut app, &st, KeyCode::Enter);
    assert!(app.finding_open);
    for &(w, h) in SIZES {
        let s = screen(&st, &app, w, h);
        assert!(s.contains("Evidence"), "{s}");
        assert!(s.contains("teardown path"), "{s}");
        snap(&format!("findings_teardown_error_evidence_{w}x{h}"), &s);
    }
    let st = state("happy");
    let s = screen(&st, &app_on(View::Findings), 80, 24);
    assert!(s.contains("no contract rule broken"), "{s}");
}

#[test]
fn calls_view() {
    let st = state("cri-deadline-retry");
    let mut app = app_on(View::Calls);
    for &(w, h) in SIZES {
        let s = screen(&st, &app, w, h);
        assert!(s.contains("CRI") && s.contains("NRI"), "{s}");
        snap(&format!("calls_cri_deadline_retry_{w}x{h}"), &s);
    }
    // Problems only: every row shown is a failure or a finding.
    key(&mut app, &st, KeyCode::Char('c'));
    key(&mut app, &st, KeyCode::Char('c'));
    key(&mut app, &st, KeyCode::Char('c'));
    let s = screen(&st, &app, 200, 50);
    assert!(s.contains("kind: problems"), "{s}");
    assert!(s.contains("DEADLINE") || s.contains("TIMED OUT"), "{s}");
    snap("calls_cri_deadline_retry_problems_200x50", &s);
}

#[test]
fn help_overlay() {
    let st = state("happy");
    let mut app = App::new();
    key(&mut app, &st, KeyCode::Char('?'));
    let s = screen(&st, &app, 80, 24);
    assert!(s.contains("Help") && s.contains("quit"), "{s}");
    snap("help_80x24", &s);
}

/// Every view of every scenario renders at both sizes with its data.
#[test]
fn every_view_of_every_scenario_renders() {
    for name in SCENARIOS {
        let st = state(name);
        assert!(!st.pods().is_empty(), "{name}: no pods");
        assert!(!st.calls().is_empty(), "{name}: no calls");
        for view in View::ALL {
            for &(w, h) in SIZES {
                let s = screen(&st, &app_on(view), w, h);
                assert_eq!(s.lines().count(), h as usize);
                assert!(s.contains("nri-trace"), "{name} {view:?} {w}x{h}\n{s}");
                assert!(s.contains(view.title()), "{name} {view:?} {w}x{h}\n{s}");
            }
        }
    }
}

/// Bytes a terminal backend wrote.
#[derive(Clone, Default)]
struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const HOSTILE: &str = "evil\x1b[2J\x1b]0;PWNED\x07\u{9b}31m\u{202e}gnp.exe";

/// A recording's records with one pod renamed to an escape-laden name and
/// its errors given escape-laden messages.
fn hostile_state() -> TuiState {
    let evs = events("teardown-error");
    let got = records_of_events(&evs, Default::default());
    let (records, hooks, methods) = (got.records, got.tables.hooks, got.tables.methods);
    let mut st = TuiState::new();
    let victim = records
        .iter()
        .find_map(|r| match r {
            Record::CriSpan(s) => s.call.pod.as_ref().map(|p| p.name.clone()),
            _ => None,
        })
        .expect("a pod");
    for mut r in records {
        match &mut r {
            Record::CriSpan(s) => {
                if let Some(p) = s.call.pod.as_mut().filter(|p| p.name == victim) {
                    p.name = HOSTILE.into();
                }
                for h in &mut s.hooks {
                    h.call.plugin.name = h.call.plugin.name.as_ref().map(|n| format!("{n}\x1b[8m"));
                }
            }
            Record::Violation(v) => {
                // The plugin's name is in the finding's sentence too.
                v.plugin = Some(format!(
                    "{}\x1b]52;c;aGk=\x07",
                    v.plugin.as_deref().unwrap_or("p")
                ));
                v.pod = Some(format!("x/{HOSTILE}"));
            }
            _ => {}
        }
        st.on_record(&r);
    }
    st.set_summaries(hooks, methods);
    st
}

#[test]
fn hostile_pod_name_renders_inert() {
    let st = hostile_state();
    assert!(st.pods().pods().any(|p| p.name == HOSTILE));
    let mut pods_app = App::new();
    key(&mut pods_app, &st, KeyCode::Char('s'));
    let mut timeline = pods_app.clone();
    let evil_row = nri_trace::sinks::tui::pod_rows(&timeline, &st)
        .iter()
        .position(|p| p.name == HOSTILE)
        .expect("hostile pod listed");
    for _ in 0..evil_row {
        key(&mut timeline, &st, KeyCode::Down);
    }
    key(&mut timeline, &st, KeyCode::Enter);
    let mut evidence = app_on(View::Findings);
    key(&mut evidence, &st, KeyCode::Enter);
    let apps = [
        pods_app,
        timeline,
        app_on(View::Plugins),
        evidence,
        app_on(View::Calls),
    ];
    let mut seen_visible = false;
    for app in &apps {
        for &(w, h) in SIZES {
            let b = buffer(&st, app, w, h, Theme::colored());
            for cell in b.content() {
                assert!(
                    is_inert(cell.symbol()),
                    "{:?} {w}x{h}: control character {:?} reached the screen",
                    app.view,
                    cell.symbol()
                );
            }
            let s = text(&b);
            seen_visible |= s.contains("evil␛[2J␛]0;PWNED␇");
        }
        // What a real terminal would receive: no sequence of the pod's.
        let out = Sink::default();
        let mut term = Terminal::with_options(
            CrosstermBackend::new(out.clone()),
            TerminalOptions {
                viewport: Viewport::Fixed(Rect::new(0, 0, 200, 50)),
            },
        )
        .expect("terminal over a byte buffer");
        term.draw(|f| draw(f, app, &st, &Theme::colored()))
            .expect("draw");
        drop(term);
        let bytes = String::from_utf8_lossy(&out.0.lock().expect("sink")).into_owned();
        assert!(bytes.len() > 1000, "nothing drawn");
        for bad in [
            "\x1b[2J", "\x1b]0;", "\x07", "\u{9b}", "\u{202e}", "\x1b]52", "\x1b[8m",
        ] {
            assert!(
                !bytes.contains(bad),
                "{:?}: {bad:?} reached the terminal",
                app.view
            );
        }
    }
    assert!(
        seen_visible,
        "the hostile name is not shown as visible text"
    );
}

#[test]
fn no_color_renders_without_colors() {
    let st = state("teardown-error");
    let mut colored_seen = false;
    for view in View::ALL {
        let app = app_on(view);
        let b = buffer(&st, &app, 200, 50, Theme::plain());
        for cell in b.content() {
            assert_eq!(cell.fg, Color::Reset, "{view:?}: a foreground color");
            assert_eq!(cell.bg, Color::Reset, "{view:?}: a background color");
        }
        let b = buffer(&st, &app, 200, 50, Theme::colored());
        colored_seen |= b.content().iter().any(|c| c.fg != Color::Reset);
    }
    assert!(
        colored_seen,
        "the colored theme shows no color: the test proves nothing"
    );
}

#[test]
fn pause_freezes_and_resume_applies() {
    let evs = events("happy");
    let records = records_of_events(&evs, Default::default()).records;
    let (before, after) = records.split_at(records.len() / 2);
    let mut st = TuiState::new();
    for r in before {
        st.on_record(r);
    }
    let app = app_on(View::Calls);
    let frozen = screen(&st, &app, 80, 24);
    let calls = st.calls().len();
    st.set_paused(true);
    for r in after {
        st.on_record(r);
    }
    assert_eq!(st.pending(), after.len());
    assert_eq!(st.calls().len(), calls);
    let now = screen(&st, &app, 80, 24);
    assert!(
        now.lines().next().is_some_and(|l| l.contains("PAUSED")),
        "{now}"
    );
    // Below the status line, nothing moved.
    assert!(
        now.lines().skip(1).eq(frozen.lines().skip(1)),
        "{now}\n{frozen}"
    );
    st.set_paused(false);
    assert_eq!(st.pending(), 0);
    let mut all = TuiState::new();
    for r in &records {
        all.on_record(r);
    }
    assert_eq!(st.calls(), all.calls());
    assert_eq!(st.counts(), all.counts());
}
