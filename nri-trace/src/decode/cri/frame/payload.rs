//! The per-type payloads of HTTP/2 frames (RFC 9113 §6): [`Frame`], the
//! length, padding and stream-identifier rules of each type ([`FrameError`]
//! when one is broken), [`parse_frame`], and the SETTINGS identifiers and
//! error codes the payloads carry.

use super::header::{
    be32, u31, FrameHeader, FrameType, StreamRule, FLAG_ACK, FLAG_END_HEADERS, FLAG_END_STREAM,
    FLAG_PADDED, FLAG_PRIORITY,
};

/// SETTINGS_HEADER_TABLE_SIZE (§6.5.2): bounds the peer's HPACK decoder.
pub(crate) const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// SETTINGS_ENABLE_PUSH (§6.5.2).
pub(super) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
/// SETTINGS_MAX_CONCURRENT_STREAMS (§6.5.2).
pub(super) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// SETTINGS_INITIAL_WINDOW_SIZE (§6.5.2).
pub(super) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
/// SETTINGS_MAX_FRAME_SIZE (§6.5.2): bounds the frames the peer may send.
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
/// SETTINGS_MAX_HEADER_LIST_SIZE (§6.5.2).
pub(super) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 §3).
pub(super) const SETTINGS_ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
/// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218 §2.1).
pub(super) const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// Largest error code defined by RFC 9113 §7 (HTTP_1_1_REQUIRED).
pub(super) const MAX_KNOWN_ERROR_CODE: u32 = 0xd;

/// Name of an error code of RFC 9113 §7 (RST_STREAM, GOAWAY).
pub(crate) fn error_code_name(code: u32) -> Option<&'static str> {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    NAMES.get(code as usize).copied()
}

/// Stream dependency and weight of HEADERS / PRIORITY (§5.3.2 of RFC 7540;
/// deprecated by RFC 9113 §5.3.2 but still parsed, §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrioritySpec {
    pub exclusive: bool,
    pub stream_dependency: u32,
    /// Wire value: the weight is this plus one (1..=256).
    pub weight: u8,
}

/// One decoded frame.
///
/// [`FrameDecoder`] never yields `Headers`, `PushPromise` or
/// `Continuation` as [`FrameEvent::Frame`]: it folds them into
/// [`FrameEvent::HeaderBlock`] / [`FrameEvent::PushPromise`]. They are
/// variants here so that [`parse_frame`] decodes every frame.
///
/// [`FrameDecoder`]: super::FrameDecoder
/// [`FrameEvent::Frame`]: super::FrameEvent::Frame
/// [`FrameEvent::HeaderBlock`]: super::FrameEvent::HeaderBlock
/// [`FrameEvent::PushPromise`]: super::FrameEvent::PushPromise
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// §6.1. `padding` counts the padding octets (not the Pad Length one).
    Data {
        stream_id: u32,
        end_stream: bool,
        data: Vec<u8>,
        padding: usize,
    },
    /// §6.2.
    Headers {
        stream_id: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<PrioritySpec>,
        fragment: Vec<u8>,
    },
    /// §6.3.
    Priority {
        stream_id: u32,
        priority: PrioritySpec,
    },
    /// §6.4.
    RstStream { stream_id: u32, error_code: u32 },
    /// §6.5: `(identifier, value)` pairs in wire order (later ones win,
    /// §6.5.3); unknown identifiers are kept (§6.5.2 says ignore them).
    Settings {
        ack: bool,
        settings: Vec<(u16, u32)>,
    },
    /// §6.6.
    PushPromise {
        stream_id: u32,
        promised_stream_id: u32,
        end_headers: bool,
        fragment: Vec<u8>,
    },
    /// §6.7.
    Ping { ack: bool, data: [u8; 8] },
    /// §6.8.
    GoAway {
        last_stream_id: u32,
        error_code: u32,
        debug_data: Vec<u8>,
    },
    /// §6.9. An increment of 0 is a protocol error for the receiver, but
    /// well framed: it is reported as is.
    WindowUpdate { stream_id: u32, increment: u32 },
    /// §6.10.
    Continuation {
        stream_id: u32,
        end_headers: bool,
        fragment: Vec<u8>,
    },
    /// An extension frame type (§4.1, §5.5): reported and skipped.
    Unknown {
        frame_type: u8,
        flags: u8,
        stream_id: u32,
        payload: Vec<u8>,
    },
}

/// Why a frame whose header framed it correctly is still invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Payload length not allowed for the type (FRAME_SIZE_ERROR: §6.3,
    /// §6.4, §6.5, §6.7, §6.9; too short for its fixed fields: §4.2).
    #[error("payload length {length} is invalid for {frame_type:?}")]
    Length { frame_type: FrameType, length: u32 },
    /// Padding longer than the room left (PROTOCOL_ERROR: §6.1, §6.2, §6.6).
    #[error("pad length {pad_length} exceeds the payload")]
    Padding { pad_length: u8 },
    /// Stream identifier 0 on a stream frame, or non-zero on a connection
    /// frame (PROTOCOL_ERROR: §6.1-§6.10).
    #[error("stream identifier {stream_id} is invalid for {frame_type:?}")]
    StreamId {
        frame_type: FrameType,
        stream_id: u32,
    },
}

/// Length rule of a type given its flags (§6), before looking at padding.
pub(super) fn length_ok(ty: FrameType, flags: u8, len: u32) -> bool {
    let padded = u32::from(flags & FLAG_PADDED != 0);
    match ty {
        FrameType::Data => len >= padded,
        FrameType::Headers => len >= padded + if flags & FLAG_PRIORITY != 0 { 5 } else { 0 },
        FrameType::Priority => len == 5,
        FrameType::RstStream | FrameType::WindowUpdate => len == 4,
        // §6.5: an ACK carries nothing; otherwise a multiple of 6 octets.
        FrameType::Settings => {
            if flags & FLAG_ACK != 0 {
                len == 0
            } else {
                len.is_multiple_of(6)
            }
        }
        FrameType::PushPromise => len >= padded + 4,
        FrameType::Ping => len == 8,
        FrameType::GoAway => len >= 8,
        FrameType::Continuation | FrameType::Unknown(_) => true,
    }
}

fn stream_ok(ty: FrameType, stream_id: u32) -> bool {
    match ty.stream_rule() {
        StreamRule::Zero => stream_id == 0,
        StreamRule::NonZero => stream_id != 0,
        StreamRule::Any => true,
    }
}

/// Validate a frame against its header without allocating; returns the
/// byte range of the content (data / field block fragment) after
/// stripping the Pad Length and fixed fields, and the padding.
pub(super) fn check(h: &FrameHeader, payload: &[u8]) -> Result<(usize, usize, usize), FrameError> {
    let len = payload.len();
    if len as u64 != u64::from(h.length) || !length_ok(h.frame_type, h.flags, h.length) {
        return Err(FrameError::Length {
            frame_type: h.frame_type,
            length: len as u32,
        });
    }
    if !stream_ok(h.frame_type, h.stream_id) {
        return Err(FrameError::StreamId {
            frame_type: h.frame_type,
            stream_id: h.stream_id,
        });
    }
    let fixed = match h.frame_type {
        FrameType::Headers if h.has(FLAG_PRIORITY) => 5,
        FrameType::PushPromise => 4,
        _ => 0,
    };
    let paddable = matches!(
        h.frame_type,
        FrameType::Data | FrameType::Headers | FrameType::PushPromise
    );
    if paddable && h.has(FLAG_PADDED) {
        // length_ok guaranteed the Pad Length octet and fixed fields.
        let pad = payload[0];
        // §6.1/§6.2/§6.6: padding that reaches into (or past) the fixed
        // fields is a PROTOCOL_ERROR; an empty content is allowed.
        let start = 1 + fixed;
        if start + pad as usize > len {
            return Err(FrameError::Padding { pad_length: pad });
        }
        Ok((start, len - pad as usize, pad as usize))
    } else {
        Ok((fixed, len, 0))
    }
}

fn priority_at(b: &[u8]) -> PrioritySpec {
    PrioritySpec {
        exclusive: b[0] & 0x80 != 0,
        stream_dependency: u31(&b[..4]),
        weight: b[4],
    }
}

/// Decode one frame from its header and exactly `header.length` payload
/// bytes. Undefined flags are ignored (§4.1).
pub fn parse_frame(h: &FrameHeader, payload: &[u8]) -> Result<Frame, FrameError> {
    let (start, end, padding) = check(h, payload)?;
    let content = payload[start..end].to_vec();
    let pad_off = usize::from(h.has(FLAG_PADDED));
    Ok(match h.frame_type {
        FrameType::Data => Frame::Data {
            stream_id: h.stream_id,
            end_stream: h.has(FLAG_END_STREAM),
            data: content,
            padding,
        },
        FrameType::Headers => Frame::Headers {
            stream_id: h.stream_id,
            end_stream: h.has(FLAG_END_STREAM),
            end_headers: h.has(FLAG_END_HEADERS),
            priority: h
                .has(FLAG_PRIORITY)
                .then(|| priority_at(&payload[pad_off..])),
            fragment: content,
        },
        FrameType::Priority => Frame::Priority {
            stream_id: h.stream_id,
            priority: priority_at(payload),
        },
        FrameType::RstStream => Frame::RstStream {
            stream_id: h.stream_id,
            error_code: be32(payload),
        },
        FrameType::Settings => Frame::Settings {
            ack: h.has(FLAG_ACK),
            settings: payload
                .chunks_exact(6)
                .map(|c| (u16::from_be_bytes([c[0], c[1]]), be32(&c[2..])))
                .collect(),
        },
        FrameType::PushPromise => Frame::PushPromise {
            stream_id: h.stream_id,
            promised_stream_id: u31(&payload[pad_off..]),
            end_headers: h.has(FLAG_END_HEADERS),
            fragment: content,
        },
        FrameType::Ping => {
            let mut data = [0u8; 8];
            data.copy_from_slice(payload);
            Frame::Ping {
                ack: h.has(FLAG_ACK),
                data,
            }
        }
        FrameType::GoAway => Frame::GoAway {
            last_stream_id: u31(payload),
            error_code: be32(&payload[4..]),
            debug_data: payload[8..].to_vec(),
        },
        FrameType::WindowUpdate => Frame::WindowUpdate {
            stream_id: h.stream_id,
            increment: u31(payload),
        },
        FrameType::Continuation => Frame::Continuation {
            stream_id: h.stream_id,
            end_headers: h.has(FLAG_END_HEADERS),
            fragment: content,
        },
        FrameType::Unknown(t) => Frame::Unknown {
            frame_type: t,
            flags: h.flags,
            stream_id: h.stream_id,
            payload: content,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::cri::frame::header::HEADER_LEN;
    use crate::decode::cri::frame::test_frames::tf;

    #[test]
    fn parse_frame_matches_rfc_layouts() {
        // §6.8 GOAWAY with the reserved bit set on last-stream-id (ignored)
        // and ENHANCE_YOUR_CALM.
        let b = tf(7, 0, 0, &[0x80, 0, 0, 9, 0, 0, 0, 0xb, b'x']);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            h,
            FrameHeader {
                length: 9,
                frame_type: FrameType::GoAway,
                flags: 0,
                stream_id: 0
            }
        );
        assert_eq!(
            parse_frame(&h, &b[HEADER_LEN..]),
            Ok(Frame::GoAway {
                last_stream_id: 9,
                error_code: 0xb,
                debug_data: b"x".to_vec()
            })
        );
        assert_eq!(error_code_name(0xb), Some("ENHANCE_YOUR_CALM"));
        assert_eq!(error_code_name(0xe), None);
        // A declared length that differs from the payload given.
        assert!(parse_frame(&h, &b[HEADER_LEN + 1..]).is_err());
        // §6.1: a padded DATA may carry no data at all.
        let b = tf(0, FLAG_PADDED, 1, &[2, 0, 0]);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            parse_frame(&h, &b[HEADER_LEN..]),
            Ok(Frame::Data {
                stream_id: 1,
                end_stream: false,
                data: vec![],
                padding: 2
            })
        );
        for t in 0..=255u8 {
            assert_eq!(FrameType::from_u8(t).as_u8(), t);
        }
    }
}
