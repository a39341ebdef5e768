//! The ttrpc message header: its size, its length bound and the hunting
//! plausibility check, shared by the two layers that need them.
//!
//! [`super::ttrpc`] frames messages with them; [`super::mux`] uses
//! `plausible_header` as resynchronization evidence, because every NRI
//! conn_id carries ttrpc (`containerd/nri` `pkg/net/multiplex`). They live
//! apart from both so that the dependency runs one way: the multiplexer is
//! the lower layer and does not import the ttrpc decoder built on it.
//!
//! Layout, following `containerd/ttrpc` `channel.go` (`messageHeader`,
//! `readMessageHeader`, `messageHeaderLength = 10`,
//! `messageLengthMax = 4 << 20`) and `PROTOCOL.md`:
//!
//! ```text
//! 0        4           8      9       10
//! | length | stream_id | type | flags | payload (length bytes)
//!   u32 BE   u32 BE      u8     u8
//! ```

use crate::decode::framer::{be_u32, be_u32_min};

/// Length of the ttrpc message header (`messageHeaderLength`).
pub(crate) const HEADER_LEN: usize = 10;
/// Largest ttrpc message payload (`messageLengthMax`, 4 MiB).
pub(crate) const MAX_MESSAGE: usize = 4 << 20;

/// Hunting plausibility of a complete ttrpc header: length <= 4 MiB, type
/// 1..=3, only known flag bits, and a client-allocated stream id (odd,
/// hence non-zero). Shorter input is checked as far as it goes.
pub(crate) fn plausible_header(prefix: &[u8]) -> bool {
    if let Some(min_len) = be_u32_min(prefix, 0) {
        if min_len as usize > MAX_MESSAGE {
            return false;
        }
    }
    if let Some(stream_id) = be_u32(prefix, 4) {
        if stream_id & 1 == 0 {
            return false;
        }
    }
    if let Some(&t) = prefix.get(8) {
        if !(1..=3).contains(&t) {
            return false;
        }
    }
    if let Some(&f) = prefix.get(9) {
        if f & !0x7 != 0 {
            return false;
        }
    }
    true
}

/// The start of the name of every service of NRI's API, as a ttrpc
/// request names it (`nri.pkg.api.v1alpha1.Plugin`, `.Runtime`).
pub(crate) const NRI_SERVICE_PREFIX: &str = "nri.pkg.api.";

/// Hunting evidence from the start of a message's body, for a message too
/// long to wait for its end or the next header (a hunt window holds
/// 64 KiB; a Synchronize or an event of a pod with big annotations is
/// megabytes). ttrpc's envelopes (`proto/ttrpc/ttrpc.proto`, encoded by
/// both ttrpc-go and the ttrpc crate in field order):
///
/// - a request (type 1) starts with field 1, `service`: tag `0x0a`, a
///   one-byte length, and a name starting [`NRI_SERVICE_PREFIX`];
/// - a successful response (type 2) is field 2, `payload`, alone: tag
///   `0x12` and a varint length that ends exactly at the declared end.
///
/// Anything else (errors carry a short status first, and are short) is no
/// evidence.
pub(crate) fn plausible_body_start(header: &[u8], body: &[u8]) -> bool {
    let (Some(len), Some(&kind)) = (be_u32(header, 0), header.get(8)) else {
        return false;
    };
    match (kind, body) {
        (1, [0x0a, n, name @ ..]) => {
            let prefix = NRI_SERVICE_PREFIX.as_bytes();
            usize::from(*n) >= prefix.len() && *n < 0x80 && name.starts_with(prefix)
        }
        (2, [0x12, rest @ ..]) => {
            let mut value: u64 = 0;
            for (i, b) in rest.iter().take(5).enumerate() {
                value |= u64::from(b & 0x7f) << (7 * i);
                if b & 0x80 == 0 {
                    return 1 + (i as u64 + 1) + value == u64::from(len);
                }
            }
            false
        }
        _ => false,
    }
}
