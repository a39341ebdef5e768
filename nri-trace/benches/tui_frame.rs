//! TUI frame time at 1,000 pods, and a second of live load at 100 records/s.
//!
//! Input: `tests/fixtures/trace/happy/recording.ndjson.gz` (a real capture
//! of the lab containerd: 3 pods x 2 containers, 3 NRI plugins) replayed
//! once through the replay pipeline (`pipeline::replay`); its records are then repeated
//! [`REPS`] times, each repetition `r` made distinct at the record level:
//! pod names get `-r`, pod uids, sandbox ids and container ids get `-r`
//! (so the `PodModel` sees new pods, not the same ones again), and every
//! timestamp is shifted by `r` x (the recording's span + 1 s). 334
//! repetitions = 1,002 pods. The repeated records are fed to one
//! `TuiState` (with the recording's latency tables); the capture clock is
//! set to the last record.
//!
//! Benchmarks (criterion group `tui_frame`), each on a ratatui
//! `TestBackend` terminal kept across iterations (so each iteration is one
//! real frame: layout, widgets, diff against the previous frame):
//! - `pods_80x24`, `pods_200x50`: the pods view (1,002 pods filtered,
//!   sorted by attention, the visible rows built);
//! - `timeline_200x50`, `plugins_200x50`, `findings_200x50`,
//!   `calls_200x50`: the other views;
//! - `live_second_200x50`: what one second of live load costs the UI
//!   thread: 100 new records (`on_record`, each a CRI span of a new pod
//!   repetition) and 4 frames of the pods view (the 250 ms redraw). The
//!   state it adds to is a clone of the 1,002-pod state, made outside the
//!   timing (`iter_batched`).
//!
//! Run with `cargo bench -p nri-trace --bench tui_frame` (or through
//! `cargo xtask bench --only tui-frame`, which pins it to one CPU). Prints
//! one `tui_frame input: ...` line first. Nothing here asserts on time.

use std::{hint::black_box, path::Path, time::Duration};

use criterion::{BatchSize, Criterion};
use nri_trace::{
    capture::Timestamp,
    engine::Record,
    pipeline::replay::records_of_events,
    sinks::tui::{draw, App, Theme, TuiState, View},
    store::raw_capture,
};
use ratatui::{backend::TestBackend, Terminal};

const FIXTURE: &str = "../tests/fixtures/trace/happy/recording.ndjson.gz";
/// Repetitions: 334 x 3 pods = 1,002 pods.
const REPS: u64 = 334;
/// Records per simulated second of live load.
const LIVE_RECORDS: usize = 100;
/// Frames per second at the 250 ms redraw.
const LIVE_FRAMES: usize = 4;
const GAP_NS: u64 = 1_000_000_000;

fn shift(t: &mut Option<Timestamp>, by: u64) {
    if let Some(t) = t {
        t.mono_ns += by;
        t.wall_ns += by;
    }
}

/// Repetition `r` of record `rec`: its own pod, ids and times.
fn repeat(rec: &Record, r: u64, span_ns: u64) -> Record {
    let mut rec = rec.clone();
    let by = r * (span_ns + GAP_NS);
    let tag = |s: &mut String| s.push_str(&format!("-{r}"));
    match &mut rec {
        Record::CriSpan(s) => {
            let c = &mut s.call;
            if let Some(p) = c.pod.as_mut() {
                tag(&mut p.name);
                tag(&mut p.uid);
            }
            c.sandbox_id.as_mut().map(tag);
            c.container_id.as_mut().map(tag);
            shift(&mut c.start, by);
            shift(&mut c.end, by);
            for h in &mut s.hooks {
                shift(&mut h.call.start, by);
                shift(&mut h.call.end, by);
            }
        }
        Record::NriUncaused(u) => {
            shift(&mut u.span.call.start, by);
            shift(&mut u.span.call.end, by);
        }
        Record::Violation(v) => {
            v.ts.mono_ns += by;
            v.pod.as_mut().map(tag);
        }
        Record::Observed(_) => {}
    }
    rec
}

fn last_ns(rec: &Record) -> Option<u64> {
    match rec {
        Record::CriSpan(s) => s.call.end.or(s.call.start).map(|t| t.mono_ns),
        Record::NriUncaused(u) => u.span.call.end.map(|t| t.mono_ns),
        Record::Violation(v) => Some(v.ts.mono_ns),
        Record::Observed(_) => None,
    }
}

fn frame(term: &mut Terminal<TestBackend>, app: &App, st: &TuiState, th: Theme) {
    term.draw(|f| draw(f, app, st, &th)).expect("draw");
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let events = raw_capture::read_file(&path).expect("recording fixture");
    let got = records_of_events(&events, Default::default());
    let (records, hooks, methods) = (got.records, got.tables.hooks, got.tables.methods);
    let first = records.iter().filter_map(last_ns).min().unwrap_or(0);
    let last = records.iter().filter_map(last_ns).max().unwrap_or(0);
    let span_ns = last - first;
    let mut st = TuiState::new();
    st.set_summaries(hooks, methods);
    let mut fed = 0u64;
    for r in 0..REPS {
        for rec in &records {
            st.on_record(&repeat(rec, r, span_ns));
            fed += 1;
        }
    }
    st.set_now(last + (REPS - 1) * (span_ns + GAP_NS));
    // The live second: CRI spans of one more repetition set, cycled.
    let spans: Vec<&Record> = records
        .iter()
        .filter(|r| matches!(r, Record::CriSpan(_)))
        .collect();
    let live: Vec<Record> = (0..LIVE_RECORDS)
        .map(|i| {
            repeat(
                spans[i % spans.len()],
                REPS + (i / spans.len()) as u64,
                span_ns,
            )
        })
        .collect();
    // One machine-readable line (`cargo xtask bench` parses it).
    println!(
        "tui_frame input: file={} reps={REPS} records={fed} pods={} calls_kept={} findings={} \
         live_records={LIVE_RECORDS} live_frames={LIVE_FRAMES}",
        path.display(),
        st.pods().len(),
        st.calls().len(),
        st.findings().len(),
    );
    let th = Theme::colored();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut g = c.benchmark_group("tui_frame");
    let views = [
        ("pods_80x24", View::Pods, 80, 24),
        ("pods_200x50", View::Pods, 200, 50),
        ("timeline_200x50", View::Timeline, 200, 50),
        ("plugins_200x50", View::Plugins, 200, 50),
        ("findings_200x50", View::Findings, 200, 50),
        ("calls_200x50", View::Calls, 200, 50),
    ];
    for (name, view, w, h) in views {
        let mut app = App::new();
        app.show(view);
        let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        g.bench_function(name, |b| {
            b.iter(|| frame(&mut term, black_box(&app), &st, th))
        });
    }
    let app = App::new();
    let mut term = Terminal::new(TestBackend::new(200, 50)).expect("terminal");
    // A few ms per run plus a state clone per run (setup): fewer samples.
    g.sample_size(30);
    g.bench_function("live_second_200x50", |b| {
        b.iter_batched(
            || st.clone(),
            |mut s| {
                for (i, rec) in live.iter().enumerate() {
                    s.on_record(rec);
                    if (i + 1) % (LIVE_RECORDS / LIVE_FRAMES) == 0 {
                        frame(&mut term, &app, &s, th);
                    }
                }
                s
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    c.final_summary();
}
