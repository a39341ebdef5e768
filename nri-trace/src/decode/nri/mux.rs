//! The NRI multiplexer layer: one trunk socket, several logical connections.
//!
//! Frame layout, following `containerd/nri` `pkg/net/multiplex/mux.go`
//! (`mux.write` / `mux.reader`, `headerLen = 8`):
//!
//! ```text
//! 0        4            8
//! | conn_id | payload_len | payload (payload_len bytes)
//!   u32 BE    u32 BE
//! ```
//!
//! The writer sends header and payload with two separate `write` calls under
//! one lock, so frames never interleave but a frame usually spans two
//! syscalls. conn_id 0 is reserved; NRI uses 1 (Plugin service, runtime is
//! the ttrpc client) and 2 (Runtime service, plugin is the client). The
//! largest payload is `ttrpcMessageHeaderLength + ttrpcMessageLengthMax`
//! (10 + 4 MiB) in NRI v0.7+ and 16 MiB in older versions; this decoder
//! accepts up to [`MAX_PAYLOAD`] (16 MiB).

use super::ttrpc_header;
use crate::decode::framer::{be_u32, be_u32_min, Framer, Layout, RawEvent, DEFAULT_HUNT_WINDOW};

/// Length of the multiplexer frame header (`headerLen` in mux.go).
pub(crate) const HEADER_LEN: usize = 8;
/// Largest payload accepted (NRI v0.3-0.6 allowed 16 MiB; later 10 + 4 MiB).
pub(crate) const MAX_PAYLOAD: usize = 16 << 20;
/// conn_id of the Plugin service (runtime is the ttrpc client).
pub(crate) const PLUGIN_SERVICE_CONN: u32 = 1;
/// conn_id of the Runtime service (plugin is the ttrpc client).
pub(crate) const RUNTIME_SERVICE_CONN: u32 = 2;
/// The conn_ids NRI uses.
pub(crate) const DEFAULT_CONN_IDS: [u32; 2] = [PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN];

/// What the multiplexer decoder yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MuxEvent {
    /// One complete multiplexer frame.
    Frame { conn_id: u32, payload: Vec<u8> },
    /// `skipped` bytes were dropped (garbage, a mid-stream start, or
    /// partial state dropped by a gap) before the next frame.
    Resync { skipped: usize },
}

/// A bad [`MuxDecoder::with_config`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxConfigError {
    #[error("no multiplexer connection ids given")]
    NoConnIds,
    #[error("multiplexer connection id 0 is reserved")]
    ReservedConnId,
    #[error("max payload {0} is outside 1..={MAX_PAYLOAD}")]
    MaxPayload(usize),
}

#[derive(Debug, Clone)]
pub(crate) struct MuxLayout {
    conn_ids: Vec<u32>,
    max_payload: usize,
}

impl MuxLayout {
    fn known(&self, conn_id: u32) -> bool {
        self.conn_ids.contains(&conn_id)
    }
}

impl Layout for MuxLayout {
    fn header_len(&self) -> usize {
        HEADER_LEN
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn payload_len(&self, header: &[u8]) -> usize {
        be_u32(header, 4).map_or(usize::MAX, |n| n as usize)
    }

    fn acceptable(&self, header: &[u8]) -> bool {
        match (be_u32(header, 0), be_u32(header, 4)) {
            (Some(conn), Some(len)) => self.known(conn) && len as usize <= self.max_payload,
            _ => false,
        }
    }

    fn plausible_prefix(&self, prefix: &[u8]) -> bool {
        // conn_id: some known id must start with the bytes we have.
        let k = prefix.len().min(4);
        if !self
            .conn_ids
            .iter()
            .any(|id| id.to_be_bytes()[..k] == prefix[..k])
        {
            return false;
        }
        // payload_len: its smallest completion must fit the maximum.
        if let Some(min_len) = be_u32_min(prefix, 4) {
            if min_len as usize > self.max_payload {
                return false;
            }
        }
        // A complete length of 0 is legal but never written by NRI (ttrpc
        // never flushes an empty buffer); refusing it while hunting keeps
        // zero-filled payload bytes from looking like a frame chain.
        if let Some(len) = be_u32(prefix, 4) {
            if len == 0 {
                return false;
            }
        }
        true
    }

    fn payload_evidence(&self, _header: &[u8], payload_prefix: &[u8]) -> bool {
        // Every NRI conn_id carries ttrpc. The first frame of a ttrpc message
        // starts with a ttrpc header; continuation frames of a long message
        // do not, so absence is not evidence against the candidate.
        // The check comes from `ttrpc_header`, not the ttrpc decoder: that
        // decoder is built on this one.
        payload_prefix
            .get(..ttrpc_header::HEADER_LEN)
            .is_some_and(ttrpc_header::plausible_header)
    }
}

/// Splits one direction of an NRI trunk socket into multiplexer frames.
///
/// Feed the bytes of each chunk with [`MuxDecoder::push`], call
/// [`MuxDecoder::gap`] where bytes were lost, and drain events with
/// [`Iterator::next`] after each push (decoded events queue up until
/// drained). Partial state is bounded by [`MuxDecoder::max_buffered`].
///
/// A new decoder starts by hunting for a frame boundary, so it works both
/// from the first byte of a connection (the first frame is accepted at
/// offset 0 without a `Resync`) and when attached mid-stream.
///
/// Resynchronization heuristic (after garbage, a gap or a mid-stream
/// start): a candidate offset needs a header whose conn_id is one of the
/// configured ids ({1, 2} by default) and whose length is 1..=max. It is
/// accepted when the next header (at offset + 8 + length) is buffered and
/// equally plausible, or, before the next header arrives, when the payload
/// starts with a plausible ttrpc header (see [`super::ttrpc_header`]).
/// Otherwise it waits for more bytes, within a 64 KiB window. False
/// positives need bytes inside a payload that read as `00 00 00 01|02`, a
/// small length, and then either another such header at exactly the
/// declared distance or a plausible ttrpc header; protobuf payloads make
/// that rare but possible, and a false accept is normally followed by an
/// implausible header and a new resynchronization.
pub struct MuxDecoder {
    framer: Framer<MuxLayout>,
}

impl Default for MuxDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl MuxDecoder {
    /// A decoder for NRI's conn_ids {1, 2} and payloads up to 16 MiB.
    pub fn new() -> Self {
        Self::build(DEFAULT_CONN_IDS.to_vec(), MAX_PAYLOAD)
    }

    /// A decoder for other conn_ids or a smaller maximum payload.
    pub fn with_config(conn_ids: &[u32], max_payload: usize) -> Result<Self, MuxConfigError> {
        if conn_ids.is_empty() {
            return Err(MuxConfigError::NoConnIds);
        }
        if conn_ids.contains(&0) {
            return Err(MuxConfigError::ReservedConnId);
        }
        if max_payload == 0 || max_payload > MAX_PAYLOAD {
            return Err(MuxConfigError::MaxPayload(max_payload));
        }
        Ok(Self::build(conn_ids.to_vec(), max_payload))
    }

    fn build(conn_ids: Vec<u32>, max_payload: usize) -> Self {
        MuxDecoder {
            framer: Framer::new(
                MuxLayout {
                    conn_ids,
                    max_payload,
                },
                DEFAULT_HUNT_WINDOW,
            ),
        }
    }

    /// The conn_ids this decoder accepts.
    pub fn conn_ids(&self) -> &[u32] {
        &self.framer.layout().conn_ids
    }

    /// Append the bytes of one chunk and decode what can be decoded.
    pub fn push(&mut self, bytes: &[u8]) {
        self.framer.push(bytes);
    }

    /// Bytes were lost here: drop partial state and resynchronize. The
    /// dropped bytes are counted in the next [`MuxEvent::Resync`].
    pub fn gap(&mut self) {
        self.framer.gap();
    }

    /// Bytes held as partial state (not counting queued events).
    pub fn buffered(&self) -> usize {
        self.framer.buffered()
    }

    /// Upper bound of [`MuxDecoder::buffered`].
    pub fn max_buffered(&self) -> usize {
        self.framer.max_buffered()
    }

    /// `false` while hunting for a frame boundary.
    pub fn is_synced(&self) -> bool {
        self.framer.is_synced()
    }
}

impl MuxDecoder {
    /// The next decoded event with, for a frame, the stream offset just
    /// past its last byte (bytes pushed so far count from 0).
    pub fn next_with_end(&mut self) -> Option<(MuxEvent, Option<u64>)> {
        Some(match self.framer.next()? {
            RawEvent::Frame {
                header,
                payload,
                end,
            } => (
                MuxEvent::Frame {
                    conn_id: be_u32(&header, 0).unwrap_or(0),
                    payload,
                },
                Some(end),
            ),
            RawEvent::Resync { skipped } => (MuxEvent::Resync { skipped }, None),
        })
    }
}

impl Iterator for MuxDecoder {
    type Item = MuxEvent;

    /// The next decoded event, or `None` until more bytes are pushed.
    fn next(&mut self) -> Option<MuxEvent> {
        self.next_with_end().map(|(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_strategies::{bytes, bytes_below, config, cuts, garbage_before};
    use proptest::prelude::*;
    use proptest::sample::Index;

    // ---- Test encoders (tests only). These follow mux.go and channel.go as
    // read; they are not a reference peer. Real-peer fixtures come later
    // from captures of containerd. ----

    /// Test encoder: one multiplexer frame.
    fn test_mux_frame(conn_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&conn_id.to_be_bytes());
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// Test encoder: one ttrpc message.
    fn test_ttrpc_msg(stream_id: u32, kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(&stream_id.to_be_bytes());
        v.push(kind);
        v.push(flags);
        v.extend_from_slice(payload);
        v
    }

    /// A small valid trunk stream and its expected frames.
    fn sample() -> (Vec<u8>, Vec<MuxEvent>) {
        let frames: Vec<(u32, Vec<u8>)> = vec![
            (1, test_ttrpc_msg(1, 1, 0, b"configure")),
            (2, test_ttrpc_msg(1, 1, 0, b"register plugin")),
            (1, test_ttrpc_msg(1, 2, 0, b"")),
            // A continuation frame that does not start with a ttrpc header.
            (2, b"\x0a\x05hello-continuation".to_vec()),
            (1, test_ttrpc_msg(3, 1, 0, &[0u8; 40])),
        ];
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (c, p) in frames {
            wire.extend(test_mux_frame(c, &p));
            want.push(MuxEvent::Frame {
                conn_id: c,
                payload: p,
            });
        }
        (wire, want)
    }

    fn decode_split(wire: &[u8], cuts: &[usize]) -> Vec<MuxEvent> {
        let mut d = MuxDecoder::new();
        let mut out = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&wire.len())) {
            d.push(&wire[last..c]);
            last = c;
            assert!(d.buffered() <= d.max_buffered());
            out.extend(d.by_ref());
        }
        out
    }

    #[test]
    fn decodes_whole_stream() {
        let (wire, want) = sample();
        assert_eq!(decode_split(&wire, &[]), want);
    }

    #[test]
    fn every_single_split_point() {
        let (wire, want) = sample();
        for i in 0..=wire.len() {
            assert_eq!(decode_split(&wire, &[i]), want, "split at {i}");
        }
    }

    #[test]
    fn every_pair_of_split_points() {
        let (wire, want) = sample();
        for i in 0..=wire.len() {
            for j in i..=wire.len() {
                assert_eq!(decode_split(&wire, &[i, j]), want, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let (wire, want) = sample();
        let cuts: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(decode_split(&wire, &cuts), want);
    }

    proptest! {
        #![proptest_config(config(500))]

        /// Any split of the sample into pushes decodes to the same frames.
        #[test]
        fn random_splits(cuts in cuts(sample().0.len(), 12)) {
            let (wire, want) = sample();
            prop_assert_eq!(decode_split(&wire, &cuts), want);
        }
    }

    /// Garbage holding no header start (`test_strategies::headerless_garbage`),
    /// then the sample, cut anywhere.
    fn garbage_then_sample() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
        garbage_before(&sample().0, &[1, 3, 8, 13, 100, 1000], 1000)
    }

    proptest! {
        #![proptest_config(config(64))]

        /// All of the garbage is skipped, in one `Resync`, and every frame
        /// after it decodes, whatever the splits.
        #[test]
        fn garbage_prefix_resyncs((g, cuts) in garbage_then_sample()) {
            let (wire, want) = sample();
            let mut s = g.clone();
            s.extend_from_slice(&wire);
            let got = decode_split(&s, &cuts);
            prop_assert_eq!(&got[0], &MuxEvent::Resync { skipped: g.len() });
            prop_assert_eq!(&got[1..], &want[..]);
        }
    }

    #[test]
    fn mid_frame_start_resyncs_and_decodes_later_frames() {
        let (wire, want) = sample();
        let first_len = HEADER_LEN + 10 + "configure".len();
        for start in 1..first_len {
            let got = decode_split(&wire[start..], &[]);
            assert_eq!(
                got[0],
                MuxEvent::Resync {
                    skipped: first_len - start
                },
                "start {start}"
            );
            assert_eq!(&got[1..], &want[1..], "start {start}");
        }
    }

    #[test]
    fn gap_mid_frame_then_continue() {
        let (wire, want) = sample();
        let f0 = HEADER_LEN + 10 + "configure".len();
        let f1 = HEADER_LEN + 10 + "register plugin".len();
        let mut d = MuxDecoder::new();
        // First frame, then half of the second, then a gap that loses the
        // rest of the second frame.
        d.push(&wire[..f0 + 5]);
        d.gap();
        d.push(&wire[f0 + f1..]);
        let got: Vec<_> = d.collect();
        assert_eq!(got[0], want[0]);
        assert_eq!(got[1], MuxEvent::Resync { skipped: 5 });
        assert_eq!(&got[2..], &want[2..]);
    }

    #[test]
    fn gap_at_boundary_is_silent() {
        let (wire, want) = sample();
        let f0 = HEADER_LEN + 10 + "configure".len();
        let mut d = MuxDecoder::new();
        d.push(&wire[..f0]);
        d.gap();
        d.push(&wire[f0..]);
        assert_eq!(d.collect::<Vec<_>>(), want);
    }

    #[test]
    fn garbage_between_frames_resyncs() {
        let (wire, want) = sample();
        let f0 = HEADER_LEN + 10 + "configure".len();
        let mut s = wire[..f0].to_vec();
        // Declared length far above the maximum.
        s.extend_from_slice(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xaa]);
        s.extend_from_slice(&wire[f0..]);
        // The first frame alone gets the decoder in sync (hunting would
        // reject it for the implausible header after it).
        let got = decode_split(&s, &[f0]);
        assert_eq!(got[0], want[0]);
        assert_eq!(got[1], MuxEvent::Resync { skipped: 9 });
        assert_eq!(&got[2..], &want[1..]);
    }

    #[test]
    fn huge_declared_length_does_not_allocate_or_wait() {
        // In sync: a 16 MiB frame is waited for, holding only what arrived.
        let mut d = MuxDecoder::new();
        let mut s = test_mux_frame(1, &test_ttrpc_msg(1, 1, 0, b"x"));
        s.extend_from_slice(&1u32.to_be_bytes());
        s.extend_from_slice(&(MAX_PAYLOAD as u32).to_be_bytes());
        d.push(&s);
        assert_eq!(d.by_ref().count(), 1);
        assert_eq!(d.buffered(), HEADER_LEN);
        // Above the maximum: garbage, never waited for.
        let mut d = MuxDecoder::new();
        d.push(&test_mux_frame(1, &test_ttrpc_msg(1, 1, 0, b"x")));
        d.push(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(d.by_ref().count(), 1);
        assert!(!d.is_synced());
        assert!(d.buffered() < HEADER_LEN);
    }

    #[test]
    fn large_frame_decodes() {
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let mut p = test_ttrpc_msg(1, 2, 0, &[]);
        p.extend_from_slice(&big);
        let mut wire = test_mux_frame(1, &p);
        wire.extend(test_mux_frame(2, &test_ttrpc_msg(3, 1, 0, b"after")));
        let got = decode_split(&wire, &[5000, 70_000, 200_000]);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            MuxEvent::Frame {
                conn_id: 1,
                payload: p
            }
        );
    }

    #[test]
    fn bogus_big_candidate_does_not_stall_hunt() {
        // Garbage that reads as conn 1 with a 1 MiB length, then valid
        // frames: the chain of valid frames wins without waiting for 1 MiB.
        let (wire, want) = sample();
        let mut s = vec![0xee, 0, 0, 0, 1, 0, 0x10, 0, 0];
        s.extend_from_slice(&wire);
        let got = decode_split(&s, &[]);
        assert_eq!(got[0], MuxEvent::Resync { skipped: 9 });
        assert_eq!(&got[1..], &want[..]);
    }

    #[test]
    fn header_like_garbage_stays_bounded_and_recovers() {
        // Every 8 bytes a plausible header declaring ~1 MiB that is never
        // confirmed: each push re-scans at most the hunt window, the buffer
        // never exceeds it, and a valid stream afterwards is found.
        let unit = [0u8, 0, 0, 1, 0, 0x0f, 0xff, 0xff];
        let garbage: Vec<u8> = unit.iter().copied().cycle().take(1 << 20).collect();
        let mut d = MuxDecoder::new();
        for c in garbage.chunks(4096) {
            d.push(c);
            assert!(d.buffered() <= DEFAULT_HUNT_WINDOW);
            assert_eq!(d.next(), None);
        }
        // One big push is cut into bounded pieces too.
        d.push(&garbage);
        assert!(d.buffered() <= DEFAULT_HUNT_WINDOW);
        let (wire, want) = sample();
        d.push(&[0xff; 8]);
        d.push(&wire);
        let got: Vec<_> = d.collect();
        assert!(matches!(got[0], MuxEvent::Resync { .. }), "{got:?}");
        assert_eq!(&got[1..], &want[..]);
    }

    #[test]
    fn config_errors() {
        assert_eq!(
            MuxDecoder::with_config(&[], 10).err(),
            Some(MuxConfigError::NoConnIds)
        );
        assert_eq!(
            MuxDecoder::with_config(&[0, 1], 10).err(),
            Some(MuxConfigError::ReservedConnId)
        );
        assert_eq!(
            MuxDecoder::with_config(&[1], MAX_PAYLOAD + 1).err(),
            Some(MuxConfigError::MaxPayload(MAX_PAYLOAD + 1))
        );
        let mut d = MuxDecoder::with_config(&[7], 64).unwrap();
        d.push(&test_mux_frame(7, &test_ttrpc_msg(1, 1, 0, b"seven")));
        assert_eq!(
            d.next(),
            Some(MuxEvent::Frame {
                conn_id: 7,
                payload: test_ttrpc_msg(1, 1, 0, b"seven")
            })
        );
    }

    /// One push of the never-panic property: random bytes with up to 7
    /// header-like runs written over them (conn_id 1 or 2, a length below
    /// 3000), then a gap one time in ten.
    fn noisy_push() -> impl Strategy<Value = (Vec<u8>, bool)> {
        (
            bytes_below(5000),
            prop::collection::vec((any::<Index>(), 1u32..=2, 0u32..3000), 0..8),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(mut b, headers, gap)| {
                for (at, conn, len) in headers {
                    if b.len() >= HEADER_LEN {
                        let at = at.index(b.len() - HEADER_LEN + 1);
                        b[at..at + 4].copy_from_slice(&conn.to_be_bytes());
                        b[at + 4..at + 8].copy_from_slice(&len.to_be_bytes());
                    }
                }
                (b, gap)
            })
    }

    proptest! {
        #![proptest_config(config(300))]

        /// Arbitrary (header-biased) bytes and gaps, 20 pushes on one
        /// decoder, never panic, partial state stays within its bound, and
        /// frames are only of the configured conn_ids within the maximum
        /// payload.
        #[test]
        fn arbitrary_bytes_never_panic_and_stay_bounded(
            small_max in any::<bool>(),
            pushes in prop::collection::vec(noisy_push(), 20),
        ) {
            let mut d = if small_max {
                MuxDecoder::with_config(&[1, 2], 1000).unwrap()
            } else {
                MuxDecoder::new()
            };
            for (b, gap) in pushes {
                d.push(&b);
                if gap {
                    d.gap();
                }
                prop_assert!(d.buffered() <= d.max_buffered());
                prop_assert!(d.buffered() <= HEADER_LEN + MAX_PAYLOAD);
                for ev in d.by_ref() {
                    if let MuxEvent::Frame { conn_id, payload } = ev {
                        prop_assert!(conn_id == 1 || conn_id == 2);
                        prop_assert!(payload.len() <= MAX_PAYLOAD);
                    }
                }
            }
        }
    }

    /// A random valid stream of 1 to 8 frames (conn_id 1 or 2, each a
    /// ttrpc message of a random type and body below 300 bytes), its frames,
    /// one time in three a garbage prefix (1 to 50 random bytes, the first
    /// 0xff so the stream does not start valid), and cuts of the whole.
    fn noisy_stream() -> impl Strategy<Value = (Vec<u8>, Vec<MuxEvent>, Vec<u8>, Vec<usize>)> {
        let frames = prop::collection::vec((1u32..=2, bytes_below(300), 1u8..=3), 1..=8);
        let prefix = prop_oneof![
            2 => Just(Vec::new()),
            1 => bytes(1usize..=50).prop_map(|mut g| {
                g[0] = 0xff;
                g
            }),
        ];
        (frames, prefix).prop_flat_map(|(frames, prefix)| {
            let mut wire = Vec::new();
            let mut want = Vec::new();
            for (k, (conn, body, kind)) in frames.into_iter().enumerate() {
                let p = test_ttrpc_msg(2 * k as u32 + 1, kind, 0, &body);
                wire.extend(test_mux_frame(conn, &p));
                want.push(MuxEvent::Frame {
                    conn_id: conn,
                    payload: p,
                });
            }
            let len = prefix.len() + wire.len();
            (Just(wire), Just(want), Just(prefix), cuts(len, 10))
        })
    }

    proptest! {
        #![proptest_config(config(300))]

        /// Random valid streams, random splits, optional garbage prefix:
        /// all frames after the first resync decode exactly.
        #[test]
        fn property_valid_streams_roundtrip_with_noise(
            (wire, want, prefix, cuts) in noisy_stream(),
        ) {
            let mut s = prefix.clone();
            s.extend_from_slice(&wire);
            let got = decode_split(&s, &cuts);
            if prefix.is_empty() {
                prop_assert_eq!(got, want);
            } else {
                // Random garbage may rarely contain a plausible candidate;
                // all frames must come out once the garbage is skipped.
                prop_assert!(matches!(got[0], MuxEvent::Resync { .. }), "{:?}", got);
                prop_assert!(got.ends_with(&want[1..]), "{:?}", got);
            }
        }
    }
}
