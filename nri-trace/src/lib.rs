//! nri-trace: see, live and without touching the runtime, what a container
//! runtime and its NRI plugins do to each pod.
//!
//! Data flows one way; each stage is a module that knows nothing of the
//! stages after it (docs/architecture.md):
//!
//! ```text
//! probe (nri-trace-ebpf) -> capture -> decode -> model -> engine -> sinks
//! ```
//!
//! - [`capture`]: eBPF syscall tracepoints on the runtime's unix sockets,
//!   turned into ordered per-connection byte streams ([`capture::CaptureEvent`]).
//! - [`decode`]: byte streams to frames and messages (NRI: multiplexer,
//!   ttrpc, protobuf).
//! - [`model`]: typed calls ([`model::nri_call::NriCall`]).
//! - [`engine`]: analysis of the calls (hook latency, queueing).
//! - [`sinks`]: where records go (`nri` text and NDJSON lines);
//!   [`output`]: the raw capture lines of `capture`.
//! - [`doctor`]: checks that this node can run the probes.

pub mod capture;
pub mod decode;
pub mod doctor;
pub mod engine;
pub mod human;
pub mod model;
pub mod output;
pub mod pipeline;
pub mod sinks;

/// What the record files' session lines call this build.
pub const TOOL: &str = concat!("nri-trace ", env!("CARGO_PKG_VERSION"));
