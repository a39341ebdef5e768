//! Decode throughput of a recorded NRI stream, on one core, and what part
//! of it is protobuf decoding.
//!
//! Input: `tests/fixtures/nri/happy/recording.ndjson.gz`, a real recording
//! of containerd 1.7.24 talking to three NRI plugins, loaded once before any
//! timing. Four benchmarks over the same bytes (criterion group
//! `nri_decode`, throughput in captured payload bytes):
//!
//! - `full`: the decoder stage of the pipeline, as `watch` and `debug nri`
//!   run it (`assemble::trace_decoder::TraceDecoder`: routing, mux framing,
//!   ttrpc framing, protobuf decoding, request/response matching, plugin
//!   identity, observations and their clock), with a fresh decoder per run
//!   and the events borrowed, not cloned. (Hook timing is the engine's:
//!   `trace_engine` measures it.)
//! - `assembler`: the `NriCallAssembler` alone (framing, protobuf,
//!   matching, calls): `full` - `assembler` is the stage's routing and
//!   clock.
//! - `framing`: the framing layers only: every chunk pushed into a
//!   `MuxTtrpc` per (connection, direction), every ttrpc message drained.
//! - `prost_only`: protobuf decoding only: the ttrpc payloads `framing`
//!   yields, extracted beforehand, decoded as the pipeline decodes them
//!   (envelope, then the body typed by method; the method of a request and
//!   the method of the request a response answers are found beforehand).
//!   Only the runtime's ends of the connections: the plugins' ends
//!   (`ConnOpen::other_end`), when captured too, carry the same messages,
//!   which the pipeline frames and times but does not decode.
//!
//! framing + bookkeeping = `full` - `prost_only`; bookkeeping alone =
//! `full` - `prost_only` - `framing`. The target (issue): framing and
//! bookkeeping cost less than the protobuf decoding itself, i.e.
//! `full` - `prost_only` < `prost_only`.
//!
//! `full` and `assembler` take a fresh analysis per run and drop what it
//! built after each run, outside the timing (criterion `PerIteration`):
//! each run allocates as a one-shot replay does. This matters here: the
//! hook timer allocates one large zeroed histogram per (plugin, hook), and
//! when runs are batched (outputs kept alive, freed together) the allocator
//! serves them from memory already mapped, which is much cheaper.
//!
//! Run with `cargo bench -p nri-trace --bench nri_decode` (or through
//! `cargo xtask bench --only nri-decode`, which pins it to one CPU). Prints
//! `nri_decode input: ...` (the input's size and message count) before the
//! benchmarks and a summary (messages/s, MB/s, the ratio) after them, read
//! back from criterion's estimates. Nothing here asserts on time.

mod common;

use std::{
    collections::{HashMap, HashSet},
    env,
    hint::black_box,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use criterion::{BatchSize, Criterion, Throughput};
use nri_trace::{
    assemble::TraceDecoder,
    capture::{CaptureEvent, Chunk, ConnId, Direction},
    model::{NriObservation, Observation},
    pipeline::replay::records_of_events,
    store::raw_capture,
    testing::nri::{
        message::{self, Method, RequestBody, ResponseBody},
        ttrpc::{MessageType, MuxTtrpc, TtrpcEvent, TtrpcMessage},
    },
    testing::NriCallAssembler,
};

/// The recording, relative to this crate.
const FIXTURE: &str = "../tests/fixtures/nri/happy/recording.ndjson.gz";
/// The lab's NRI socket: its connections are NRI from the first byte.
const SOCKET: &str = "/var/lib/nri-trace-lab/run/nri.sock";
/// The criterion group; benchmark ids are `nri_decode/<name>`.
const GROUP: &str = "nri_decode";
const BENCHES: [&str; 4] = ["full", "assembler", "framing", "prost_only"];

fn main() {
    let started = SystemTime::now();
    let input = Input::load();
    // One machine-readable line (`cargo xtask bench` parses it).
    println!(
        "nri_decode input: file={} events={} conns={} plugin_ends={} chunks={} bytes={} \
         messages={} requests={} responses={} request_bodies={} response_bodies={} records={} \
         calls={} hooks={}",
        input.path.display(),
        input.events.len(),
        input.conns,
        input.plugin_ends,
        input.chunks,
        input.bytes,
        input.messages,
        input.requests,
        input.protos.len() - input.requests,
        input.request_bodies,
        input.response_bodies,
        input.records,
        input.calls,
        input.hooks,
    );
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .sample_size(100)
        .configure_from_args();
    benches(&mut c, &input);
    c.final_summary();
    // Without --bench (cargo test --benches), criterion runs each benchmark
    // once as a test and writes no estimates.
    if env::args().any(|a| a == "--bench") {
        print_summary(&input, started);
    }
}

// ---------------------------------------------------------------- input

/// The recording and what is precomputed from it, outside any timing.
struct Input {
    path: PathBuf,
    events: Vec<CaptureEvent>,
    /// Connections opened, and how many of them are a plugin's end of
    /// another one (its messages are framed, not decoded).
    conns: usize,
    plugin_ends: usize,
    /// Chunk events, and the bytes they carry (the throughput unit).
    chunks: usize,
    bytes: u64,
    /// ttrpc messages the framing layers yield (all types, every
    /// connection end captured).
    messages: u64,
    /// What `prost_only` decodes, in stream order.
    protos: Vec<Proto>,
    requests: usize,
    request_bodies: usize,
    response_bodies: usize,
    /// What the decoder stage yields on this input: observations, and
    /// calls among them.
    records: usize,
    calls: usize,
    /// (plugin, hook) pairs in the latency summary: one histogram each.
    hooks: usize,
}

/// One ttrpc request or response payload, and the method its body is
/// decoded with (`None`: only the envelope is decoded, as the pipeline
/// does for a non-NRI request, an unmatched or failed response).
struct Proto {
    request: bool,
    payload: Vec<u8>,
    method: Option<Method>,
}

impl Input {
    fn load() -> Input {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
        let events = raw_capture::read_file(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let (chunks, bytes) = events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Chunk(c) => Some(c.bytes.len() as u64),
                _ => None,
            })
            .fold((0, 0), |(n, b), len| (n + 1, b + len));

        let mut framed = Vec::new();
        let mut messages = 0u64;
        frame(&events, |c, mux_conn, m| {
            messages += 1;
            framed.push((c.conn, c.direction, mux_conn, m));
        });
        // The plugins' ends of connections whose runtime end is captured.
        let mirrors: HashSet<ConnId> = events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Open(o) if o.other_end.is_some() => Some(o.conn),
                _ => None,
            })
            .collect();
        framed.retain(|(conn, ..)| !mirrors.contains(conn));
        let protos = match_calls(framed);
        let requests = protos.iter().filter(|p| p.request).count();
        let request_bodies = protos
            .iter()
            .filter(|p| p.request && p.method.is_some())
            .count();
        let response_bodies = protos
            .iter()
            .filter(|p| !p.request && p.method.is_some())
            .count();
        // The bodies decode (the loop must measure decoding, not errors).
        decode_all(&protos).expect("every payload of the recording decodes");

        // The `full` loop gives what the pipeline's decoder stage gives.
        let (want, _) = run_full(&events, decoder());
        let (again, _) = run_full(&events, decoder());
        assert!(want == again, "the decoder stage is not deterministic");
        let calls = want
            .iter()
            .filter(|o| matches!(o, Observation::NriCall(_)))
            .count();
        assert!(calls > 0, "no NRI call in {}", path.display());
        // The (plugin, hook) pairs the engine times on it.
        let hooks = records_of_events(&events, Default::default())
            .tables
            .hooks
            .len();
        let (observations, _) = run_assembler(&events, assembler());
        assert!(
            observations
                .iter()
                .filter(|o| matches!(o, NriObservation::Call(_)))
                .count()
                == calls,
            "the assembler yields other calls than the decoder stage"
        );

        Input {
            path,
            conns: events
                .iter()
                .filter(|e| matches!(e, CaptureEvent::Open(_)))
                .count(),
            plugin_ends: mirrors.len(),
            hooks,
            records: want.len(),
            calls,
            events,
            chunks,
            bytes,
            messages,
            requests,
            request_bodies,
            response_bodies,
            protos,
        }
    }
}

/// Pair responses with requests as the assembler does (assemble/nri/):
/// key (connection, mux conn_id, stream id, direction of the request); a
/// response travels the opposite way. Only successful responses to a
/// known request have their body decoded.
fn match_calls(framed: Vec<(ConnId, Direction, u32, TtrpcMessage)>) -> Vec<Proto> {
    let mut pending: HashMap<(ConnId, u32, u32, usize), Method> = HashMap::new();
    let mut protos = Vec::new();
    for (conn, dir, mux_conn, m) in framed {
        match m.kind {
            MessageType::Request => {
                let method = message::decode_request(&m.payload)
                    .ok()
                    .and_then(|r| Method::from_wire(&r.service, &r.method));
                if let Some(method) = method {
                    pending.insert((conn, mux_conn, m.stream_id, dir_index(dir)), method);
                }
                protos.push(Proto {
                    request: true,
                    payload: m.payload,
                    method,
                });
            }
            MessageType::Response => {
                let key = (conn, mux_conn, m.stream_id, 1 - dir_index(dir));
                let requested = pending.remove(&key);
                let ok = message::decode_response(&m.payload).is_ok_and(|r| r.error().is_none());
                protos.push(Proto {
                    request: false,
                    payload: m.payload,
                    method: requested.filter(|_| ok),
                });
            }
            // Stream data / unknown types: the pipeline does not decode them.
            MessageType::Data | MessageType::Unknown(_) => {}
        }
    }
    protos
}

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::In => 0,
        Direction::Out => 1,
    }
}

fn decoder() -> TraceDecoder {
    TraceDecoder::new(vec![], vec![PathBuf::from(SOCKET)])
}

fn assembler() -> NriCallAssembler {
    NriCallAssembler::new(vec![PathBuf::from(SOCKET)])
}

// ------------------------------------------------------ measured code

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

/// The assembler alone over every event, then the end of the capture.
fn run_assembler(
    events: &[CaptureEvent],
    mut a: NriCallAssembler,
) -> (Vec<NriObservation>, NriCallAssembler) {
    let mut out = Vec::new();
    for ev in events {
        a.on_capture(ev, &mut out);
    }
    a.finish(&mut out);
    (out, a)
}

/// The framing layers as the assembler drives them: per connection one
/// `MuxTtrpc` per direction, gaps and truncation handled, state dropped when
/// the connection closes. Each ttrpc message goes to `on_message`.
fn frame(
    events: &[CaptureEvent],
    mut on_message: impl FnMut(&Chunk, u32, TtrpcMessage),
) -> HashMap<ConnId, [MuxTtrpc; 2]> {
    let mut conns: HashMap<ConnId, [MuxTtrpc; 2]> = HashMap::new();
    for ev in events {
        match ev {
            CaptureEvent::Chunk(c) => {
                let d = &mut conns.entry(c.conn).or_default()[dir_index(c.direction)];
                if c.gap_before {
                    d.gap();
                }
                d.push(&c.bytes);
                if c.truncated {
                    d.gap();
                }
                for (mux_conn, e) in d.by_ref() {
                    match e {
                        TtrpcEvent::Message(m) => on_message(c, mux_conn, m),
                        TtrpcEvent::Resync { skipped } => {
                            black_box(skipped);
                        }
                    }
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

/// Decode every payload as the pipeline does: the envelope, then the body.
fn decode_all(protos: &[Proto]) -> Result<(), message::MessageError> {
    for p in protos {
        if p.request {
            let req = message::decode_request(&p.payload)?;
            if let Some(m) = p.method {
                black_box(RequestBody::decode(m, &req.payload)?);
            }
            black_box(req);
        } else {
            let resp = message::decode_response(&p.payload)?;
            if let Some(m) = p.method {
                black_box(ResponseBody::decode(m, &resp.payload)?);
            }
            black_box(resp);
        }
    }
    Ok(())
}

fn benches(c: &mut Criterion, input: &Input) {
    let events = &input.events[..];
    let mut g = c.benchmark_group(GROUP);
    // Decimal units (MB/s), as reported in docs/benchmarks.md.
    g.throughput(Throughput::BytesDecimal(input.bytes));
    g.bench_function("full", |b| {
        b.iter_batched(
            decoder,
            |a| run_full(black_box(events), a),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("assembler", |b| {
        b.iter_batched(
            assembler,
            |a| run_assembler(black_box(events), a),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("framing", |b| {
        b.iter_with_large_drop(|| {
            let mut n = 0u64;
            let state = frame(black_box(events), |_, _, m| {
                n += 1;
                black_box(m);
            });
            (n, state)
        })
    });
    g.bench_function("prost_only", |b| {
        b.iter(|| decode_all(black_box(&input.protos)))
    });
    g.finish();
}

// ------------------------------------------------------------- summary

fn print_summary(input: &Input, since: SystemTime) {
    let ns: Vec<Option<f64>> = BENCHES
        .iter()
        .map(|b| common::median_ns(&[GROUP, b], since))
        .collect();
    println!(
        "\nnri_decode summary: criterion medians; one run = the whole recording, {} B in {} \
         chunks, {} ttrpc messages",
        input.bytes, input.chunks, input.messages
    );
    println!(
        "{:<12} {:>14} {:>10} {:>14}",
        "benchmark", "us per run", "MB/s", "messages/s"
    );
    for (name, t) in BENCHES.iter().zip(&ns) {
        match t {
            Some(t) => println!(
                "{name:<12} {:>14.1} {:>10.1} {:>14.0}",
                t / 1e3,
                input.bytes as f64 * 1e3 / t,
                input.messages as f64 * 1e9 / t
            ),
            None => println!("{name:<12} {:>14}", "not run"),
        }
    }
    if let (Some(full), Some(asm)) = (ns[0], ns[1]) {
        println!(
            "hook timing and records (full - assembler): {:.1} us, {} (plugin, hook) histograms",
            (full - asm) / 1e3,
            input.hooks
        );
    }
    let (Some(full), Some(framing), Some(prost)) = (ns[0], ns[2], ns[3]) else {
        return;
    };
    let rest = full - prost;
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
    println!(
        "target \"framing and bookkeeping cost less than protobuf decoding\": {}",
        if rest < prost { "met" } else { "MISSED" }
    );
}
