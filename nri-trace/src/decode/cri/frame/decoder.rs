//! The stream of HTTP/2 frames of one direction: [`FrameDecoder`] (the
//! client preface, field block reassembly, resynchronization through the
//! NRI framer), what it yields ([`FrameEvent`], [`HeaderBlock`],
//! [`BlockError`]) and its configuration errors.

use std::cell::Cell;
use std::collections::VecDeque;

use super::header::{FrameHeader, FrameType, DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE};
use super::layout::H2Layout;
use super::payload::{parse_frame, Frame, FrameError, PrioritySpec};
use crate::decode::framer::{Framer, RawEvent, DEFAULT_HUNT_WINDOW};

/// The client connection preface (§3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Default bound of a reassembled header block.
pub(super) const DEFAULT_MAX_HEADER_BLOCK: usize = 256 * 1024;

/// A field block that could not be reassembled (§4.3, §6.10).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// A frame other than a CONTINUATION of the same stream arrived before
    /// END_HEADERS (§4.3: a field block is a contiguous sequence of frames;
    /// connection error PROTOCOL_ERROR). The partial block is dropped; the
    /// interrupting frame is decoded as usual (unless it is a CONTINUATION
    /// of another stream, which is dropped with the block).
    #[error("field block interrupted by {frame_type:?} on stream {by_stream_id}")]
    Interrupted {
        frame_type: FrameType,
        by_stream_id: u32,
    },
    /// The block grew past the configured bound; it is dropped and its
    /// remaining CONTINUATION frames are skipped.
    #[error("field block of {size} bytes exceeds the bound of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// A CONTINUATION with no open block (§6.10: PROTOCOL_ERROR).
    #[error("CONTINUATION without a preceding HEADERS or PUSH_PROMISE")]
    UnexpectedContinuation,
    /// Bytes were lost (a gap or a resynchronization) while a block was
    /// open; the partial block is dropped.
    #[error("field block lost to a gap")]
    Lost,
}

/// A reassembled HEADERS field block (§4.3): the HPACK bytes of the
/// HEADERS frame and its CONTINUATION frames, padding removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderBlock {
    pub stream_id: u32,
    /// Raw HPACK (RFC 7541) field block.
    pub fragment: Vec<u8>,
    /// END_STREAM of the HEADERS frame (§6.2: CONTINUATION has none).
    pub end_stream: bool,
    pub priority: Option<PrioritySpec>,
}

/// What [`FrameDecoder`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameEvent {
    /// The client connection preface (§3.4) at the start of the stream.
    Preface,
    /// A frame other than HEADERS / PUSH_PROMISE / CONTINUATION.
    Frame(Frame),
    /// A complete HEADERS (+ CONTINUATION*) field block.
    HeaderBlock(HeaderBlock),
    /// A complete PUSH_PROMISE (+ CONTINUATION*) field block (§6.6; gRPC
    /// never pushes, so this is only reported).
    PushPromise {
        stream_id: u32,
        promised_stream_id: u32,
        fragment: Vec<u8>,
    },
    /// A well-framed but invalid frame; decoding continues after it.
    Malformed {
        header: FrameHeader,
        error: FrameError,
    },
    /// A field block could not be reassembled.
    BlockError { stream_id: u32, error: BlockError },
    /// `skipped` bytes were dropped (garbage, a mid-stream start, or partial
    /// state dropped by a gap) before the next frame.
    Resync { skipped: usize },
}

/// A bad [`FrameDecoder::with_config`] / [`FrameDecoder::set_max_frame_size`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameConfigError {
    #[error("max frame size {0} is outside {DEFAULT_MAX_FRAME_SIZE}..={MAX_MAX_FRAME_SIZE}")]
    MaxFrameSize(u32),
    #[error("max header block size must be positive")]
    MaxHeaderBlock,
}

/// Where the client preface stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefaceState {
    /// At the stream start, this many preface bytes matched so far (held
    /// here, not in the framer).
    Matching(usize),
    Done,
}

/// An open field block.
#[derive(Debug)]
enum Block {
    None,
    Headers {
        stream_id: u32,
        end_stream: bool,
        priority: Option<PrioritySpec>,
        fragment: Vec<u8>,
    },
    Push {
        stream_id: u32,
        promised_stream_id: u32,
        fragment: Vec<u8>,
    },
    /// Too large: skip its CONTINUATION frames until END_HEADERS.
    Discarding {
        stream_id: u32,
    },
}

impl Block {
    fn stream_id(&self) -> Option<u32> {
        match self {
            Block::None => None,
            Block::Headers { stream_id, .. }
            | Block::Push { stream_id, .. }
            | Block::Discarding { stream_id } => Some(*stream_id),
        }
    }

    fn held(&self) -> usize {
        match self {
            Block::Headers { fragment, .. } | Block::Push { fragment, .. } => fragment.len(),
            Block::None | Block::Discarding { .. } => 0,
        }
    }
}

/// Decodes one direction of an HTTP/2 connection into frames and field
/// blocks.
///
/// Feed the bytes of each chunk with [`FrameDecoder::push`], call
/// [`FrameDecoder::gap`] where bytes were lost, and drain events with
/// [`Iterator::next`] (or [`FrameDecoder::next_with_end`]) after each push.
/// Partial state is bounded by [`FrameDecoder::max_buffered`]: one frame
/// (header + max frame size) or the hunt window, plus one field block
/// (default 256 KiB), plus the 24-byte preface.
///
/// The maximum frame size is the receiver's SETTINGS_MAX_FRAME_SIZE
/// (§4.2, §6.5.2), i.e. what the *other* direction announced; a later stage
/// that sees it calls [`FrameDecoder::set_max_frame_size`]. Until then the
/// protocol default, 16384, applies.
///
/// A new decoder accepts the client preface at offset 0, then hunts for a
/// frame boundary, so it works from the first byte of either direction
/// (the first frame is accepted at offset 0 without a `Resync`) and when
/// attached mid-stream.
///
/// Resynchronization heuristic (the NRI framer's, with this header check):
/// a candidate header must have a length within the maximum frame size, a
/// defined type (0..=9), only flags defined for that type, a length allowed
/// for the type (PRIORITY 5, RST_STREAM / WINDOW_UPDATE 4, PING 8, SETTINGS a
/// multiple of 6 or 0 with ACK, GOAWAY >= 8, room for Pad Length and
/// priority fields), no empty frame but an END_STREAM DATA or a SETTINGS,
/// no HEADERS / PUSH_PROMISE / CONTINUATION without END_HEADERS shorter than
/// 16384 (encoders only continue full frames), the reserved bit clear, and
/// stream identifier 0 exactly for SETTINGS / PING / GOAWAY, odd for the
/// others (gRPC streams are client-initiated, §5.1.1), 0 or odd for
/// WINDOW_UPDATE. It is accepted
/// when the next header (at offset + 9 + length) is buffered and equally
/// plausible or, before the next header arrives, when the whole payload is
/// buffered and valid for the type (zero padding, known error codes and
/// settings, non-zero window increment). Otherwise it waits, within a 64 KiB
/// window. A field block cut by the resynchronization is reported as
/// [`BlockError::Lost`]; CONTINUATION frames of a block whose start was
/// skipped are reported as [`BlockError::UnexpectedContinuation`].
pub struct FrameDecoder {
    framer: Framer<H2Layout>,
    preface: PrefaceState,
    /// Stream offset of the framer's first byte (24 after a preface).
    framer_base: u64,
    block: Block,
    max_header_block: usize,
    out: VecDeque<(FrameEvent, Option<u64>)>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("max_frame_size", &self.max_frame_size())
            .field("max_header_block", &self.max_header_block)
            .field("buffered", &self.buffered())
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

impl FrameDecoder {
    /// A decoder with the default maximum frame size (16384) and header
    /// block bound (256 KiB).
    pub fn new() -> Self {
        Self::build(DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_HEADER_BLOCK)
    }

    /// A decoder with another maximum frame size (16384..=2^24-1, §6.5.2)
    /// or header block bound.
    pub fn with_config(
        max_frame_size: u32,
        max_header_block: usize,
    ) -> Result<Self, FrameConfigError> {
        check_max_frame_size(max_frame_size)?;
        if max_header_block == 0 {
            return Err(FrameConfigError::MaxHeaderBlock);
        }
        Ok(Self::build(max_frame_size, max_header_block))
    }

    fn build(max_frame_size: u32, max_header_block: usize) -> Self {
        FrameDecoder {
            framer: Framer::new(
                H2Layout {
                    max_frame: Cell::new(max_frame_size as usize),
                },
                DEFAULT_HUNT_WINDOW,
            ),
            preface: PrefaceState::Matching(0),
            framer_base: 0,
            block: Block::None,
            max_header_block,
            out: VecDeque::new(),
        }
    }

    /// The current maximum frame payload.
    pub fn max_frame_size(&self) -> u32 {
        self.framer.layout().max_frame.get() as u32
    }

    /// Apply the SETTINGS_MAX_FRAME_SIZE the other direction announced
    /// (§6.5.2; takes effect for frames not yet decoded). Values outside
    /// 16384..=2^24-1 are a PROTOCOL_ERROR of the peer and are refused.
    /// Lowering it below a partial frame already held drops that frame (as a
    /// gap would).
    pub fn set_max_frame_size(&mut self, size: u32) -> Result<(), FrameConfigError> {
        check_max_frame_size(size)?;
        self.framer.layout().max_frame.set(size as usize);
        if self.framer.buffered() > self.framer.max_buffered() {
            self.gap();
        }
        Ok(())
    }

    /// Append the bytes of one chunk and decode what can be decoded.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if let PrefaceState::Matching(n) = self.preface {
            let want = &PREFACE[n..];
            let k = want.len().min(bytes.len());
            if bytes[..k] == want[..k] {
                if n + k < PREFACE.len() {
                    self.preface = PrefaceState::Matching(n + k);
                    return;
                }
                self.preface = PrefaceState::Done;
                self.framer_base = PREFACE.len() as u64;
                self.out
                    .push_back((FrameEvent::Preface, Some(PREFACE.len() as u64)));
                bytes = &bytes[k..];
            } else {
                // Not a preface (server direction): the held bytes are
                // the start of the frame stream.
                self.preface = PrefaceState::Done;
                self.framer.push(&PREFACE[..n]);
            }
        }
        self.framer.push(bytes);
        self.drain();
    }

    /// Bytes were lost here: drop partial state and resynchronize. The
    /// dropped bytes are counted in the next [`FrameEvent::Resync`]; an open
    /// field block is reported as [`BlockError::Lost`].
    pub fn gap(&mut self) {
        if let PrefaceState::Matching(n) = self.preface {
            // A preface can only start the stream; the held bytes become
            // dropped stream bytes.
            self.preface = PrefaceState::Done;
            self.framer.push(&PREFACE[..n]);
            self.drain();
        }
        self.framer.gap();
        self.lose_block();
    }

    /// Bytes held as partial state (not counting queued events).
    pub fn buffered(&self) -> usize {
        let preface = match self.preface {
            PrefaceState::Matching(n) => n,
            PrefaceState::Done => 0,
        };
        self.framer.buffered() + self.block.held() + preface
    }

    /// Upper bound of [`FrameDecoder::buffered`].
    pub fn max_buffered(&self) -> usize {
        self.framer.max_buffered() + self.max_header_block + PREFACE.len()
    }

    /// `false` while hunting for a frame boundary.
    pub fn is_synced(&self) -> bool {
        self.framer.is_synced()
    }

    /// The next decoded event with the stream offset just past its last byte
    /// (bytes pushed so far count from 0): for a field block, its last
    /// frame; for a block error, the frame that caused it. `None` for
    /// `Resync` and [`BlockError::Lost`].
    pub fn next_with_end(&mut self) -> Option<(FrameEvent, Option<u64>)> {
        self.out.pop_front()
    }

    fn lose_block(&mut self) {
        if let Some(stream_id) = self.block.stream_id() {
            self.block = Block::None;
            self.out.push_back((
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::Lost,
                },
                None,
            ));
        }
    }

    fn drain(&mut self) {
        while let Some(raw) = self.framer.next() {
            match raw {
                RawEvent::Resync { skipped } => {
                    self.lose_block();
                    self.out.push_back((FrameEvent::Resync { skipped }, None));
                }
                RawEvent::Frame {
                    header,
                    payload,
                    end,
                } => {
                    let end = self.framer_base + end;
                    // The framer hands out MAX_HEADER (10) bytes.
                    if let Some(h) = FrameHeader::parse(&header) {
                        self.frame(h, &payload, end);
                    }
                }
            }
        }
    }

    fn emit(&mut self, ev: FrameEvent, end: u64) {
        self.out.push_back((ev, Some(end)));
    }

    /// A frame that is not a CONTINUATION arrived: an open block is cut.
    fn interrupt(&mut self, h: &FrameHeader, end: u64) {
        if let Some(stream_id) = self.block.stream_id() {
            self.block = Block::None;
            self.emit(
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::Interrupted {
                        frame_type: h.frame_type,
                        by_stream_id: h.stream_id,
                    },
                },
                end,
            );
        }
    }

    fn frame(&mut self, h: FrameHeader, payload: &[u8], end: u64) {
        let frame = match parse_frame(&h, payload) {
            Ok(f) => f,
            Err(error) => {
                self.interrupt(&h, end);
                self.emit(FrameEvent::Malformed { header: h, error }, end);
                return;
            }
        };
        match frame {
            Frame::Headers {
                stream_id,
                end_stream,
                end_headers,
                priority,
                fragment,
            } => {
                self.interrupt(&h, end);
                self.block = Block::Headers {
                    stream_id,
                    end_stream,
                    priority,
                    fragment: Vec::new(),
                };
                self.extend_block(stream_id, &fragment, end_headers, end);
            }
            Frame::PushPromise {
                stream_id,
                promised_stream_id,
                end_headers,
                fragment,
            } => {
                self.interrupt(&h, end);
                self.block = Block::Push {
                    stream_id,
                    promised_stream_id,
                    fragment: Vec::new(),
                };
                self.extend_block(stream_id, &fragment, end_headers, end);
            }
            Frame::Continuation {
                stream_id,
                end_headers,
                fragment,
            } => match self.block.stream_id() {
                Some(open) if open == stream_id => {
                    self.extend_block(stream_id, &fragment, end_headers, end);
                }
                // §6.10: a CONTINUATION of another stream is as much an
                // interruption as any other frame; it cannot start a block,
                // so it goes with the cut one.
                Some(_) => self.interrupt(&h, end),
                None => self.emit(
                    FrameEvent::BlockError {
                        stream_id,
                        error: BlockError::UnexpectedContinuation,
                    },
                    end,
                ),
            },
            other => {
                self.interrupt(&h, end);
                self.emit(FrameEvent::Frame(other), end);
            }
        }
    }

    /// Append a fragment to the open block (whose stream is `stream_id`)
    /// and finish it on END_HEADERS.
    fn extend_block(&mut self, stream_id: u32, fragment: &[u8], end_headers: bool, end: u64) {
        let limit = self.max_header_block;
        let too_large = match &mut self.block {
            Block::Headers { fragment: f, .. } | Block::Push { fragment: f, .. } => {
                let size = f.len().saturating_add(fragment.len());
                if size > limit {
                    Some(size)
                } else {
                    f.extend_from_slice(fragment);
                    None
                }
            }
            Block::Discarding { .. } | Block::None => None,
        };
        if let Some(size) = too_large {
            self.block = Block::Discarding { stream_id };
            self.emit(
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::TooLarge { size, limit },
                },
                end,
            );
        }
        if !end_headers {
            return;
        }
        match std::mem::replace(&mut self.block, Block::None) {
            Block::Headers {
                stream_id,
                end_stream,
                priority,
                fragment,
            } => self.emit(
                FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id,
                    fragment,
                    end_stream,
                    priority,
                }),
                end,
            ),
            Block::Push {
                stream_id,
                promised_stream_id,
                fragment,
            } => self.emit(
                FrameEvent::PushPromise {
                    stream_id,
                    promised_stream_id,
                    fragment,
                },
                end,
            ),
            Block::Discarding { .. } | Block::None => {}
        }
    }
}

fn check_max_frame_size(size: u32) -> Result<(), FrameConfigError> {
    if (DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(FrameConfigError::MaxFrameSize(size))
    }
}

impl Iterator for FrameDecoder {
    type Item = FrameEvent;

    /// The next decoded event, or `None` until more bytes are pushed.
    fn next(&mut self) -> Option<FrameEvent> {
        self.next_with_end().map(|(e, _)| e)
    }
}

#[cfg(test)]
mod tests;
