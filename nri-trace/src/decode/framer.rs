//! The framing both sockets' decoders share: a byte stream of "fixed
//! header with a big-endian length, then payload" frames, buffered,
//! bounded and resynchronized after garbage, a gap or a mid-stream attach.
//! Each layer supplies a [`Layout`] that says what its header looks like:
//! the NRI multiplexer and ttrpc ([`crate::decode::nri`]), HTTP/2
//! ([`crate::decode::cri::frame`]).

use std::collections::VecDeque;

/// Largest header of the layers (ttrpc: 10 bytes; HTTP/2: 9).
const MAX_HEADER: usize = 10;

/// Default number of bytes kept while hunting for a frame boundary. A
/// candidate whose verification needs more than this is given up on.
pub(crate) const DEFAULT_HUNT_WINDOW: usize = 64 * 1024;

/// What one framing layer's header looks like.
pub(crate) trait Layout {
    /// Header length in bytes (<= [`MAX_HEADER`]).
    fn header_len(&self) -> usize;
    /// Largest payload this layer accepts; anything longer is garbage.
    fn max_payload(&self) -> usize;
    /// Payload length declared by a complete header.
    fn payload_len(&self, header: &[u8]) -> usize;
    /// In-sync check of a complete header: `false` means the stream is not
    /// where we think it is (garbage) and must be resynchronized. Must imply
    /// `payload_len(header) <= max_payload()`.
    fn acceptable(&self, header: &[u8]) -> bool;
    /// Hunting check of a header prefix (0..=`header_len` bytes): `false`
    /// if no header starting with these bytes is plausible. Must be at
    /// least as strict as [`Layout::acceptable`] on a complete header.
    fn plausible_prefix(&self, prefix: &[u8]) -> bool;
    /// Hunting: does the start of the payload (as much of it as is
    /// buffered) support this header enough to accept it without seeing the
    /// next header?
    fn payload_evidence(&self, header: &[u8], payload_prefix: &[u8]) -> bool;
}

/// A frame or a resynchronization, before the layer gives it a type.
#[derive(Debug)]
pub(crate) enum RawEvent {
    Frame {
        header: [u8; MAX_HEADER],
        payload: Vec<u8>,
        /// Stream offset just past the frame's last byte (bytes pushed
        /// before it, counting dropped ones): lets a caller tell which
        /// pushed chunk completed the frame, even when hunting delayed it.
        end: u64,
    },
    Resync {
        skipped: usize,
    },
}

/// Hunting verdict for one candidate offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Cannot be a header.
    Reject,
    /// Plausible so far; more bytes are needed to decide.
    Wait,
    /// Plausible header and supporting payload, next header not buffered.
    Weak,
    /// Plausible header followed by a plausible complete next header.
    Strong,
}

/// Length-prefixed framer with bounded buffering and resynchronization.
///
/// The resynchronization heuristic (used at start, after [`Framer::gap`] and
/// after garbage):
///
/// - A candidate offset must hold a plausible header (the layer's
///   [`Layout::plausible_prefix`]; partial headers are checked field by
///   field as far as they go).
/// - If the whole frame and the next complete header are buffered, the next
///   header decides: plausible → accept (strong), implausible → reject.
/// - Otherwise the candidate is accepted (weak) if the layer finds support
///   in the payload ([`Layout::payload_evidence`]) and the partial next
///   header, if any, is plausible; else it waits for more bytes.
/// - While the earliest candidate waits, a later candidate that is strongly
///   accepted wins (a bogus header with a huge length must not stall an idle,
///   low-traffic stream until that many bytes arrive).
/// - A candidate still waiting when the hunt window is full is rejected.
///
/// False positives: bytes inside a payload (protobuf, zero runs) can look
/// like a header chain. A strong accept needs two chained plausible headers
/// at exactly the declared distance; a weak accept needs one header plus the
/// layer's payload check. A false accept yields one or a few bogus frames
/// and, almost always, an implausible header soon after, which sends the
/// framer hunting again. Missed boundaries cost only the frames skipped.
pub(crate) struct Framer<L: Layout> {
    layout: L,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    base: u64,
    /// Start of unconsumed bytes in `buf`.
    pos: usize,
    hunting: bool,
    /// Bytes dropped since the last `Resync` event.
    skipped: usize,
    window: usize,
    out: VecDeque<RawEvent>,
}

impl<L: Layout> Framer<L> {
    /// A framer that starts hunting: a stream observed from its first byte
    /// is accepted at offset 0 without a `Resync` event; a stream joined
    /// mid-frame resynchronizes.
    pub(crate) fn new(layout: L, window: usize) -> Self {
        let h = layout.header_len().clamp(1, MAX_HEADER);
        // The window must at least hold a header, one byte, a header.
        let window = window.max(2 * h + 2);
        Framer {
            layout,
            buf: Vec::new(),
            base: 0,
            pos: 0,
            hunting: true,
            skipped: 0,
            window,
            out: VecDeque::new(),
        }
    }

    pub(crate) fn layout(&self) -> &L {
        &self.layout
    }

    fn header_len(&self) -> usize {
        self.layout.header_len().clamp(1, MAX_HEADER)
    }

    fn max_payload(&self) -> usize {
        self.layout.max_payload()
    }

    /// The most bytes this framer ever holds between calls.
    pub(crate) fn max_buffered(&self) -> usize {
        let synced = self.header_len().saturating_add(self.max_payload());
        synced.max(self.window)
    }

    /// Bytes held as partial state (not counting decoded, queued events).
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_synced(&self) -> bool {
        !self.hunting
    }

    pub(crate) fn next(&mut self) -> Option<RawEvent> {
        self.out.pop_front()
    }

    /// Bytes were lost: drop partial state and hunt for the next frame.
    pub(crate) fn gap(&mut self) {
        self.skipped = self.skipped.saturating_add(self.buffered());
        self.base += self.buf.len() as u64;
        self.buf.clear();
        self.pos = 0;
        self.hunting = true;
        self.shrink();
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            self.compact();
            let cap = if self.hunting {
                self.window
            } else {
                self.max_buffered()
            };
            let mut room = cap.saturating_sub(self.buf.len());
            if room == 0 {
                // Unreachable by the invariants of `process`; never loop
                // forever or grow without bound if they are ever broken.
                self.drop_bytes(1);
                self.hunting = true;
                room = 1;
            }
            let take = room.min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            self.process();
        }
        self.compact();
        self.shrink();
    }

    fn drop_bytes(&mut self, n: usize) {
        let n = n.min(self.buffered());
        self.pos += n;
        self.skipped = self.skipped.saturating_add(n);
    }

    fn compact(&mut self) {
        if self.pos > 0 {
            self.base += self.pos as u64;
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Give back the memory of one large frame once it is decoded.
    fn shrink(&mut self) {
        const KEEP: usize = 64 * 1024;
        if self.buf.capacity() > KEEP && self.buf.len() < self.buf.capacity() / 4 {
            self.buf.shrink_to(self.buf.len().max(KEEP));
        }
    }

    /// Decode everything decodable. Afterwards `buffered()` is below the
    /// current capacity (window when hunting, header + max payload when in
    /// sync), so `push` always has room.
    fn process(&mut self) {
        loop {
            if self.hunting {
                if !self.hunt() {
                    return;
                }
                // Accepted: in sync at `pos`.
                self.hunting = false;
                if self.skipped > 0 {
                    self.out.push_back(RawEvent::Resync {
                        skipped: self.skipped,
                    });
                    self.skipped = 0;
                }
            }
            let accepted_at = self.pos;
            if !self.synced_frames() {
                return;
            }
            // Garbage met while in sync: hunt from here.
            self.hunting = true;
            if self.pos == accepted_at {
                // A layout whose hunting check is looser than its in-sync
                // check would make us accept and reject the same offset
                // forever; step over it instead.
                self.drop_bytes(1);
            }
        }
    }

    /// Emit complete frames. Returns `true` if garbage was met.
    fn synced_frames(&mut self) -> bool {
        let h = self.header_len();
        loop {
            let rest = &self.buf[self.pos..];
            if rest.len() < h {
                return false;
            }
            let header = &rest[..h];
            if !self.layout.acceptable(header) {
                return true;
            }
            let n = self.layout.payload_len(header);
            if n > self.max_payload() {
                // `acceptable` promised otherwise; treat as garbage.
                return true;
            }
            let Some(end) = h.checked_add(n) else {
                return true;
            };
            if rest.len() < end {
                return false;
            }
            let mut hdr = [0u8; MAX_HEADER];
            hdr[..h].copy_from_slice(header);
            // Allocation sized by bytes already buffered.
            let payload = rest[h..end].to_vec();
            self.out.push_back(RawEvent::Frame {
                header: hdr,
                payload,
                end: self.base + (self.pos + end) as u64,
            });
            self.pos += end;
        }
    }

    /// Look for a frame boundary. Returns `true` with `pos` at the accepted
    /// offset, or `false` (waiting for bytes) with rejected bytes dropped.
    fn hunt(&mut self) -> bool {
        // Candidates may wait while fewer than `limit` bytes are held. Once
        // the window overflows, waiting candidates are given up on until
        // half the window is free, so the next pushes bring many bytes per
        // look-ahead scan (no quadratic re-scanning).
        let mut limit = self.window;
        loop {
            let rem = self.buffered();
            if rem == 0 {
                return false;
            }
            match self.verdict(self.pos) {
                Verdict::Reject => self.drop_bytes(1),
                Verdict::Weak | Verdict::Strong => return true,
                Verdict::Wait => {
                    if rem >= limit {
                        // Could not decide within the window: give up on it.
                        limit = self.window / 2;
                        self.drop_bytes(1);
                        continue;
                    }
                    let later = (self.pos + 1..self.buf.len())
                        .find(|&j| self.verdict(j) == Verdict::Strong);
                    if let Some(j) = later {
                        self.drop_bytes(j - self.pos);
                        return true;
                    }
                    return false;
                }
            }
        }
    }

    fn verdict(&self, at: usize) -> Verdict {
        let h = self.header_len();
        let avail = &self.buf[at..];
        let header = &avail[..h.min(avail.len())];
        if !self.layout.plausible_prefix(header) {
            return Verdict::Reject;
        }
        if header.len() < h {
            return Verdict::Wait;
        }
        let n = self.layout.payload_len(header);
        if n > self.max_payload() {
            return Verdict::Reject;
        }
        let end = h + n;
        if avail.len() >= end {
            let next = &avail[end..avail.len().min(end + h)];
            if !self.layout.plausible_prefix(next) {
                return Verdict::Reject;
            }
            if next.len() == h {
                return Verdict::Strong;
            }
        }
        let payload = &avail[h..avail.len().min(end)];
        if self.layout.payload_evidence(header, payload) {
            Verdict::Weak
        } else {
            Verdict::Wait
        }
    }
}

/// Big-endian u32 at `at`, if all four bytes are there.
pub(crate) fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// For a big-endian u32 field at `at` of which only a prefix may be present
/// in `bytes`: the smallest value the field can have (missing bytes zero),
/// or `None` if none of it is present.
pub(crate) fn be_u32_min(bytes: &[u8], at: usize) -> Option<u32> {
    let have = bytes.get(at..)?;
    if have.is_empty() {
        return None;
    }
    let mut b = [0u8; 4];
    let k = have.len().min(4);
    b[..k].copy_from_slice(&have[..k]);
    Some(u32::from_be_bytes(b))
}
