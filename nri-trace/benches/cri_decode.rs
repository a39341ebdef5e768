//! Decode throughput of a recorded CRI stream, on one core, beside the cost
//! of the protobuf decoding alone.
//!
//! Input, loaded once before any timing (the criterion parameter of each
//! benchmark names it):
//!
//! - `grpc-go` (the headline): `tests/fixtures/cri/cri-late-attach-go/
//!   recording.ndjson.gz`, a real recording of containerd 1.7.24 answering
//!   go-cri-client, built on grpc-go as kubelet is, attached late: the
//!   `:path` of its calls hides in pre-attach HPACK slots, so their method
//!   is inferred (assemble/cri/inference.rs) and the inference path is exercised.
//! - `tonic`: `tests/fixtures/cri/happy/recording.ndjson.gz`, containerd
//!   answering the lab's tonic/h2 cri-driver, traced from the connection's
//!   start: every method is known from `:path`.
//!
//! Benchmarks over the same bytes (criterion group `cri_decode`, ids
//! `cri_decode/<name>/<input>`, throughput in captured payload bytes):
//!
//! - `full`: the decoder stage of the pipeline, as `watch` and `debug cri`
//!   run it (`assemble::TraceDecoder`: routing, HTTP/2
//!   framing, HPACK, gRPC message reassembly, chunk time stamps, streams,
//!   method inference, protobuf decoding, pod and container identity,
//!   observations and their clock), with a fresh decoder per run and the
//!   events borrowed, not cloned. (Per-method latency is the engine's:
//!   `trace_engine` measures it.)
//! - `framing`: HTTP/2 framing, HPACK and gRPC message reassembly only: one
//!   `H2Connection` per connection, every chunk pushed by side (`In`: the
//!   client's bytes, `Out`: the server's), every event drained; no protobuf.
//! - `prost_only`: protobuf decoding only: the gRPC messages `framing`
//!   yields, extracted beforehand, decoded as the pipeline decodes a call's
//!   messages (`message::decode_request` / `decode_response` with the
//!   call's method; a response only when the call succeeded). The method is
//!   found beforehand: from `:path`, or, for a call whose `:path` was
//!   hidden, the method the full pipeline settled on. Calls left unknown
//!   and calls to non-CRI methods are not decoded, as in the pipeline.
//! - `shape_inference` (inputs with hidden `:path` only): the inference's
//!   message-shape step alone, `message::candidates(request, response)`
//!   over the messages of every call whose `:path` was hidden (the response
//!   only when the call succeeded, as the pipeline passes it). An upper
//!   bound of what the pipeline spends there: a call whose HPACK slot set
//!   is already resolved skips `candidates` (it checks one method's fit).
//!   Not in it: the per-candidate `decode_request` of the inference's
//!   id-kind step, which only `full` runs.
//!
//! framing + bookkeeping = `full` - `prost_only`; bookkeeping alone
//! (inference included) = `full` - `prost_only` - `framing`. The issue
//! asks only to show them beside each other; there is no target.
//!
//! `full` takes a fresh analysis per run and drops what it built after each
//! run, outside the timing (criterion `PerIteration`), as `nri_decode`
//! does: each run allocates as a one-shot replay does.
//!
//! Run with `cargo bench -p nri-trace --bench cri_decode` (or through
//! `cargo xtask bench --only cri-decode`, which pins it to one CPU). Prints
//! one `cri_decode input: ...` line per input (its size, message and call
//! counts) before the benchmarks and a summary (calls/s, MB/s, the ratio)
//! after them, read back from criterion's estimates. Nothing here asserts
//! on time.

mod common;

use std::{
    collections::HashMap,
    env,
    hint::black_box,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use nri_trace::{
    assemble::TraceDecoder,
    capture::{CaptureEvent, ConnId, Direction},
    model::Identified,
    model::Observation,
    pipeline::session_of_events,
    store::raw_capture,
    testing::cri::{
        connection::{H2Connection, H2Event, Side},
        message::{self, CriMethod, MessageDecodeError},
    },
};

/// (criterion parameter, recording relative to this crate); the first is
/// the headline.
const FIXTURES: [(&str, &str); 2] = [
    (
        "grpc-go",
        "../tests/fixtures/cri/cri-late-attach-go/recording.ndjson.gz",
    ),
    ("tonic", "../tests/fixtures/cri/happy/recording.ndjson.gz"),
];
/// The criterion group; benchmark ids are `cri_decode/<name>/<input>`.
const GROUP: &str = "cri_decode";
const BENCHES: [&str; 4] = ["full", "framing", "prost_only", "shape_inference"];

fn main() {
    let started = SystemTime::now();
    let inputs: Vec<Input> = FIXTURES
        .iter()
        .map(|&(name, file)| Input::load(name, file))
        .collect();
    // One machine-readable line per input (`cargo xtask bench` parses them).
    for input in &inputs {
        println!(
            "cri_decode input: file={} events={} chunks={} bytes={} messages={} calls={} \
             known={} inferred={} unknown={} records={} decoded={} hidden={} fixture={}",
            input.path.display(),
            input.events.len(),
            input.chunks,
            input.bytes,
            input.messages,
            input.calls,
            input.known,
            input.inferred,
            input.unknown,
            input.records,
            input.protos.len(),
            input.hidden.len(),
            input.name,
        );
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .sample_size(100)
        .configure_from_args();
    benches(&mut c, &inputs);
    c.final_summary();
    // Without --bench (cargo test --benches), criterion runs each benchmark
    // once as a test and writes no estimates.
    if env::args().any(|a| a == "--bench") {
        for input in &inputs {
            print_summary(input, started);
        }
    }
}

// ---------------------------------------------------------------- input

/// One recording and what is precomputed from it, outside any timing.
struct Input {
    /// The criterion parameter.
    name: &'static str,
    path: PathBuf,
    /// The runtime's CRI socket, as the recording's opens name it.
    socket: PathBuf,
    events: Vec<CaptureEvent>,
    /// Chunk events, and the bytes they carry (the throughput unit).
    chunks: usize,
    bytes: u64,
    /// gRPC messages the framing layers yield (both sides).
    messages: u64,
    /// What the decoder stage yields: observations, calls among them, and
    /// how the calls' methods were identified.
    records: usize,
    calls: usize,
    known: usize,
    inferred: usize,
    unknown: usize,
    /// What `prost_only` decodes, in call order.
    protos: Vec<Proto>,
    /// What `shape_inference` runs over: the messages of calls whose
    /// `:path` was hidden.
    hidden: Vec<Hidden>,
}

/// One gRPC message payload and the method it is decoded as.
struct Proto {
    method: CriMethod,
    request: bool,
    payload: Vec<u8>,
}

/// The messages of a call whose method had to be inferred, as the
/// inference sees them.
struct Hidden {
    request: Option<Vec<u8>>,
    response: Option<Vec<u8>>,
}

impl Input {
    fn load(name: &'static str, file: &str) -> Input {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let events = raw_capture::read_file(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let (chunks, bytes) = events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Chunk(c) => Some(c.bytes.len() as u64),
                _ => None,
            })
            .fold((0, 0), |(n, b), len| (n + 1, b + len));

        // The first message of each stream and side: the one the assembler
        // keeps for the call (CRI is unary but for GetContainerEvents).
        let mut first: HashMap<(ConnId, u32, Side), Vec<u8>> = HashMap::new();
        let mut messages = 0u64;
        frame(&events, |conn, side, ev| {
            if let H2Event::Message { stream_id, message } = ev {
                messages += 1;
                first
                    .entry((conn, stream_id, side))
                    .or_insert(message.payload);
            }
        });

        // The `full` loop is deterministic, and decodes every message.
        let socket = PathBuf::from(session_of_events(&events).cri_socket);
        let (want, a) = run_full(&events, decoder(&socket));
        let (again, _) = run_full(&events, decoder(&socket));
        assert!(want == again, "the decoder stage is not deterministic");
        assert_eq!(
            a.cri_stats().undecodable,
            0,
            "{}: the pipeline met undecodable messages",
            path.display()
        );

        let (mut known, mut inferred, mut unknown) = (0, 0, 0);
        let mut protos = Vec::new();
        let mut hidden = Vec::new();
        for c in want.iter().filter_map(|o| match o {
            Observation::CriCall(c) => Some(c),
            _ => None,
        }) {
            let request = first.get(&(c.conn, c.stream_id, Side::Client));
            // The pipeline passes a response on only when the call succeeded.
            let response = first
                .get(&(c.conn, c.stream_id, Side::Server))
                .filter(|_| c.outcome.is_ok());
            match c.identified {
                Identified::Known => known += 1,
                Identified::Inferred { .. } => inferred += 1,
                Identified::Unknown { .. } => unknown += 1,
            }
            if c.identified != Identified::Known {
                hidden.push(Hidden {
                    request: request.cloned(),
                    response: response.cloned(),
                });
            }
            // The method the pipeline settled on; None: unknown, or not CRI.
            let Some(method) = c
                .service
                .as_deref()
                .zip(c.method_name())
                .and_then(|(s, m)| CriMethod::from_path_parts(s, m))
            else {
                continue;
            };
            // These are the messages the pipeline decoded for this call:
            // its summary is made of what they say.
            let decoded = |p: Option<&Vec<u8>>, req: bool| -> String {
                match (p, req) {
                    (None, _) => String::new(),
                    (Some(b), true) => message::decode_request(method, b).unwrap().summary,
                    (Some(b), false) => message::decode_response(method, b).unwrap().summary,
                }
            };
            let summary = [decoded(request, true), decoded(response, false)]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" -> ");
            assert_eq!(
                summary, c.summary,
                "{}: stream {} of {:?}: other messages than the pipeline's",
                name, c.stream_id, c.conn
            );
            for (p, req) in [(request, true), (response, false)] {
                if let Some(p) = p {
                    protos.push(Proto {
                        method,
                        request: req,
                        payload: p.clone(),
                    });
                }
            }
        }
        let calls = known + inferred + unknown;
        assert!(calls > 0, "no CRI call in {}", path.display());
        decode_all(&protos).expect("every message decoded decodes");

        Input {
            name,
            path,
            socket,
            events,
            chunks,
            bytes,
            messages,
            records: want.len(),
            calls,
            known,
            inferred,
            unknown,
            protos,
            hidden,
        }
    }
}

/// The side that sent a chunk's bytes: the traced process is the runtime
/// (the gRPC server), what it reads the client sent (as the assembler).
fn side_of(d: Direction) -> Side {
    match d {
        Direction::In => Side::Client,
        Direction::Out => Side::Server,
    }
}

// ------------------------------------------------------ measured code

/// The decoder stage on the recording's CRI socket.
fn decoder(socket: &Path) -> TraceDecoder {
    TraceDecoder::new(vec![socket.to_path_buf()], vec![])
}

/// The decoder stage over every event borrowed, then the end of the
/// capture. Returns everything it built, so that dropping it is not
/// measured.
fn run_full(events: &[CaptureEvent], mut d: TraceDecoder) -> (Vec<Observation>, TraceDecoder) {
    let mut out = Vec::new();
    for ev in events {
        d.on_capture(ev, &mut out);
    }
    d.finish(&mut out);
    (out, d)
}

/// The framing layers as the assembler drives them: one `H2Connection` per
/// connection, gaps and truncation handled, state dropped when the
/// connection closes. Each event goes to `on_event`.
fn frame(
    events: &[CaptureEvent],
    mut on_event: impl FnMut(ConnId, Side, H2Event),
) -> HashMap<ConnId, H2Connection> {
    let mut conns: HashMap<ConnId, H2Connection> = HashMap::new();
    for ev in events {
        match ev {
            CaptureEvent::Chunk(c) => {
                let h2 = conns.entry(c.conn).or_default();
                let side = side_of(c.direction);
                if c.gap_before {
                    h2.gap(side);
                }
                h2.push(side, &c.bytes);
                if c.truncated {
                    h2.gap(side);
                }
                while let Some((e, end)) = h2.next_with_end(side) {
                    black_box(end);
                    on_event(c.conn, side, e);
                }
            }
            CaptureEvent::Close(c) => {
                conns.remove(&c.conn);
            }
            CaptureEvent::Open(_)
            | CaptureEvent::Process(_)
            | CaptureEvent::Loss(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_)
            | CaptureEvent::Tick { .. } => {}
        }
    }
    conns
}

/// Decode every message as the pipeline does, typed by its call's method.
fn decode_all(protos: &[Proto]) -> Result<(), MessageDecodeError> {
    for p in protos {
        if p.request {
            black_box(message::decode_request(p.method, &p.payload)?);
        } else {
            black_box(message::decode_response(p.method, &p.payload)?);
        }
    }
    Ok(())
}

/// The shape step of the inference over every hidden call.
fn infer_shapes(hidden: &[Hidden]) -> usize {
    let mut n = 0;
    for h in hidden {
        n += black_box(message::candidates(
            h.request.as_deref(),
            h.response.as_deref(),
        ))
        .len();
    }
    n
}

fn benches(c: &mut Criterion, inputs: &[Input]) {
    let mut g = c.benchmark_group(GROUP);
    for input in inputs {
        let events = &input.events[..];
        let id = |name: &str| BenchmarkId::new(name, input.name);
        // Decimal units (MB/s), as reported in docs/benchmarks.md.
        g.throughput(Throughput::BytesDecimal(input.bytes));
        g.bench_function(id("full"), |b| {
            b.iter_batched(
                || decoder(&input.socket),
                |a| run_full(black_box(events), a),
                BatchSize::PerIteration,
            )
        });
        g.bench_function(id("framing"), |b| {
            b.iter_with_large_drop(|| {
                let mut n = 0u64;
                let state = frame(black_box(events), |_, _, e| {
                    n += 1;
                    black_box(e);
                });
                (n, state)
            })
        });
        g.bench_function(id("prost_only"), |b| {
            b.iter(|| decode_all(black_box(&input.protos)))
        });
        if !input.hidden.is_empty() {
            g.bench_function(id("shape_inference"), |b| {
                b.iter(|| infer_shapes(black_box(&input.hidden)))
            });
        }
    }
    g.finish();
}

// ------------------------------------------------------------- summary

fn print_summary(input: &Input, since: SystemTime) {
    let ns: Vec<Option<f64>> = BENCHES
        .iter()
        .map(|b| common::median_ns(&[GROUP, b, input.name], since))
        .collect();
    println!(
        "\ncri_decode summary ({}): criterion medians; one run = the whole recording, {} B in \
         {} chunks, {} gRPC messages ({} decoded by prost_only), {} calls ({} known, {} \
         inferred, {} unknown)",
        input.name,
        input.bytes,
        input.chunks,
        input.messages,
        input.protos.len(),
        input.calls,
        input.known,
        input.inferred,
        input.unknown
    );
    println!(
        "{:<16} {:>14} {:>10} {:>12}",
        "benchmark", "us per run", "MB/s", "calls/s"
    );
    for (name, t) in BENCHES.iter().zip(&ns) {
        match t {
            Some(t) => println!(
                "{name:<16} {:>14.1} {:>10.1} {:>12.0}",
                t / 1e3,
                input.bytes as f64 * 1e3 / t,
                input.calls as f64 * 1e9 / t
            ),
            None => println!("{name:<16} {:>14}", "not run"),
        }
    }
    let (Some(full), Some(framing), Some(prost)) = (ns[0], ns[1], ns[2]) else {
        return;
    };
    let rest = full - prost;
    println!("full / prost_only: {:.2}", full / prost);
    println!(
        "framing + bookkeeping (full - prost_only): {:.1} us = {:.2} x prost_only",
        rest / 1e3,
        rest / prost
    );
    println!(
        "bookkeeping (full - prost_only - framing): {:.1} us = {:.2} x prost_only",
        (rest - framing) / 1e3,
        (rest - framing) / prost
    );
    if let Some(shapes) = ns[3] {
        println!(
            "shape_inference: {:.1} us = {:.2} x prost_only, {:.0} % of full ({} hidden calls)",
            shapes / 1e3,
            shapes / prost,
            100.0 * shapes / full,
            input.hidden.len()
        );
    }
}
