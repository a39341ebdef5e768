//! From decoded messages to typed calls: the assemblers match each
//! request with its response on each connection, time it and say how it
//! ended, yielding the model's [`crate::model::nri_call::NriCall`]s and
//! [`crate::model::cri_call::CriCall`]s with the plugins and clients they
//! belong to.
//!
//! - `nri`: NRI (ttrpc over the runtime's plugin connections).
//! - `cri`: CRI (gRPC over HTTP/2 on the runtime's CRI socket), with
//!   the method of a call joined mid-stream recovered from evidence.
//! - `trace_decoder`: one runtime's CRI and NRI sockets decoded together
//!   into observations: [`TraceDecoder`], what the stages after this one
//!   use.
//! - `chunk_stamps`: stream offsets to capture timestamps.

mod chunk_stamps;
pub(crate) mod cri;
pub(crate) mod nri;
mod trace_decoder;

pub use trace_decoder::TraceDecoder;
