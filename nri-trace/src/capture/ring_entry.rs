//! Parsing of raw ring-buffer records (layout in `nri_trace_common`).
//!
//! Records come from our own kernel programs, but a version mismatch between
//! the embedded object and this parser, or a bug, must never crash the
//! collector: every length is checked before use.

use nri_trace_common::{
    EntryHeader, EntryKind, Syscall, ENTRY_HEADER_LEN, FLAG_LAST, FLAG_READ_FAULT, FLAG_TRUNCATED,
    MAX_CHUNK,
};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RingEntryError {
    #[error("record of {0} bytes is shorter than its {ENTRY_HEADER_LEN}-byte header")]
    Short(usize),
    #[error("unknown record kind {0}")]
    Kind(u16),
    #[error("unknown syscall id {0}")]
    Syscall(u16),
    #[error("record claims {claimed} payload bytes but carries {present}")]
    Length { claimed: u32, present: usize },
}

/// One parsed record, borrowing its payload from the ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingEntry<'a> {
    pub kind: EntryKind,
    pub syscall: Syscall,
    pub flags: u32,
    pub ts_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    pub fd: i32,
    pub aux: i32,
    pub ret: i64,
    pub offset: u32,
    pub payload: &'a [u8],
}

impl RingEntry<'_> {
    pub fn truncated(&self) -> bool {
        self.flags & (FLAG_TRUNCATED | FLAG_READ_FAULT) != 0
    }
    pub fn last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Parse one record. Field offsets follow `EntryHeader`'s repr(C) layout
/// (asserted against `offset_of!` in the tests).
pub fn parse(b: &[u8]) -> Result<RingEntry<'_>, RingEntryError> {
    if b.len() < ENTRY_HEADER_LEN {
        return Err(RingEntryError::Short(b.len()));
    }
    let kind_raw = u16_at(b, 0);
    let sc_raw = u16_at(b, 2);
    let kind = EntryKind::from_u16(kind_raw).ok_or(RingEntryError::Kind(kind_raw))?;
    let syscall = Syscall::from_u16(sc_raw).ok_or(RingEntryError::Syscall(sc_raw))?;
    let len = u32_at(b, 44);
    let present = b.len() - ENTRY_HEADER_LEN;
    if len as usize > present || len as usize > MAX_CHUNK {
        return Err(RingEntryError::Length {
            claimed: len,
            present,
        });
    }
    Ok(RingEntry {
        kind,
        syscall,
        flags: u32_at(b, 4),
        ts_ns: u64_at(b, 8),
        tgid: u32_at(b, 16),
        tid: u32_at(b, 20),
        fd: u32_at(b, 24) as i32,
        aux: u32_at(b, 28) as i32,
        ret: u64_at(b, 32) as i64,
        offset: u32_at(b, 40),
        payload: &b[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + len as usize],
    })
}

/// Serialize a header and payload the way the kernel programs do; used by
/// tests and by replay of raw captures.
pub fn encode(h: &EntryHeader, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(ENTRY_HEADER_LEN + payload.len());
    v.extend_from_slice(&h.kind.to_ne_bytes());
    v.extend_from_slice(&h.syscall.to_ne_bytes());
    v.extend_from_slice(&h.flags.to_ne_bytes());
    v.extend_from_slice(&h.ts_ns.to_ne_bytes());
    v.extend_from_slice(&h.tgid.to_ne_bytes());
    v.extend_from_slice(&h.tid.to_ne_bytes());
    v.extend_from_slice(&h.fd.to_ne_bytes());
    v.extend_from_slice(&h.aux.to_ne_bytes());
    v.extend_from_slice(&h.ret.to_ne_bytes());
    v.extend_from_slice(&h.offset.to_ne_bytes());
    v.extend_from_slice(&h.len.to_ne_bytes());
    v.extend_from_slice(payload);
    v
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use proptest::prelude::*;

    use super::*;
    use crate::decode::test_strategies;

    #[test]
    fn offsets_match_repr_c() {
        assert_eq!(offset_of!(EntryHeader, kind), 0);
        assert_eq!(offset_of!(EntryHeader, syscall), 2);
        assert_eq!(offset_of!(EntryHeader, flags), 4);
        assert_eq!(offset_of!(EntryHeader, ts_ns), 8);
        assert_eq!(offset_of!(EntryHeader, tgid), 16);
        assert_eq!(offset_of!(EntryHeader, tid), 20);
        assert_eq!(offset_of!(EntryHeader, fd), 24);
        assert_eq!(offset_of!(EntryHeader, aux), 28);
        assert_eq!(offset_of!(EntryHeader, ret), 32);
        assert_eq!(offset_of!(EntryHeader, offset), 40);
        assert_eq!(offset_of!(EntryHeader, len), 44);
    }

    fn hdr(len: u32) -> EntryHeader {
        EntryHeader {
            kind: EntryKind::Data as u16,
            syscall: Syscall::Writev as u16,
            flags: FLAG_LAST,
            ts_ns: 7,
            tgid: 10,
            tid: 11,
            fd: 5,
            aux: 3,
            ret: 4,
            offset: 0,
            len,
        }
    }

    #[test]
    fn round_trip() {
        let b = encode(&hdr(4), b"abcd");
        let r = parse(&b).unwrap();
        assert_eq!(r.kind, EntryKind::Data);
        assert_eq!(r.syscall, Syscall::Writev);
        assert_eq!((r.tgid, r.tid, r.fd, r.aux, r.ret), (10, 11, 5, 3, 4));
        assert_eq!(r.payload, b"abcd");
        assert!(r.last() && !r.truncated());
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(parse(&[0u8; 10]), Err(RingEntryError::Short(10)));
        let b = encode(&hdr(100), b"abcd");
        assert!(matches!(
            parse(&b),
            Err(RingEntryError::Length { claimed: 100, .. })
        ));
        let mut h = hdr(0);
        h.kind = 99;
        assert_eq!(parse(&encode(&h, b"")), Err(RingEntryError::Kind(99)));
        let mut h = hdr(0);
        h.syscall = 0;
        assert_eq!(parse(&encode(&h, b"")), Err(RingEntryError::Syscall(0)));
    }

    proptest! {
        #![proptest_config(test_strategies::config(2000))]

        /// Any bytes, up to 200: a record or an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(b in test_strategies::bytes_below(201)) {
            let _ = parse(&b);
        }
    }
}
