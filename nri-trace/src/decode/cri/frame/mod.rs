//! HTTP/2 framing (RFC 9113) for one direction of a CRI gRPC connection.
//!
//! The client direction starts with the connection preface (§3.4), the 24
//! octets `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`; after it, and from the first
//! byte in the server direction, the stream is a sequence of frames (§4.1):
//!
//! ```text
//! 0          3      4       5                       9
//! | length   | type | flags | R | stream identifier | payload (length octets)
//!   u24 BE     u8     u8      1b  u31 BE
//! ```
//!
//! [`FrameDecoder`] reports the preface, decodes every frame type of §6,
//! validates the per-type length and stream-identifier rules (a violating
//! frame is reported as [`FrameEvent::Malformed`]; its framing is still
//! known from the header, so decoding goes on), and reassembles each field
//! block (HEADERS or PUSH_PROMISE, then CONTINUATION frames until
//! END_HEADERS, §4.3) into one raw HPACK block for the `hpack` module.
//!
//! Buffering and resynchronization reuse the NRI framer
//! ([`crate::decode::framer`]'s `Framer`): a frame longer than the maximum
//! frame size cannot be a frame (§4.2), so it sends the decoder hunting for
//! the next plausible frame boundary (see [`FrameDecoder`]).
//!
//! The parts: `header` (the 9-byte frame header, the frame types and
//! flags), `payload` (the per-type payloads: [`Frame`], their length,
//! padding and stream rules, [`parse_frame`]), `layout` (the framer's view
//! of a frame, with the scoring of candidate frame starts while hunting)
//! and `decoder` (the stream of frames: the preface, field block
//! reassembly, resynchronization, [`FrameDecoder`] and what it yields).

mod decoder;
mod header;
mod layout;
mod payload;
#[cfg(test)]
mod test_frames;

pub use decoder::{BlockError, FrameConfigError, FrameDecoder, FrameEvent, HeaderBlock};
pub use header::{FrameHeader, FrameType, HEADER_LEN};
pub(crate) use payload::{error_code_name, SETTINGS_HEADER_TABLE_SIZE};
pub use payload::{parse_frame, Frame, FrameError, PrioritySpec, SETTINGS_MAX_FRAME_SIZE};
// What assemble/cri's tests start a client's stream with.
#[cfg(test)]
pub(crate) use decoder::PREFACE;
