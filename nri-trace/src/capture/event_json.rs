//! How a [`CaptureEvent`](super::CaptureEvent) is spelled in JSON (the raw
//! capture's lines, docs/capture.md): a chunk's bytes as lowercase hex, a
//! syscall by its name. Reading them back is as strict as the rest of a
//! raw capture's reader: a bad digit or an unknown syscall is an error
//! naming what it found, never a panic.

use std::fmt;

use serde::{de, Deserializer};

use super::Syscall;

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
pub(super) fn ser_syscall<S: serde::Serializer>(s: &Syscall, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.name())
}

pub(super) fn ser_hex<S: serde::Serializer>(b: &[u8], ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&hex(b))
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

/// A bad hex string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    #[error("odd number of hex digits ({0})")]
    OddLength(usize),
    #[error("invalid hex digit {found:?} at offset {offset}")]
    BadDigit { offset: usize, found: char },
}

/// Bytes from hex (the inverse of [`hex`]); upper case is accepted
/// too, for hand-written fixtures.
pub fn unhex(s: &str) -> Result<Vec<u8>, HexError> {
    fn digit(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bad = |offset: usize| HexError::BadDigit {
        offset,
        // Every byte before `offset` is an ASCII digit, so it is a char
        // boundary.
        found: s[offset..].chars().next().unwrap_or('\u{FFFD}'),
    };
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 2);
    let mut pairs = b.chunks_exact(2);
    for (i, pair) in pairs.by_ref().enumerate() {
        let hi = digit(pair[0]).ok_or_else(|| bad(2 * i))?;
        let lo = digit(pair[1]).ok_or_else(|| bad(2 * i + 1))?;
        out.push(hi << 4 | lo);
    }
    if let [last] = pairs.remainder() {
        // A bad last digit says more than "odd length".
        digit(*last).ok_or_else(|| bad(b.len() - 1))?;
        return Err(HexError::OddLength(b.len()));
    }
    Ok(out)
}

/// Deserializes `Chunk::bytes` from hex.
pub(super) fn de_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a hex string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<u8>, E> {
            unhex(s).map_err(|e| E::custom(format_args!("chunk bytes: {e}")))
        }
    }
    d.deserialize_str(V)
}

/// Deserializes `Chunk::syscall` from its name.
pub(super) fn de_syscall<'de, D: Deserializer<'de>>(d: D) -> Result<Syscall, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Syscall;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a syscall name")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Syscall, E> {
            Syscall::from_name(s).ok_or_else(|| {
                let known: Vec<&str> = (1..)
                    .map_while(Syscall::from_u16)
                    .map(Syscall::name)
                    .collect();
                E::custom(format_args!(
                    "unknown syscall {s:?} (expected one of {})",
                    known.join(", ")
                ))
            })
        }
    }
    d.deserialize_str(V)
}
