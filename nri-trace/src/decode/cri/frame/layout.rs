//! The framer layout of HTTP/2 frames ([`H2Layout`]): where a frame's
//! payload ends, and while hunting after garbage or a late attach, whether
//! a candidate frame start is plausible (its header) and supported (its
//! payload).

use std::cell::Cell;

use super::header::{
    be32, u24, u31, FrameHeader, FrameType, StreamRule, DEFAULT_MAX_FRAME_SIZE, FLAG_END_HEADERS,
    FLAG_END_STREAM, HEADER_LEN, MAX_MAX_FRAME_SIZE,
};
use super::payload::{
    check, length_ok, MAX_KNOWN_ERROR_CODE, SETTINGS_ENABLE_CONNECT_PROTOCOL, SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE, SETTINGS_NO_RFC7540_PRIORITIES,
};
use crate::decode::framer::Layout;

/// The framer layout of HTTP/2 frames.
///
/// In sync, only the length is checked (§4.2: longer than the maximum frame
/// size is not a frame we can follow); type, flags and stream rules are
/// validated per frame and reported, as §4.1 requires unknown types and
/// flags to be ignored. Hunting is far stricter (see [`FrameDecoder`]).
///
/// [`FrameDecoder`]: super::FrameDecoder
#[derive(Debug)]
pub(super) struct H2Layout {
    /// Current maximum payload; a `Cell` because the framer owns the layout
    /// and only lends it out shared, and the peer's SETTINGS can change it.
    pub(super) max_frame: Cell<usize>,
}

impl Layout for H2Layout {
    fn header_len(&self) -> usize {
        HEADER_LEN
    }

    fn max_payload(&self) -> usize {
        self.max_frame.get()
    }

    fn payload_len(&self, header: &[u8]) -> usize {
        if header.len() < 3 {
            return usize::MAX;
        }
        u24(header) as usize
    }

    fn acceptable(&self, header: &[u8]) -> bool {
        header.len() >= HEADER_LEN && u24(header) as usize <= self.max_frame.get()
    }

    fn plausible_prefix(&self, p: &[u8]) -> bool {
        // Length: its smallest completion (missing bytes zero) must fit.
        if !p.is_empty() {
            let mut b = [0u8; 3];
            let k = p.len().min(3);
            b[..k].copy_from_slice(&p[..k]);
            if u24(&b) as usize > self.max_frame.get() {
                return false;
            }
        }
        let Some(&t) = p.get(3) else {
            return true;
        };
        // Type: a defined one (an extension type is legal but gRPC peers
        // send none, and accepting 246 more values would multiply false
        // positives).
        let ty = FrameType::from_u8(t);
        if matches!(ty, FrameType::Unknown(_)) {
            return false;
        }
        let len = u24(p);
        let Some(&flags) = p.get(4) else {
            return true;
        };
        if flags & !ty.defined_flags() != 0 || !length_ok(ty, flags, len) {
            return false;
        }
        // Empty frames that peers never send: zero runs and payload bytes
        // must not read as them. An empty DATA with END_STREAM (half-close)
        // and an empty SETTINGS (no changes, or an ACK) are real.
        if len == 0 {
            let real = match ty {
                FrameType::Data => flags & FLAG_END_STREAM != 0,
                FrameType::Settings => true,
                _ => false,
            };
            if !real {
                return false;
            }
        }
        // A field block is only continued when its frame is full: encoders
        // (grpc-go, Go x/net/http2, h2, nghttp2) split a block at the max
        // frame size, never below the 16384 minimum (§4.2). A short frame
        // without END_HEADERS is legal (§6.2) but never seen, and zero-rich
        // payloads (SETTINGS values, protobuf) read as one all too easily.
        if matches!(
            ty,
            FrameType::Headers | FrameType::PushPromise | FrameType::Continuation
        ) && flags & FLAG_END_HEADERS == 0
            && len < DEFAULT_MAX_FRAME_SIZE
        {
            return false;
        }
        // Stream identifier: the reserved bit is never sent set (§4.1).
        let sid = &p[5.min(p.len())..p.len().min(HEADER_LEN)];
        if sid.first().is_some_and(|b| b & 0x80 != 0) {
            return false;
        }
        // gRPC streams are all client-initiated, hence odd (§5.1.1: servers
        // initiate even ones only by PUSH_PROMISE, which gRPC never uses).
        // This halves the chance that payload bytes pass for a header.
        let odd = sid.len() < 4 || sid[3] & 1 == 1;
        match ty.stream_rule() {
            StreamRule::Zero => sid.iter().all(|&b| b == 0),
            StreamRule::NonZero => odd,
            StreamRule::Any => odd || sid.iter().all(|&b| b == 0),
        }
    }

    fn payload_evidence(&self, header: &[u8], payload: &[u8]) -> bool {
        // Only a complete, valid payload supports a candidate whose next
        // header is not buffered yet (the framer has already checked the
        // partial next header, if any).
        let Some(h) = FrameHeader::parse(header) else {
            return false;
        };
        if payload.len() as u64 != u64::from(h.length) {
            return false;
        }
        let Ok((_, end, _)) = check(&h, payload) else {
            return false;
        };
        match h.frame_type {
            // §6.1/§6.2/§6.6: padding octets are sent as zero.
            FrameType::Data | FrameType::Headers | FrameType::PushPromise => {
                payload[end..].iter().all(|&b| b == 0)
            }
            FrameType::Priority => u31(payload) != h.stream_id,
            FrameType::RstStream => be32(payload) <= MAX_KNOWN_ERROR_CODE,
            FrameType::GoAway => {
                payload[0] & 0x80 == 0 && be32(&payload[4..]) <= MAX_KNOWN_ERROR_CODE
            }
            FrameType::WindowUpdate => payload[0] & 0x80 == 0 && u31(payload) != 0,
            FrameType::Settings => payload.chunks_exact(6).all(|c| {
                let v = be32(&c[2..]);
                match u16::from_be_bytes([c[0], c[1]]) {
                    SETTINGS_ENABLE_PUSH
                    | SETTINGS_ENABLE_CONNECT_PROTOCOL
                    | SETTINGS_NO_RFC7540_PRIORITIES => v <= 1,
                    SETTINGS_INITIAL_WINDOW_SIZE => v <= 0x7fff_ffff,
                    SETTINGS_MAX_FRAME_SIZE => {
                        (DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&v)
                    }
                    SETTINGS_HEADER_TABLE_SIZE
                    | SETTINGS_MAX_CONCURRENT_STREAMS
                    | SETTINGS_MAX_HEADER_LIST_SIZE => true,
                    _ => false,
                }
            }),
            FrameType::Ping | FrameType::Continuation => true,
            FrameType::Unknown(_) => false,
        }
    }
}
