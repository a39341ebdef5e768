//! The gRPC layer over HTTP/2 (grpc-go's `doc/PROTOCOL-HTTP2.md`, "gRPC
//! over HTTP2"), as pure functions and types fed by the [`super::frame`] and
//! [`super::hpack`] decoders:
//!
//! - [`MessageReassembler`]: the Length-Prefixed-Message framing of one
//!   direction of one HTTP/2 stream ("Requests" / "Responses" sections):
//!
//!   ```text
//!   Length-Prefixed-Message → Compressed-Flag Message-Length Message
//!   Compressed-Flag → 0 / 1   ; 1 byte unsigned integer
//!   Message-Length  → {length of Message}  ; 4 bytes big-endian unsigned
//!   ```
//!
//!   "DATA frame boundaries have no relation to Length-Prefixed-Message
//!   boundaries" ("HTTP2 Transport Mapping" / "Data Frames"): a message can
//!   span DATA frames and a DATA frame can hold several messages.
//! - [`RequestHead::from_fields`] and [`Trailers::from_fields`]: the fields
//!   of Request-Headers, Response-Headers, Trailers and Trailers-Only that
//!   the tracer cares about, from a decoded (name, value) list.
//! - [`grpc_status_name`]: the canonical status code names
//!   (grpc-go's `doc/statuscodes.md`).

use crate::decode::trace_context::{find_traceparent, TraceContext};
use std::collections::VecDeque;
use std::time::Duration;

/// Length of the Compressed-Flag + Message-Length prefix ("Requests").
pub(crate) const PREFIX_LEN: usize = 5;

/// Default bound on a declared Message-Length: 16 MiB. grpc-go's default
/// receive limit is 4 MiB; kubelet raises its CRI client's limit to 16 MiB.
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One complete Length-Prefixed-Message ("Requests").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcMessage {
    /// Compressed-Flag = 1: the payload is compressed with the stream's
    /// `grpc-encoding` ("Requests": Message-Encoding).
    pub compressed: bool,
    /// The Message bytes (still compressed when `compressed`).
    pub payload: Vec<u8>,
}

/// A problem in the message framing of one stream direction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// A Message-Length above the bound: the message is refused and its
    /// bytes are skipped (counted, never buffered) to stay in sync.
    #[error("declared message length {declared} exceeds the bound of {limit}")]
    TooLarge { declared: u32, limit: usize },
    /// A Compressed-Flag other than 0 or 1 ("Requests": `0 / 1`): the
    /// framing is not trusted any more; the rest of the stream is dropped.
    #[error("invalid compressed flag {flag:#04x}")]
    InvalidFlag { flag: u8 },
    /// The stream ended mid-message. `declared` is `None` when the stream
    /// ended inside the 5-byte prefix; `received` counts the bytes of the
    /// partial message (prefix included).
    #[error("stream ended mid-message ({received} bytes of {declared:?} + prefix)")]
    Truncated {
        declared: Option<u32>,
        received: usize,
    },
    /// [`MessageReassembler::gap`] dropped `bytes` bytes of partial state.
    #[error("{bytes} bytes of a partial message lost to a gap")]
    Lost { bytes: usize },
}

/// What [`MessageReassembler`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageEvent {
    Message(GrpcMessage),
    Error(MessageError),
}

#[derive(Debug)]
enum State {
    /// Reading the 5-byte prefix; `n` bytes held in `prefix`.
    Prefix { prefix: [u8; PREFIX_LEN], n: usize },
    /// Reading a message body of `len` bytes; `buf` grows as bytes arrive.
    Body {
        compressed: bool,
        len: usize,
        buf: Vec<u8>,
    },
    /// Skipping the rest of a refused (oversize) message.
    Skip { remaining: usize },
    /// Framing lost (invalid flag): drop everything until the stream ends.
    Desynced,
}

impl State {
    fn start() -> Self {
        State::Prefix {
            prefix: [0; PREFIX_LEN],
            n: 0,
        }
    }
}

/// Reassembles the Length-Prefixed-Messages of one direction of one HTTP/2
/// stream from its DATA frame payloads (padding removed), in order.
///
/// Memory is bounded by what has arrived, never by a declared length: a
/// body buffer grows as its bytes are pushed, and a Message-Length above
/// the bound is refused ([`MessageError::TooLarge`]) before any byte of it
/// is held.
#[derive(Debug)]
pub struct MessageReassembler {
    state: State,
    max_message: usize,
    out: VecDeque<MessageEvent>,
}

impl Default for MessageReassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl MessageReassembler {
    /// A reassembler with the [`DEFAULT_MAX_MESSAGE`] bound.
    pub fn new() -> Self {
        Self::with_max_message(DEFAULT_MAX_MESSAGE)
    }

    /// A reassembler refusing declared lengths above `max_message`.
    pub fn with_max_message(max_message: usize) -> Self {
        MessageReassembler {
            state: State::start(),
            max_message,
            out: VecDeque::new(),
        }
    }

    /// The bound on a declared Message-Length.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Feed the payload of the next DATA frame of the stream direction.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Prefix { prefix, n } => {
                    let k = (PREFIX_LEN - *n).min(bytes.len());
                    prefix[*n..*n + k].copy_from_slice(&bytes[..k]);
                    *n += k;
                    bytes = &bytes[k..];
                    if *n == PREFIX_LEN {
                        let p = *prefix;
                        self.prefix_done(p);
                    }
                }
                State::Body {
                    compressed,
                    len,
                    buf,
                } => {
                    let k = (*len - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..k]);
                    bytes = &bytes[k..];
                    if buf.len() == *len {
                        let msg = GrpcMessage {
                            compressed: *compressed,
                            payload: std::mem::take(buf),
                        };
                        self.out.push_back(MessageEvent::Message(msg));
                        self.state = State::start();
                    }
                }
                State::Skip { remaining } => {
                    let k = (*remaining).min(bytes.len());
                    *remaining -= k;
                    bytes = &bytes[k..];
                    if *remaining == 0 {
                        self.state = State::start();
                    }
                }
                State::Desynced => return,
            }
        }
    }

    fn prefix_done(&mut self, p: [u8; PREFIX_LEN]) {
        let declared = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
        if p[0] > 1 {
            self.out
                .push_back(MessageEvent::Error(MessageError::InvalidFlag {
                    flag: p[0],
                }));
            self.state = State::Desynced;
            return;
        }
        let len = declared as usize;
        if len > self.max_message {
            self.out
                .push_back(MessageEvent::Error(MessageError::TooLarge {
                    declared,
                    limit: self.max_message,
                }));
            self.state = State::Skip { remaining: len };
            return;
        }
        if len == 0 {
            self.out.push_back(MessageEvent::Message(GrpcMessage {
                compressed: p[0] == 1,
                payload: Vec::new(),
            }));
            self.state = State::start();
            return;
        }
        self.state = State::Body {
            compressed: p[0] == 1,
            len,
            buf: Vec::new(),
        };
    }

    /// The stream direction ended (END_STREAM): a partial message is
    /// reported as [`MessageError::Truncated`]. The reassembler is reset.
    pub fn end_stream(&mut self) {
        let err = match &self.state {
            State::Prefix { n, .. } if *n > 0 => Some(MessageError::Truncated {
                declared: None,
                received: *n,
            }),
            State::Body { len, buf, .. } => Some(MessageError::Truncated {
                declared: Some(*len as u32),
                received: PREFIX_LEN + buf.len(),
            }),
            // An oversize message was already reported; a desynced stream
            // too.
            _ => None,
        };
        if let Some(e) = err {
            self.out.push_back(MessageEvent::Error(e));
        }
        self.state = State::start();
    }

    /// Bytes of the stream direction were lost: drop the partial message
    /// (reported as [`MessageError::Lost`] when it held bytes). The next
    /// pushed byte is taken as the start of a message; an implausible
    /// prefix then shows up as [`MessageError::InvalidFlag`] or
    /// [`MessageError::TooLarge`].
    pub fn gap(&mut self) {
        let bytes = self.buffered();
        if bytes > 0 {
            self.out
                .push_back(MessageEvent::Error(MessageError::Lost { bytes }));
        }
        self.state = State::start();
    }

    /// Bytes held as partial state (prefix and body bytes so far).
    pub fn buffered(&self) -> usize {
        match &self.state {
            State::Prefix { n, .. } => *n,
            State::Body { buf, .. } => PREFIX_LEN + buf.len(),
            State::Skip { .. } | State::Desynced => 0,
        }
    }

    /// The next event, oldest first.
    pub fn next_event(&mut self) -> Option<MessageEvent> {
        self.out.pop_front()
    }
}

// ---- Headers ("Requests", "Responses"). ----

fn find<'a, N: AsRef<[u8]>, V: AsRef<[u8]>>(fields: &'a [(N, V)], name: &str) -> Option<&'a [u8]> {
    // The first occurrence wins; HPACK names are lowercase (RFC 9113 §8.2.1).
    fields
        .iter()
        .find(|(n, _)| n.as_ref() == name.as_bytes())
        .map(|(_, v)| v.as_ref())
}

fn text(v: Option<&[u8]>) -> Option<String> {
    v.map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Split a gRPC `:path` ("Requests": `"/" Service-Name "/" {method name}`)
/// into service and method: `/runtime.v1.RuntimeService/RunPodSandbox` ->
/// (`runtime.v1.RuntimeService`, `RunPodSandbox`). `None` unless it starts
/// with `/` and both parts are non-empty (split at the last `/`).
pub(crate) fn split_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix('/')?;
    let (service, method) = rest.rsplit_once('/')?;
    if service.is_empty() || method.is_empty() {
        return None;
    }
    Some((service, method))
}

/// Parse a `grpc-timeout` value ("Requests"):
///
/// ```text
/// Timeout      → "grpc-timeout" TimeoutValue TimeoutUnit
/// TimeoutValue → {positive integer as ASCII string of at most 8 digits}
/// TimeoutUnit  → Hour / Minute / Second / Millisecond / Microsecond / Nanosecond
/// Hour → "H"  Minute → "M"  Second → "S"  Millisecond → "m"
/// Microsecond → "u"  Nanosecond → "n"
/// ```
///
/// `None` when malformed (no digits, more than 8, a sign, an unknown unit).
pub(crate) fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The fields of Request-Headers ("Requests") the tracer uses. Missing
/// fields are `None`; for repeated names the first occurrence wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// `:method` (gRPC: always `POST`).
    pub http_method: Option<String>,
    /// `:path` as sent.
    pub path: Option<String>,
    /// Service-Name part of `:path` (see [`split_path`]).
    pub service: Option<String>,
    /// Method name part of `:path`.
    pub rpc_method: Option<String>,
    /// `:authority`.
    pub authority: Option<String>,
    /// `content-type` (`application/grpc[+proto|+json|...]`).
    pub content_type: Option<String>,
    /// `grpc-timeout`, when present and well-formed.
    pub timeout: Option<Duration>,
    /// `grpc-timeout` was present but malformed.
    pub timeout_malformed: bool,
    /// `grpc-encoding` (Message-Encoding of compressed messages).
    pub encoding: Option<String>,
    /// `user-agent`.
    pub user_agent: Option<String>,
    /// `traceparent` (W3C Trace Context), when present and valid.
    pub traceparent: Option<TraceContext>,
}

impl RequestHead {
    /// Extract from a decoded header list of (name, value) byte pairs.
    pub(crate) fn from_fields<N: AsRef<[u8]>, V: AsRef<[u8]>>(fields: &[(N, V)]) -> Self {
        let path = text(find(fields, ":path"));
        let (service, rpc_method) = match path.as_deref().and_then(split_path) {
            Some((s, m)) => (Some(s.to_owned()), Some(m.to_owned())),
            None => (None, None),
        };
        let raw_timeout = find(fields, "grpc-timeout");
        let timeout = raw_timeout.and_then(parse_timeout);
        RequestHead {
            http_method: text(find(fields, ":method")),
            path,
            service,
            rpc_method,
            authority: text(find(fields, ":authority")),
            content_type: text(find(fields, "content-type")),
            timeout,
            timeout_malformed: raw_timeout.is_some() && timeout.is_none(),
            encoding: text(find(fields, "grpc-encoding")),
            user_agent: text(find(fields, "user-agent")),
            traceparent: find_traceparent(fields.iter().map(|(n, v)| (n, v))),
        }
    }
}

/// Decode a `grpc-message` value ("Responses"):
///
/// ```text
/// Status-Message → "grpc-message" Percent-Encoded
/// Percent-Byte-Encoded → "%" 2HEXDIGIT ; 0-9 A-F
/// ```
///
/// `%XX` sequences become the byte XX (lowercase hex is accepted too);
/// invalid sequences are kept literally, as the spec allows ("decode valid
/// portions while leaving broken %-encodings as-is"); the bytes are then
/// read as UTF-8, lossily.
pub(crate) fn percent_decode(v: &[u8]) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' && i + 2 < v.len() {
            if let (Some(h), Some(l)) = (hex(v[i + 1]), hex(v[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(v[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The fields of Trailers, or of a Trailers-Only response ("Responses":
/// `Trailers-Only → HTTP-Status Content-Type Trailers`), the tracer uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Trailers {
    /// `grpc-status`, when present and a decimal u32.
    pub grpc_status: Option<u32>,
    /// `grpc-status` was present but not a decimal u32.
    pub status_malformed: bool,
    /// `grpc-message`, percent-decoded (see [`percent_decode`]).
    pub grpc_message: Option<String>,
    /// `:status`: present in a Trailers-Only response.
    pub http_status: Option<u16>,
}

impl Trailers {
    /// Extract from a decoded header list of (name, value) byte pairs.
    pub(crate) fn from_fields<N: AsRef<[u8]>, V: AsRef<[u8]>>(fields: &[(N, V)]) -> Self {
        let raw_status = find(fields, "grpc-status");
        let grpc_status = raw_status.and_then(parse_decimal::<u32>);
        Trailers {
            grpc_status,
            status_malformed: raw_status.is_some() && grpc_status.is_none(),
            grpc_message: find(fields, "grpc-message").map(percent_decode),
            http_status: find(fields, ":status").and_then(parse_decimal::<u16>),
        }
    }
}

fn parse_decimal<T: std::str::FromStr>(v: &[u8]) -> Option<T> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// The name of a gRPC status code (`doc/statuscodes.md`), `"UNKNOWN_CODE"`
/// outside 0..=16.
pub(crate) fn grpc_status_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN_CODE")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_strategies::{bytes_below, config};
    use proptest::prelude::*;

    /// Test encoder: one Length-Prefixed-Message ("Requests").
    fn lpm(compressed: bool, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![u8::from(compressed)];
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn drain(r: &mut MessageReassembler) -> Vec<MessageEvent> {
        std::iter::from_fn(|| r.next_event()).collect()
    }

    fn msg(compressed: bool, payload: &[u8]) -> MessageEvent {
        MessageEvent::Message(GrpcMessage {
            compressed,
            payload: payload.to_vec(),
        })
    }

    #[test]
    fn split_at_every_boundary() {
        let mut stream = lpm(false, b"hello world");
        stream.extend(lpm(true, b""));
        stream.extend(lpm(true, &[7; 40]));
        let want = vec![
            msg(false, b"hello world"),
            msg(true, b""),
            msg(true, &[7; 40]),
        ];
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let mut r = MessageReassembler::new();
                r.push(&stream[..i]);
                r.push(&stream[i..j]);
                r.push(&stream[j..]);
                r.end_stream();
                assert_eq!(drain(&mut r), want, "split at {i}, {j}");
                assert_eq!(r.buffered(), 0);
            }
        }
        // One byte per DATA frame.
        let mut r = MessageReassembler::new();
        for b in &stream {
            r.push(std::slice::from_ref(b));
        }
        r.end_stream();
        assert_eq!(drain(&mut r), want);
    }

    #[test]
    fn several_messages_in_one_frame() {
        let mut frame = Vec::new();
        for k in 0..5u8 {
            frame.extend(lpm(k % 2 == 1, &vec![k; k as usize * 3]));
        }
        let mut r = MessageReassembler::new();
        r.push(&frame);
        let got = drain(&mut r);
        assert_eq!(got.len(), 5);
        for (k, ev) in got.iter().enumerate() {
            assert_eq!(*ev, msg(k % 2 == 1, &vec![k as u8; k * 3]));
        }
    }

    #[test]
    fn zero_length_message() {
        let mut r = MessageReassembler::new();
        r.push(&[0, 0, 0, 0, 0]);
        assert_eq!(drain(&mut r), vec![msg(false, b"")]);
        r.end_stream();
        assert_eq!(drain(&mut r), vec![]);
    }

    #[test]
    fn oversize_refused_without_allocating() {
        let mut r = MessageReassembler::new();
        // Declared 0xffff_ffff bytes, far above 16 MiB.
        r.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            drain(&mut r),
            vec![MessageEvent::Error(MessageError::TooLarge {
                declared: u32::MAX,
                limit: DEFAULT_MAX_MESSAGE
            })]
        );
        r.push(&[1; 1000]);
        assert_eq!(r.buffered(), 0);
        assert_eq!(drain(&mut r), vec![]);

        // Small bound: the refused body is skipped and framing resumes.
        let mut r = MessageReassembler::with_max_message(4);
        let mut s = lpm(false, b"toolong");
        s.extend(lpm(false, b"ok"));
        r.push(&s);
        assert_eq!(
            drain(&mut r),
            vec![
                MessageEvent::Error(MessageError::TooLarge {
                    declared: 7,
                    limit: 4
                }),
                msg(false, b"ok"),
            ]
        );

        // A legal but large declared length grows only with arrived bytes.
        let mut r = MessageReassembler::new();
        r.push(&[0, 0, 0xff, 0, 0]);
        r.push(&[9; 10]);
        assert_eq!(r.buffered(), PREFIX_LEN + 10);
        if let State::Body { buf, .. } = &r.state {
            assert!(buf.capacity() < 1024, "capacity {}", buf.capacity());
        } else {
            panic!("not in body");
        }
    }

    #[test]
    fn gap_and_truncated_end() {
        let mut r = MessageReassembler::new();
        r.push(&lpm(false, b"abcdef")[..8]);
        assert_eq!(r.buffered(), 8);
        r.gap();
        assert_eq!(
            drain(&mut r),
            vec![MessageEvent::Error(MessageError::Lost { bytes: 8 })]
        );
        assert_eq!(r.buffered(), 0);
        r.gap();
        assert_eq!(drain(&mut r), vec![]);
        r.push(&lpm(false, b"x"));
        assert_eq!(drain(&mut r), vec![msg(false, b"x")]);

        r.push(&lpm(false, b"abcdef")[..7]);
        r.end_stream();
        assert_eq!(
            drain(&mut r),
            vec![MessageEvent::Error(MessageError::Truncated {
                declared: Some(6),
                received: 7
            })]
        );
        r.push(&[0, 0, 0]);
        r.end_stream();
        assert_eq!(
            drain(&mut r),
            vec![MessageEvent::Error(MessageError::Truncated {
                declared: None,
                received: 3
            })]
        );
    }

    #[test]
    fn invalid_flag_desyncs_until_end() {
        let mut r = MessageReassembler::new();
        r.push(&[2, 0, 0, 0, 1, 0]);
        r.push(&lpm(false, b"lost"));
        assert_eq!(
            drain(&mut r),
            vec![MessageEvent::Error(MessageError::InvalidFlag { flag: 2 })]
        );
        r.end_stream();
        r.push(&lpm(false, b"next"));
        assert_eq!(drain(&mut r), vec![msg(false, b"next")]);
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(
            parse_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(
            parse_timeout(b"99999999H"),
            Some(Duration::from_hours(99999999))
        );
        assert_eq!(parse_timeout(b"2M"), Some(Duration::from_mins(2)));
        assert_eq!(parse_timeout(b"5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse_timeout(b"123456789S"), None);
        assert_eq!(parse_timeout(b"1x"), None);
        assert_eq!(parse_timeout(b""), None);
        assert_eq!(parse_timeout(b"S"), None);
        assert_eq!(parse_timeout(b"-1S"), None);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode(b"%25"), "%");
        assert_eq!(percent_decode(b"%E2%82%AC"), "€");
        assert_eq!(percent_decode(b"%zz"), "%zz");
        assert_eq!(percent_decode(b"a%2"), "a%2");
        assert_eq!(percent_decode(b"%"), "%");
        assert_eq!(percent_decode(b"%%41"), "%A");
        assert_eq!(percent_decode(b"no such pod"), "no such pod");
        assert_eq!(percent_decode(b"%FF"), "\u{fffd}");
    }

    #[test]
    fn request_head() {
        let f: &[(&str, &str)] = &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/runtime.v1.RuntimeService/RunPodSandbox"),
            (":authority", "/run/containerd/containerd.sock"),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.65.0"),
            ("te", "trailers"),
            ("grpc-timeout", "3999856u"),
        ];
        let h = RequestHead::from_fields(f);
        assert_eq!(h.http_method.as_deref(), Some("POST"));
        assert_eq!(h.service.as_deref(), Some("runtime.v1.RuntimeService"));
        assert_eq!(h.rpc_method.as_deref(), Some("RunPodSandbox"));
        assert_eq!(
            h.authority.as_deref(),
            Some("/run/containerd/containerd.sock")
        );
        assert_eq!(h.content_type.as_deref(), Some("application/grpc"));
        assert_eq!(h.user_agent.as_deref(), Some("grpc-go/1.65.0"));
        assert_eq!(h.timeout, Some(Duration::from_micros(3_999_856)));
        assert!(!h.timeout_malformed);
        assert_eq!(h.encoding, None);

        let h = RequestHead::from_fields(&[("grpc-timeout", "1x"), (":path", "nope")]);
        assert_eq!(h.timeout, None);
        assert!(h.timeout_malformed);
        assert_eq!(h.path.as_deref(), Some("nope"));
        assert_eq!(h.service, None);
        let empty: &[(&[u8], &[u8])] = &[];
        assert_eq!(RequestHead::from_fields(empty), RequestHead::default());
        assert_eq!(split_path("/a/b"), Some(("a", "b")));
        assert_eq!(split_path("/a/"), None);
        assert_eq!(split_path("//b"), None);
        assert_eq!(split_path("/ab"), None);
    }

    #[test]
    fn trailers() {
        let t = Trailers::from_fields(&[
            (b"grpc-status".to_vec(), b"5".to_vec()),
            (b"grpc-message".to_vec(), b"pod %22x%22 not found".to_vec()),
        ]);
        assert_eq!(t.grpc_status, Some(5));
        assert_eq!(grpc_status_name(t.grpc_status.unwrap()), "NOT_FOUND");
        assert_eq!(t.grpc_message.as_deref(), Some("pod \"x\" not found"));
        assert_eq!(t.http_status, None, "not Trailers-Only: no :status");

        let t = Trailers::from_fields(&[
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "12"),
        ]);
        // Trailers-Only: the response's headers carry `:status`.
        assert_eq!(t.http_status, Some(200));
        assert_eq!(t.grpc_status, Some(12));

        let t = Trailers::from_fields(&[("grpc-status", "x1")]);
        assert_eq!(t.grpc_status, None);
        assert!(t.status_malformed);
    }

    #[test]
    fn status_names() {
        assert_eq!(grpc_status_name(0), "OK");
        assert_eq!(grpc_status_name(4), "DEADLINE_EXCEEDED");
        assert_eq!(grpc_status_name(14), "UNAVAILABLE");
        assert_eq!(grpc_status_name(16), "UNAUTHENTICATED");
        assert_eq!(grpc_status_name(17), "UNKNOWN_CODE");
    }

    /// What the reassembler is fed: a gap or the end of the stream one
    /// time in ten each, else a push of fewer than 41 random bytes, half of
    /// them starting with a plausible Length-Prefixed-Message prefix
    /// (flag 0 or 1, a length below 80).
    #[derive(Debug, Clone)]
    enum Feed {
        Gap,
        EndStream,
        Push(Vec<u8>),
    }

    fn feed() -> impl Strategy<Value = Feed> {
        let push = (bytes_below(41), any::<bool>()).prop_map(|(mut b, plausible)| {
            if plausible && b.len() >= 5 {
                b[0] &= 1;
                b[1..4].fill(0);
                b[4] %= 80;
            }
            Feed::Push(b)
        });
        prop_oneof![
            1 => Just(Feed::Gap),
            1 => Just(Feed::EndStream),
            8 => push,
        ]
    }

    /// Header or trailer fields: 4 of the names gRPC reads, each with a
    /// random value below 13 bytes.
    fn fields() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
        let name = prop::sample::select(
            &[
                ":path",
                ":status",
                "grpc-status",
                "grpc-message",
                "grpc-timeout",
            ][..],
        );
        prop::collection::vec(
            (name.prop_map(|n| n.as_bytes().to_vec()), bytes_below(13)),
            4,
        )
    }

    proptest! {
        #![proptest_config(config(2000))]

        /// Random pushes, gaps and stream ends never panic, and the
        /// reassembler holds and yields at most its maximum message; random
        /// fields, timeouts and status codes never panic.
        #[test]
        fn random_inputs_never_panic(
            feeds in prop::collection::vec(feed(), 8),
            fields in fields(),
            v in bytes_below(13),
            code in any::<u32>(),
        ) {
            let mut r = MessageReassembler::with_max_message(64);
            for f in feeds {
                match f {
                    Feed::Gap => r.gap(),
                    Feed::EndStream => r.end_stream(),
                    Feed::Push(b) => r.push(&b),
                }
                prop_assert!(r.buffered() <= PREFIX_LEN + 64);
                while let Some(ev) = r.next_event() {
                    if let MessageEvent::Message(m) = ev {
                        prop_assert!(m.payload.len() <= 64);
                    }
                }
            }
            let _ = RequestHead::from_fields(&fields);
            let _ = Trailers::from_fields(&fields);
            let _ = parse_timeout(&v);
            let _ = percent_decode(&v);
            let _ = grpc_status_name(code);
        }
    }
}
