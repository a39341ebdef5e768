//! The decode stage: the bytes of one connection direction in, typed frames
//! out.
//!
//! Input is what [`crate::capture`] hands over per `(conn, direction)`: the
//! bytes of each syscall in order ([`crate::capture::Chunk`]), plus the
//! knowledge that bytes were lost before or after a chunk
//! (`gap_before` / `truncated`). A decoder here is fed with `push(bytes)`,
//! told about lost bytes with `gap()`, and drained with `next()`.
//!
//! Decoders are pure: no I/O, no async, no clocks. They never panic on any
//! input, never allocate from a length read off the wire before the bytes
//! are there, and hold a bounded amount of partial state. When they meet
//! bytes that cannot be a frame (garbage, a capture that attached
//! mid-stream, or a gap) they say so with a `Resync { skipped }` event and
//! search for the next plausible frame boundary.
//!
//! This stage knows nothing of the stages after it (model, engine, sinks):
//! it yields frames and messages, not calls or pods.
//!
//! - [`nri`]: the NRI socket — the NRI multiplexer and ttrpc framing.
//! - [`cri`]: the CRI socket — HTTP/2 framing (RFC 9113) and HPACK under
//!   gRPC.
//! - `framer`: the length-prefixed framing and resynchronization both
//!   build on.

pub(crate) mod cri;
pub(crate) mod framer;
pub(crate) mod nri;
pub(crate) mod trace_context;

#[cfg(test)]
pub(crate) mod test_strategies;
