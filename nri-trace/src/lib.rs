//! nri-trace: see, live and without touching the runtime, what a container
//! runtime and its NRI plugins do to each pod.
//!
//! Data flows one way; each stage is a module that knows nothing of the
//! stages after it (docs/architecture.md):
//!
//! ```text
//! probe (nri-trace-ebpf) -> capture -> decode -> assemble -> engine -> sinks
//!                                                  (model: the types they pass;
//!                                                   store: the files they fill)
//! ```
//!
//! - [`capture`]: eBPF syscall tracepoints on the runtime's unix sockets
//!   and process tree, turned into ordered per-connection byte streams
//!   and sandbox events ([`capture::CaptureEvent`]).
//! - [`decode`]: byte streams to calls (NRI: multiplexer, ttrpc, protobuf;
//!   CRI: HTTP/2, HPACK, gRPC, protobuf).
//! - [`assemble`]: decoded messages to typed calls, each request matched
//!   with its response per connection.
//! - [`model`]: typed calls and kernel events ([`model::nri_call::NriCall`],
//!   [`model::cri_call::CriCall`], [`model::observation::Observation`]).
//! - [`store`]: the files: the raw capture, the record file that carries
//!   the observations, the flight recorder's segments, and the NDJSON line
//!   format they share.
//! - [`engine`]: correlation, latency and the contract rules, pure and
//!   deterministic ([`engine::Record`]).
//! - [`sinks`]: where records go (text, JSON, report, metrics, the TUI,
//!   explain); [`output`]: the raw capture lines of `debug capture`.
//! - [`pipeline`]: the one loop that joins them, live or replayed.
//! - [`doctor`]: checks that this node can run the probes.
//! - [`human`]: durations, clocks and sanitized text for people.
//! - [`basic_types`]: connection ids, directions and timestamps, the words
//!   every stage shares.
//! - `testing` (feature `testing`): the decoders' layers, for the fuzz
//!   targets, the benchmarks and the integration tests.

// Without the `testing` feature the decoders' layers that only the fuzz
// targets, the benchmarks and the integration tests drive (testing.rs) are
// unreachable and partly unused. These lints are judged where those are
// reachable: the workspace's build (`cargo clippy --workspace`, CI), in
// which tests/ turns the feature on.
#![cfg_attr(
    not(feature = "testing"),
    allow(unreachable_pub, dead_code, unused_imports)
)]

pub mod assemble;
pub mod basic_types;
pub mod capture;
pub mod decode;
pub mod doctor;
pub mod engine;
pub mod human;
pub mod model;
pub mod output;
pub mod pipeline;
pub mod sinks;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

/// What the record files' session lines call this build.
pub const TOOL: &str = concat!("nri-trace ", env!("CARGO_PKG_VERSION"));
