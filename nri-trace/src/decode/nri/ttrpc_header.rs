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

use super::{be_u32, be_u32_min};

/// Length of the ttrpc message header (`messageHeaderLength`).
pub const HEADER_LEN: usize = 10;
/// Largest ttrpc message payload (`messageLengthMax`, 4 MiB).
pub const MAX_MESSAGE: usize = 4 << 20;

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
