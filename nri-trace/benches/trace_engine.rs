//! Engine throughput on a long recording, and memory after 10,000 pod
//! lifecycles (bounded retention).
//!
//! Input: `tests/fixtures/trace/happy/recording.ndjson.gz`, a real capture
//! of the lab containerd's CRI socket and NRI socket (3 pods x 2
//! containers, 3 NRI plugins, the plugins' ends included), loaded once.
//! A *long recording* is that recording repeated, each repetition `r` made
//! distinct so that the engine sees new pods, not replays of the same ones:
//!
//! - every timestamp (`mono_ns`, `wall_ns`) is shifted by `r` x (the
//!   recording's span + 1 s);
//! - every `ConnId` (`ConnOpen::other_end` included) is shifted by
//!   `r` x 1,000,000;
//! - every sandbox / container id (a run of exactly 64 lowercase hex
//!   digits) and every pod uid (a lowercase 8-4-4-4-12 UUID) found in the
//!   captured bytes gets its last 8 hex digits overwritten with `r` in hex,
//!   wherever it occurs. Lengths do not change, so HTTP/2, gRPC, ttrpc and
//!   protobuf framing stay valid. Ids are found once, per chunk; an id
//!   split across two chunks would be missed, so the bench also counts the
//!   ids in each (connection, direction) stream concatenated and prints how
//!   many occurrences only the concatenation shows (`split=`).
//!
//! Before any timing the bench checks that the long input is sound:
//! the replay pipeline (`pipeline::replay::records_of_events`) over 3
//! repetitions gives 3 x the records of
//! the original recording, kind by kind (cri_span, nri_uncaused, ...), 3 x
//! the NRI deliveries attached to CRI calls, 3 x the pods in the
//! `PodModel`, and no contract finding (the happy path has none).
//!
//! Throughput (criterion group `trace_engine`, benchmark `full`): a fresh
//! `Pipeline` (decoders and engine, the lab's CRI and NRI socket paths;
//! the one `watch` and `replay` run) with a sink folding into a
//! `PodModel`, fed every event of a 100-repetition input (300 pod
//! lifecycles), events borrowed, every record folded into the model as it
//! comes out (and not copied: a sink borrows it), then the end of the
//! capture. What a run built is dropped after it, outside the timing
//! (criterion `PerIteration`), as in the decode benches.
//!
//! Engine alone (benchmark `engine`): the same input decoded once
//! beforehand into its observations (`TraceDecoder`, as the pipeline
//! decodes), then every observation moved into a fresh `TraceEngine`
//! (correlation, hook latency, contract rules, teardown bookkeeping), its
//! records dropped as they come out (no sink); the observations are cloned
//! for each run outside the timing. Issue 23's target: 1,000,000
//! observations/s on one core.
//!
//! Memory (not criterion, after it): a child process of this same
//! executable (so that nothing the criterion part allocated is counted)
//! loads the one recording, reads its VmRSS, then streams 3,334
//! repetitions (10,002 pod lifecycles) through one `Pipeline` and one
//! `PodModel`, generating each repetition on the fly and dropping its
//! events and records once folded, and reads VmRSS and VmHWM from
//! /proc/self/status at the end (VmRSS and the time taken so far also at
//! every tenth of the run: `trace_engine memory progress:`
//! `lifecycles:VmRSS KiB:seconds ...`).
//!
//! The DaemonSet's memory (issue 22; after the memory run, in a child of
//! its own): what deploy/daemonset.yaml runs, `record --max-size 256MiB
//! --metrics-addr`, through its live path: one `Pipeline` with the flight
//! recorder (`FlightRecorder`, segments in a temporary directory, 256 MiB
//! bound) and the metrics sink (re-rendered at every idle, here after
//! every repetition), fed 33,334 repetitions (100,002 pod lifecycles)
//! generated on the fly; no pod model (the DaemonSet keeps none). Prints
//! `trace_engine daemonset: ...` with VmHWM, VmRSS, the recorder's bytes
//! on disk and the time, and `trace_engine daemonset progress: ...`.
//!
//! Run with `cargo bench -p nri-trace --bench trace_engine` (or through
//! `cargo xtask bench --only trace-engine`, which pins it to one CPU).
//! Prints one `trace_engine input: ...` line before the benchmarks, a
//! summary (events/s, pod lifecycles/s) after them, read back from
//! criterion's estimates, then the `trace_engine memory: ...` and
//! `trace_engine memory progress: ...` lines of the memory run. Nothing here
//! asserts on time.

mod common;

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap, HashSet},
    env, fs,
    hint::black_box,
    path::{Path, PathBuf},
    process::Command,
    rc::Rc,
    time::{Duration, Instant, SystemTime},
};

use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use nri_trace::{
    assemble::TraceDecoder,
    capture::{CaptureEvent, ConnId, Direction, ProcessEvent, Timestamp},
    engine::{PodModel, Record, TraceEngine},
    model::{CriOutcome, Observation},
    pipeline::{replay::records_of_events_in, Ending, Pipeline, Sink},
    store::raw_capture,
    store::record_file::SessionInfo,
};

/// The recording, relative to this crate.
const FIXTURE: &str = "../tests/fixtures/trace/happy/recording.ndjson.gz";
/// The lab's sockets, as recorded.
const CRI_SOCKET: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
const NRI_SOCKET: &str = "/var/lib/nri-trace-lab/run/nri.sock";
/// The criterion group; the benchmark id is `trace_engine/full`.
const GROUP: &str = "trace_engine";
const BENCH: &str = "full";
/// The engine alone, on pre-decoded observations.
const ENGINE: &str = "engine";
/// Repetitions of the throughput input.
const THROUGHPUT_REPS: u32 = 100;
/// Repetitions of the soundness check.
const CHECK_REPS: u32 = 3;
/// Repetitions of the memory run: 3,334 x 3 pods >= 10,000 lifecycles.
const MEMORY_REPS: u32 = 3334;
/// The same when criterion runs as a test (no `--bench`): the code path
/// only.
const MEMORY_REPS_TEST: u32 = 4;
/// Gap between two repetitions, past the recording's span.
const GAP_NS: u64 = 1_000_000_000;
/// ConnId shift per repetition.
const CONN_STRIDE: u64 = 1_000_000;
/// Set in the memory child: its repetition count.
const MEMORY_ENV: &str = "NRI_TRACE_BENCH_TRACE_ENGINE_MEMORY";
/// Set in the DaemonSet child: its repetition count.
const DAEMONSET_ENV: &str = "NRI_TRACE_BENCH_TRACE_ENGINE_DAEMONSET";
/// Repetitions of the DaemonSet run: 33,334 x 3 pods >= 100,000
/// lifecycles (issue 22).
const DAEMONSET_REPS: u32 = 33_334;
/// The recorder's bound in deploy/daemonset.yaml (`--max-size 256MiB`).
const DAEMONSET_MAX_BYTES: u64 = 256 << 20;
/// Memory checkpoints (VmRSS) over the memory run.
const CHECKPOINTS: u32 = 10;

fn main() {
    if let Ok(reps) = env::var(MEMORY_ENV) {
        memory(reps.parse().expect("repetition count"));
        return;
    }
    if let Ok(reps) = env::var(DAEMONSET_ENV) {
        daemonset(reps.parse().expect("repetition count"));
        return;
    }
    let started = SystemTime::now();
    let base = Base::load();
    let check = base.check();
    let events = base.long(THROUGHPUT_REPS);
    let input = Input::measure(&events);
    // One machine-readable line (`cargo xtask bench` parses it).
    println!(
        "trace_engine input: file={} reps={} events={} observations={} chunks={} bytes={} records={} \
         cri_spans={} hooks_in_spans={} lifecycles={} base_events={} base_span_ns={} ids={} \
         uids={} id_occurrences={} split={} check_reps={} check_spans={} check_base_spans={} \
         check_hooks={} check_base_hooks={} check_pods={} check_base_pods={} \
         check_violations={} check_base_kinds={}",
        base.path.display(),
        THROUGHPUT_REPS,
        events.len(),
        input.observations.len(),
        input.chunks,
        input.bytes,
        input.records,
        input.spans,
        input.hooks,
        input.lifecycles,
        base.events.len(),
        base.span_ns,
        base.ids.iter().filter(|i| i.len() == 64).count(),
        base.ids.iter().filter(|i| i.len() == 36).count(),
        base.occurrences,
        base.split,
        CHECK_REPS,
        check.spans,
        check.base_spans,
        check.hooks,
        check.base_hooks,
        check.pods,
        check.base_pods,
        check.violations,
        check.base_kinds,
    );
    // One run takes a few hundred ms: flat sampling (the same number of
    // runs per sample), 20 samples.
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(20))
        .sample_size(20)
        .configure_from_args();
    benches(&mut c, &events, &input);
    c.final_summary();
    // Without --bench (cargo test --benches), criterion runs each benchmark
    // once as a test and writes no estimates.
    let bench = env::args().any(|a| a == "--bench");
    if bench {
        print_summary(&input, started);
    }
    drop(events);
    drop(base);
    memory_child(
        MEMORY_ENV,
        if bench { MEMORY_REPS } else { MEMORY_REPS_TEST },
    );
    memory_child(
        DAEMONSET_ENV,
        if bench {
            DAEMONSET_REPS
        } else {
            MEMORY_REPS_TEST
        },
    );
}

// ---------------------------------------------------------------- input

/// The one recording, and where its ids are.
struct Base {
    path: PathBuf,
    events: Vec<CaptureEvent>,
    /// Last timestamp - first (mono_ns).
    span_ns: u64,
    /// The ids found (64 hex: sandbox, container, image...; 36: pod uids).
    ids: Vec<Vec<u8>>,
    /// Per event: where ids are in its chunk bytes, (offset, id index).
    at: Vec<Vec<(usize, usize)>>,
    /// Occurrences of the ids in the chunks.
    occurrences: usize,
    /// Occurrences seen only in the streams concatenated (split between
    /// two chunks, so not rewritten).
    split: usize,
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Runs of exactly 64 lowercase hex digits and lowercase 8-4-4-4-12 UUIDs
/// in `b`.
fn scan_ids(b: &[u8], ids: &mut HashSet<Vec<u8>>) {
    let mut i = 0;
    while i < b.len() {
        if !is_hex(b[i]) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && is_hex(b[j]) {
            j += 1;
        }
        if j - i == 64 {
            ids.insert(b[i..j].to_vec());
        }
        // A UUID starting here: 8 hex (the whole run), then -4-4-4-12.
        if j - i == 8 && is_uuid(&b[i..]) && b.get(i + 36).is_none_or(|&c| !is_hex(c)) {
            ids.insert(b[i..i + 36].to_vec());
            j = i + 36;
        }
        i = j;
    }
}

fn is_uuid(b: &[u8]) -> bool {
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(k, &c)| match k {
            8 | 13 | 18 | 23 => c == b'-',
            _ => is_hex(c),
        })
}

/// Every occurrence of an id of `by_len` (lengths 64 and 36) in `b`.
fn find_ids(b: &[u8], by_len: &HashMap<&[u8], usize>) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hit = [64, 36]
            .into_iter()
            .filter(|&n| i + n <= b.len())
            .find_map(|n| by_len.get(&b[i..i + n]).map(|&k| (k, n)));
        match hit {
            Some((k, n)) => {
                found.push((i, k));
                i += n;
            }
            None => i += 1,
        }
    }
    found
}

fn chunk_bytes(ev: &CaptureEvent) -> Option<&[u8]> {
    match ev {
        CaptureEvent::Chunk(c) => Some(&c.bytes),
        _ => None,
    }
}

fn ts_of(ev: &CaptureEvent) -> Option<Timestamp> {
    match ev {
        CaptureEvent::Open(o) => Some(o.ts),
        CaptureEvent::Chunk(c) => Some(c.ts),
        CaptureEvent::Close(c) => Some(c.ts),
        CaptureEvent::Process(p) => Some(p.ts()),
        CaptureEvent::Sandbox(s) => Some(s.ts),
        CaptureEvent::CriState(s) => Some(s.ts),
        CaptureEvent::Tick { ts } => Some(*ts),
        CaptureEvent::Loss(_) => None,
    }
}

impl Base {
    fn load() -> Base {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
        let events = raw_capture::read_file(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let monos: Vec<u64> = events.iter().filter_map(ts_of).map(|t| t.mono_ns).collect();
        let span_ns = monos.iter().max().unwrap() - monos.iter().min().unwrap();

        let mut set = HashSet::new();
        for b in events.iter().filter_map(chunk_bytes) {
            scan_ids(b, &mut set);
        }
        let mut ids: Vec<Vec<u8>> = set.into_iter().collect();
        ids.sort();
        assert!(!ids.is_empty(), "no id in {}", path.display());
        let by_len: HashMap<&[u8], usize> =
            ids.iter().enumerate().map(|(k, id)| (&id[..], k)).collect();
        let at: Vec<Vec<(usize, usize)>> = events
            .iter()
            .map(|e| chunk_bytes(e).map_or_else(Vec::new, |b| find_ids(b, &by_len)))
            .collect();
        let occurrences = at.iter().map(Vec::len).sum();

        // The same over each (connection, direction) stream concatenated:
        // an id split between two chunks shows only there.
        let streams = streams(&events);
        let mut whole = HashSet::new();
        for s in streams.values() {
            scan_ids(s, &mut whole);
        }
        let missed: Vec<String> = whole
            .iter()
            .filter(|id| !by_len.contains_key(&id[..]))
            .map(|id| String::from_utf8_lossy(id).into_owned())
            .collect();
        let in_streams: usize = streams.values().map(|s| find_ids(s, &by_len).len()).sum();
        let split = in_streams - occurrences + missed.len();
        if split > 0 {
            eprintln!(
                "trace_engine: {split} id occurrences split between chunks (not rewritten); \
                 ids seen only across chunks: {missed:?}"
            );
        }
        Base {
            path,
            events,
            span_ns,
            ids,
            at,
            occurrences,
            split,
        }
    }

    /// Repetition `r` of the recording, made distinct.
    fn repetition(&self, r: u32) -> Vec<CaptureEvent> {
        let shift = u64::from(r) * (self.span_ns + GAP_NS);
        let conn = |c: ConnId| ConnId(c.0 + u64::from(r) * CONN_STRIDE);
        let ts = |t: Timestamp| Timestamp {
            mono_ns: t.mono_ns + shift,
            wall_ns: t.wall_ns + shift,
        };
        let tag = format!("{r:08x}");
        let variants: Vec<Vec<u8>> = self
            .ids
            .iter()
            .map(|id| {
                let mut v = id.clone();
                let n = v.len();
                v[n - 8..].copy_from_slice(tag.as_bytes());
                v
            })
            .collect();
        self.events
            .iter()
            .zip(&self.at)
            .map(|(ev, at)| {
                let mut ev = ev.clone();
                match &mut ev {
                    CaptureEvent::Open(o) => {
                        o.conn = conn(o.conn);
                        o.ts = ts(o.ts);
                        o.other_end = o.other_end.map(conn);
                    }
                    CaptureEvent::Chunk(c) => {
                        c.conn = conn(c.conn);
                        c.ts = ts(c.ts);
                        for &(off, k) in at {
                            let v = &variants[k];
                            c.bytes[off..off + v.len()].copy_from_slice(v);
                        }
                    }
                    CaptureEvent::Close(c) => {
                        c.conn = conn(c.conn);
                        c.ts = ts(c.ts);
                    }
                    CaptureEvent::Process(
                        ProcessEvent::Fork { ts: t, .. }
                        | ProcessEvent::Exit { ts: t, .. }
                        | ProcessEvent::ListenerGone { ts: t, .. }
                        | ProcessEvent::Listening { ts: t, .. },
                    ) => *t = ts(*t),
                    CaptureEvent::Sandbox(s) => s.ts = ts(s.ts),
                    CaptureEvent::CriState(s) => s.ts = ts(s.ts),
                    CaptureEvent::Tick { ts: t } => *t = ts(*t),
                    CaptureEvent::Loss(_) => {}
                }
                ev
            })
            .collect()
    }

    /// Repetitions 0..reps, one after another.
    fn long(&self, reps: u32) -> Vec<CaptureEvent> {
        (0..reps).flat_map(|r| self.repetition(r)).collect()
    }

    /// The long input is sound: 3 repetitions give 3 x what the recording
    /// gives, and nothing the recording does not.
    fn check(&self) -> Check {
        let n = CHECK_REPS as usize;
        let long = self.long(CHECK_REPS);
        let base_records = analyze(&self.events);
        let records = analyze(&long);
        // The `full` loop gives what the replay pipeline gives.
        let (got, model) = run_full(&long, new_pipeline(true));
        assert!(got == records, "the `full` loop differs from the replay");

        // Every id was rewritten, and each repetition's occur as often as
        // the recording's ids: per stream, concatenated.
        let before = streams(&self.events);
        let after = streams(&long);
        let by_len: HashMap<&[u8], usize> = self
            .ids
            .iter()
            .enumerate()
            .map(|(k, id)| (&id[..], k))
            .collect();
        let left: usize = after.values().map(|s| find_ids(s, &by_len).len()).sum();
        assert_eq!(
            left, self.split,
            "ids of the recording left in the rewritten streams"
        );
        let in_before: usize = before.values().map(|s| find_ids(s, &by_len).len()).sum();
        for r in 0..CHECK_REPS {
            let rep = self.repetition(r);
            let rep_ids = {
                let mut set = HashSet::new();
                for b in rep.iter().filter_map(chunk_bytes) {
                    scan_ids(b, &mut set);
                }
                set
            };
            assert_eq!(
                rep_ids.len(),
                self.ids.len(),
                "repetition {r}: another number of distinct ids than the recording"
            );
            assert!(
                rep_ids.iter().all(|id| !by_len.contains_key(&id[..])),
                "repetition {r}: an original id left"
            );
            let rep_by: HashMap<&[u8], usize> = rep_ids
                .iter()
                .enumerate()
                .map(|(k, id)| (&id[..], k))
                .collect();
            let count: usize = streams(&rep)
                .values()
                .map(|s| find_ids(s, &rep_by).len())
                .sum();
            assert_eq!(
                count, in_before,
                "repetition {r}: ids occur another number of times"
            );
        }

        let kinds = |rs: &[Record]| {
            let mut k: BTreeMap<&'static str, usize> = BTreeMap::new();
            for r in rs {
                *k.entry(kind(r)).or_default() += 1;
            }
            k
        };
        let want: BTreeMap<&str, usize> = kinds(&base_records)
            .into_iter()
            .map(|(k, v)| (k, v * n))
            .collect();
        assert_eq!(
            kinds(&records),
            want,
            "{CHECK_REPS} repetitions: records by kind"
        );
        assert_eq!(
            hooks_in_spans(&records),
            n * hooks_in_spans(&base_records),
            "{CHECK_REPS} repetitions: NRI deliveries attached to CRI calls"
        );
        let mut base_model = PodModel::new();
        for r in &base_records {
            base_model.on_record(r);
        }
        assert!(!base_model.is_empty(), "no pod in the recording");
        assert_eq!(
            model.len(),
            n * base_model.len(),
            "{CHECK_REPS} repetitions: pods"
        );
        let violations = count(&records, "violation");
        assert_eq!(
            violations, 0,
            "contract findings on the repeated happy path: the rewrite broke something"
        );
        assert_eq!(count(&base_records, "violation"), 0);
        Check {
            spans: count(&records, "cri_span"),
            base_spans: count(&base_records, "cri_span"),
            hooks: hooks_in_spans(&records),
            base_hooks: hooks_in_spans(&base_records),
            base_kinds: kinds(&base_records)
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(","),
            pods: model.len(),
            base_pods: base_model.len(),
            violations,
        }
    }
}

/// Chunk bytes per (connection, direction), in capture order.
fn streams(events: &[CaptureEvent]) -> BTreeMap<(ConnId, bool), Vec<u8>> {
    let mut s: BTreeMap<(ConnId, bool), Vec<u8>> = BTreeMap::new();
    for e in events {
        if let CaptureEvent::Chunk(c) = e {
            s.entry((c.conn, c.direction == Direction::In))
                .or_default()
                .extend_from_slice(&c.bytes);
        }
    }
    s
}

fn kind(r: &Record) -> &'static str {
    match r {
        Record::CriSpan(_) => "cri_span",
        Record::NriUncaused(_) => "nri_uncaused",
        Record::Violation(_) => "violation",
        Record::Observed(_) => "observed",
    }
}

fn count(rs: &[Record], k: &str) -> usize {
    rs.iter().filter(|r| kind(r) == k).count()
}

fn hooks_in_spans(rs: &[Record]) -> usize {
    rs.iter()
        .map(|r| match r {
            Record::CriSpan(s) => s.hooks.len(),
            _ => 0,
        })
        .sum()
}

/// A successful RunPodSandbox: one pod lifecycle begins.
fn is_pod_start(r: &Record) -> bool {
    matches!(r, Record::CriSpan(s)
        if s.call.method_name() == Some("RunPodSandbox")
            && s.call.outcome == CriOutcome::Ok)
}

/// What the soundness check found.
struct Check {
    spans: usize,
    base_spans: usize,
    /// NRI deliveries attached to CRI calls.
    hooks: usize,
    base_hooks: usize,
    /// Records of the recording by kind, "kind:count,...".
    base_kinds: String,
    pods: usize,
    base_pods: usize,
    violations: usize,
}

/// The throughput input's figures.
struct Input {
    /// The input decoded, for the engine-alone benchmark.
    observations: Vec<Observation>,
    events: usize,
    chunks: usize,
    bytes: u64,
    records: usize,
    spans: usize,
    hooks: usize,
    /// Pods started (RunPodSandbox ok).
    lifecycles: usize,
}

impl Input {
    fn measure(events: &[CaptureEvent]) -> Input {
        let (records, model) = run_full(events, new_pipeline(true));
        let lifecycles = records.iter().filter(|r| is_pod_start(r)).count();
        assert_eq!(
            lifecycles,
            model.len(),
            "pods in the model differ from the pods started"
        );
        assert_eq!(count(&records, "violation"), 0);
        let (chunks, bytes) = events
            .iter()
            .filter_map(chunk_bytes)
            .fold((0, 0), |(n, b), c| (n + 1, b + c.len() as u64));
        Input {
            observations: decoded(events),
            events: events.len(),
            chunks,
            bytes,
            records: records.len(),
            spans: count(&records, "cri_span"),
            hooks: hooks_in_spans(&records),
            lifecycles,
        }
    }
}

/// What the pipeline is told of the recording.
fn session() -> SessionInfo {
    SessionInfo {
        tool: nri_trace::TOOL.into(),
        runtime: Some("containerd".into()),
        runtime_pid: None,
        cri_socket: CRI_SOCKET.into(),
        nri_socket: NRI_SOCKET.into(),
        started_unix_ns: 0,
        redacted: false,
    }
}

/// The records and the pod model of the bench's runs, shared with the
/// sink that builds them.
#[derive(Default)]
struct Folded {
    records: Vec<Record>,
    /// Keep the records (the `full` loop); the memory run only counts.
    keep: bool,
    model: PodModel,
    count: usize,
    lifecycles: usize,
    violations: usize,
}

/// Folds every record into the pod model as it comes out.
struct ModelSink(Rc<RefCell<Folded>>);

impl Sink for ModelSink {
    fn record(&mut self, r: &Record) -> std::io::Result<()> {
        let mut f = self.0.borrow_mut();
        f.model.on_record(r);
        f.count += 1;
        f.lifecycles += usize::from(is_pod_start(r));
        f.violations += usize::from(matches!(r, Record::Violation(_)));
        if f.keep {
            f.records.push(r.clone());
        }
        Ok(())
    }

    fn finish(&mut self, _: &Ending<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A fresh pipeline feeding a fresh pod model; `keep`: a copy of every
/// record too (for the soundness check; the timed runs fold only, as a
/// sink does).
fn new_pipeline(keep: bool) -> (Pipeline, Rc<RefCell<Folded>>) {
    let folded = Rc::new(RefCell::new(Folded {
        keep,
        ..Default::default()
    }));
    let mut p = Pipeline::new(&session(), Default::default());
    p.add_sink(Box::new(ModelSink(Rc::clone(&folded))));
    (p, folded)
}

/// What the pipeline's decoder makes of `events`: the engine's input.
fn decoded(events: &[CaptureEvent]) -> Vec<Observation> {
    let s = session();
    let mut d = TraceDecoder::new(vec![s.cri_socket.into()], vec![s.nri_socket.into()]);
    let mut out = Vec::new();
    for ev in events {
        d.on_capture(ev, &mut out);
    }
    d.finish(&mut out);
    out
}

/// Every observation into a fresh engine, records dropped as they come;
/// then its end. Returns the engine (dropped outside the timing).
fn run_engine(observations: Vec<Observation>) -> TraceEngine {
    let mut engine = TraceEngine::new(Default::default());
    let mut records = Vec::new();
    for o in observations {
        engine.on_observation(o, &mut records);
        records.clear();
    }
    engine.finish(&mut records);
    engine
}

fn analyze(events: &[CaptureEvent]) -> Vec<Record> {
    records_of_events_in(events, &session(), Default::default()).records
}

// ------------------------------------------------------ measured code

/// Every event borrowed, each record folded into the model as it comes
/// out, then the end of the capture. Returns everything it built, so that
/// dropping it is not measured.
fn run_full(
    events: &[CaptureEvent],
    (mut p, folded): (Pipeline, Rc<RefCell<Folded>>),
) -> (Vec<Record>, PodModel) {
    for ev in events {
        p.on_capture(ev).expect("the model sink does not fail");
    }
    p.finish().expect("the model sink does not fail");
    let f = Rc::try_unwrap(folded)
        .unwrap_or_else(|_| panic!("the pipeline is gone: the model is ours"))
        .into_inner();
    (f.records, f.model)
}

fn benches(c: &mut Criterion, events: &[CaptureEvent], input: &Input) {
    let mut g = c.benchmark_group(GROUP);
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(input.events as u64));
    g.bench_function(BENCH, |b| {
        b.iter_batched(
            || new_pipeline(false),
            |p| run_full(black_box(events), p),
            BatchSize::PerIteration,
        )
    });
    g.throughput(Throughput::Elements(input.observations.len() as u64));
    g.bench_function(ENGINE, |b| {
        b.iter_batched(
            || input.observations.clone(),
            |obs| run_engine(black_box(obs)),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

// ------------------------------------------------------------- summary

fn print_summary(input: &Input, since: SystemTime) {
    println!(
        "\ntrace_engine summary: criterion median; one run = {} repetitions of the recording, \
         {} events ({} chunks, {} B), {} records ({} cri_span), {} pod lifecycles",
        THROUGHPUT_REPS,
        input.events,
        input.chunks,
        input.bytes,
        input.records,
        input.spans,
        input.lifecycles
    );
    let Some(t) = common::median_ns(&[GROUP, BENCH], since) else {
        println!("{BENCH}: not run");
        return;
    };
    println!(
        "{:<8} {:>12} {:>12} {:>10} {:>14}",
        "bench", "ms per run", "events/s", "MB/s", "lifecycles/s"
    );
    println!(
        "{BENCH:<8} {:>12.1} {:>12.0} {:>10.1} {:>14.0}",
        t / 1e6,
        input.events as f64 * 1e9 / t,
        input.bytes as f64 * 1e3 / t,
        input.lifecycles as f64 * 1e9 / t
    );
    if let Some(t) = common::median_ns(&[GROUP, ENGINE], since) {
        println!(
            "{ENGINE:<8} {:>12.1} {:>12.0} observations/s ({} observations)",
            t / 1e6,
            input.observations.len() as f64 * 1e9 / t,
            input.observations.len()
        );
    }
}

// -------------------------------------------------------------- memory

/// Run the memory measurement in a fresh process of this executable (it
/// inherits the CPU affinity) and print what it printed.
fn memory_child(var: &str, reps: u32) {
    let exe = env::current_exe().expect("this executable");
    let out = Command::new(exe)
        .env(var, reps.to_string())
        .output()
        .expect("starting the memory run");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the memory run failed: {}",
        out.status
    );
}

/// A field of /proc/self/status, in KiB.
fn status_kib(key: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/self/status"))
}

/// Feed `reps` repetitions of `base` through `p`, generating and dropping
/// one at a time (the pipeline idle after each when `idle`, as the live
/// loop is between drains), then end it; `checkpoint(repetitions done,
/// seconds)` at every tenth of the run but the last. The events fed and
/// the seconds taken, the end included.
fn stream(
    base: &Base,
    mut p: Pipeline,
    reps: u32,
    idle: bool,
    mut checkpoint: impl FnMut(u32, f64),
) -> (usize, f64) {
    let mut events = 0usize;
    let every = reps.div_ceil(CHECKPOINTS).max(1);
    let started = Instant::now();
    for r in 0..reps {
        let rep = base.repetition(r);
        for ev in &rep {
            p.on_capture(ev).expect("the bench's sinks do not fail");
        }
        events += rep.len();
        drop(rep);
        if idle {
            p.idle().expect("the bench's sinks do not fail");
        }
        if (r + 1) % every == 0 && r + 1 < reps {
            checkpoint(r + 1, started.elapsed().as_secs_f64());
        }
    }
    p.finish().expect("the bench's sinks do not fail");
    (events, started.elapsed().as_secs_f64())
}

/// Stream `reps` repetitions through one analysis and one pod model,
/// holding one repetition at a time.
fn memory(reps: u32) {
    let base = Base::load();
    let rss_before = status_kib("VmRSS");
    let hwm_before = status_kib("VmHWM");
    let (p, folded) = new_pipeline(false);
    let mut checkpoints = Vec::new();
    let (events, seconds) = stream(&base, p, reps, false, |r, t| {
        checkpoints.push((r, status_kib("VmRSS"), t));
    });
    let rss_after = status_kib("VmRSS");
    let hwm = status_kib("VmHWM");
    checkpoints.push((reps, rss_after, seconds));
    let f = folded.borrow();
    let (records, lifecycles, violations, m) = (f.count, f.lifecycles, f.violations, &f.model);
    let pods_per_rep = lifecycles as f64 / f64::from(reps);
    // Machine-readable (`cargo xtask bench` parses them).
    println!(
        "trace_engine memory: lifecycles={lifecycles} events={events} records={records} \
         violations={violations} reps={reps} rss_before_kib={rss_before} \
         hwm_before_kib={hwm_before} rss_after_kib={rss_after} hwm_kib={hwm} pods_kept={} \
         seconds={seconds:.3}",
        m.len()
    );
    // lifecycles:VmRSS KiB:seconds since the start of the run.
    println!(
        "trace_engine memory progress: {}",
        checkpoints
            .iter()
            .map(|(r, kib, t)| format!("{:.0}:{kib}:{t:.3}", f64::from(*r) * pods_per_rep))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// Counts what the DaemonSet's pipeline lets out, keeping nothing.
struct CountSink(Rc<RefCell<(usize, usize)>>);

impl Sink for CountSink {
    fn record(&mut self, r: &Record) -> std::io::Result<()> {
        let mut c = self.0.borrow_mut();
        c.0 += 1;
        c.1 += usize::from(is_pod_start(r));
        Ok(())
    }

    fn finish(&mut self, _: &Ending<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir).map_or(0, |rd| {
        rd.flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
}

/// `reps` repetitions through what the DaemonSet runs: the pipeline with
/// the flight recorder and the metrics sink.
fn daemonset(reps: u32) {
    use nri_trace::{
        sinks::MetricsSink,
        store::flight_recorder::{FlightRecorder, FlightRecorderConfig},
    };
    use std::sync::{Arc, Mutex};
    let base = Base::load();
    let dir = env::temp_dir().join(format!("nri-trace-bench-recorder-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let info = session();
    let rss_before = status_kib("VmRSS");
    let mut p = Pipeline::new(&info, Default::default());
    let recorder = FlightRecorder::open(
        FlightRecorderConfig {
            dir: dir.clone(),
            max_bytes: DAEMONSET_MAX_BYTES,
            max_age: None,
        },
        &info,
    )
    .expect("the recorder's directory");
    p.record_to(dir.display().to_string(), recorder);
    let metrics = Arc::new(Mutex::new(String::new()));
    p.add_sink(Box::new(MetricsSink::new(Arc::clone(&metrics))));
    let counted = Rc::new(RefCell::new((0usize, 0usize)));
    p.add_sink(Box::new(CountSink(Rc::clone(&counted))));
    let mut checkpoints = Vec::new();
    let (events, seconds) = stream(&base, p, reps, true, |_, t| {
        checkpoints.push((counted.borrow().1, status_kib("VmRSS"), dir_bytes(&dir), t));
    });
    let (rss_after, hwm, disk) = (status_kib("VmRSS"), status_kib("VmHWM"), dir_bytes(&dir));
    let (records, lifecycles) = *counted.borrow();
    let metrics_bytes = metrics.lock().map_or(0, |t| t.len());
    checkpoints.push((lifecycles, rss_after, disk, seconds));
    let _ = fs::remove_dir_all(&dir);
    println!(
        "trace_engine daemonset: lifecycles={lifecycles} events={events} records={records} \
         reps={reps} rss_before_kib={rss_before} rss_after_kib={rss_after} hwm_kib={hwm} \
         recorder_bytes={disk} recorder_max_bytes={DAEMONSET_MAX_BYTES} \
         metrics_bytes={metrics_bytes} seconds={seconds:.3}"
    );
    // lifecycles:VmRSS KiB:recorder bytes:seconds.
    println!(
        "trace_engine daemonset progress: {}",
        checkpoints
            .iter()
            .map(|(l, kib, b, t)| format!("{l}:{kib}:{b}:{t:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}
