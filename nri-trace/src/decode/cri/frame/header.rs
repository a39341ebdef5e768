//! The HTTP/2 frame header (RFC 9113 §4.1): its length, type, flags and
//! stream identifier ([`FrameHeader`], [`FrameType`]), the frame size bounds
//! and flags, which stream identifiers each type may carry, and the
//! big-endian readers of the wire's integers.

/// Length of a frame header (§4.1).
pub const HEADER_LEN: usize = 9;
/// Initial SETTINGS_MAX_FRAME_SIZE, and the smallest value allowed (§6.5.2).
pub(super) const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 14;
/// Largest SETTINGS_MAX_FRAME_SIZE allowed (§6.5.2): 2^24 - 1.
pub(super) const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;

/// Flag END_STREAM (DATA, HEADERS) (§6.1, §6.2).
pub(super) const FLAG_END_STREAM: u8 = 0x01;
/// Flag ACK (SETTINGS, PING) (§6.5, §6.7).
pub(super) const FLAG_ACK: u8 = 0x01;
/// Flag END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION) (§6.2).
pub(super) const FLAG_END_HEADERS: u8 = 0x04;
/// Flag PADDED (DATA, HEADERS, PUSH_PROMISE) (§6.1).
pub(super) const FLAG_PADDED: u8 = 0x08;
/// Flag PRIORITY (HEADERS) (§6.2).
pub(super) const FLAG_PRIORITY: u8 = 0x20;

/// Frame type (§6; §11.2 registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Data,
    Headers,
    Priority,
    RstStream,
    Settings,
    PushPromise,
    Ping,
    GoAway,
    WindowUpdate,
    Continuation,
    /// An extension type: §4.1 / §5.5 say to ignore and discard it.
    Unknown(u8),
}

/// Which stream identifiers a frame type may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamRule {
    /// Connection-level only (SETTINGS §6.5, PING §6.7, GOAWAY §6.8).
    Zero,
    /// Stream-level only (DATA §6.1, HEADERS §6.2, PRIORITY §6.3,
    /// RST_STREAM §6.4, PUSH_PROMISE §6.6, CONTINUATION §6.10).
    NonZero,
    /// Either (WINDOW_UPDATE §6.9, unknown types).
    Any,
}

impl FrameType {
    pub fn from_u8(b: u8) -> Self {
        match b {
            0 => FrameType::Data,
            1 => FrameType::Headers,
            2 => FrameType::Priority,
            3 => FrameType::RstStream,
            4 => FrameType::Settings,
            5 => FrameType::PushPromise,
            6 => FrameType::Ping,
            7 => FrameType::GoAway,
            8 => FrameType::WindowUpdate,
            9 => FrameType::Continuation,
            b => FrameType::Unknown(b),
        }
    }

    pub fn as_u8(self) -> u8 {
        match self {
            FrameType::Data => 0,
            FrameType::Headers => 1,
            FrameType::Priority => 2,
            FrameType::RstStream => 3,
            FrameType::Settings => 4,
            FrameType::PushPromise => 5,
            FrameType::Ping => 6,
            FrameType::GoAway => 7,
            FrameType::WindowUpdate => 8,
            FrameType::Continuation => 9,
            FrameType::Unknown(b) => b,
        }
    }

    /// The flags this type defines (§6). Others must be ignored on receipt
    /// (§4.1) but are never sent, so they count against a hunting
    /// candidate.
    pub fn defined_flags(self) -> u8 {
        match self {
            FrameType::Data => FLAG_END_STREAM | FLAG_PADDED,
            FrameType::Headers => FLAG_END_STREAM | FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
            FrameType::Settings | FrameType::Ping => FLAG_ACK,
            FrameType::PushPromise => FLAG_END_HEADERS | FLAG_PADDED,
            FrameType::Continuation => FLAG_END_HEADERS,
            FrameType::Priority
            | FrameType::RstStream
            | FrameType::GoAway
            | FrameType::WindowUpdate
            | FrameType::Unknown(_) => 0,
        }
    }

    pub(super) fn stream_rule(self) -> StreamRule {
        match self {
            FrameType::Settings | FrameType::Ping | FrameType::GoAway => StreamRule::Zero,
            FrameType::Data
            | FrameType::Headers
            | FrameType::Priority
            | FrameType::RstStream
            | FrameType::PushPromise
            | FrameType::Continuation => StreamRule::NonZero,
            FrameType::WindowUpdate | FrameType::Unknown(_) => StreamRule::Any,
        }
    }
}

/// A decoded frame header (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length (u24).
    pub length: u32,
    pub frame_type: FrameType,
    pub flags: u8,
    /// Stream identifier with the reserved bit cleared (§4.1: "MUST be
    /// ignored when receiving").
    pub stream_id: u32,
}

impl FrameHeader {
    /// Decode the first [`HEADER_LEN`] bytes, if there are that many.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let b = bytes.get(..HEADER_LEN)?;
        Some(FrameHeader {
            length: u24(b),
            frame_type: FrameType::from_u8(b[3]),
            flags: b[4],
            stream_id: u31(&b[5..9]),
        })
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

pub(super) fn u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// A 31-bit identifier with its reserved / exclusive top bit cleared.
pub(super) fn u31(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
}

pub(super) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
