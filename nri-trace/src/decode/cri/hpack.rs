//! HPACK (RFC 7541) decoding of the header blocks kubelet's grpc-go client
//! and the runtime's gRPC server exchange on the CRI socket.
//!
//! Hand-written because existing decoders (the `hpack` crate, h2's internal
//! one) fail a whole block on an index into a dynamic table they never saw;
//! a tracer that attaches mid-connection must keep decoding, report the
//! unknown pre-attach slots as unknowns, and learn them later.
//!
//! [`Decoder::decode`] takes one complete header block: the fragments of a
//! HEADERS frame and its CONTINUATION frames, concatenated (RFC 7540 §4.3).
//!
//! # Late attach
//!
//! A decoder built with [`Decoder::attached`] (or after [`Decoder::reattach`])
//! does not know the dynamic table's contents. Entries inserted after that
//! point are known and take the lowest dynamic indexes (§2.3.3: index 62 is
//! the newest); any index past them refers to an entry that was already in
//! the table at attach time. Those are named by [`Slot`]: `age` 0 is the
//! entry that was newest at attach, 1 the one before, and so on. Because
//! eviction is oldest-first (§4.4) and every post-attach entry is newer than
//! every pre-attach one, dynamic index `i` with `k` known entries maps to
//! slot `age = i - 1 - k`, so a slot keeps its identity as entries arrive.
//!
//! The pre-attach entries' sizes are unknown, so when they are evicted is
//! uncertain. The rule here: each pre-attach slot is assumed to take the
//! minimum size an entry can have (32 bytes, §4.1, empty name and value).
//! So at most `(capacity - known size) / 32` slots can still be present;
//! older ones (higher ages) are dropped as soon as that bound shrinks, and
//! all of them once the known entries alone overflow the table. This never
//! drops a slot the encoder may still reference; an index past the bound is
//! impossible and is an error. The capacity at attach is assumed to be the
//! SETTINGS limit (an earlier size update may have lowered it; assuming the
//! larger size errs on the same safe side). Once the bound reaches 0 the
//! decoder is fully synced and indexes are checked exactly.
//!
//! A literal may take its name from an unknown slot; an entry inserted that
//! way has a known value and an unknown name, whose length is counted as 0
//! (again a lower bound: an entry is never evicted before the encoder does;
//! the worst case is keeping an already-evicted oldest entry, which the
//! encoder can no longer reference).
//!
//! [`Decoder::learn`] records what a later stage inferred a slot held;
//! lookups of that slot then yield [`Field::Learned`].

use std::collections::{HashMap, VecDeque};

// Huffman string coding (§5.2, Appendix B) is in huffman.rs beside this file.

use super::huffman::{self, HuffmanError};

/// Default SETTINGS_HEADER_TABLE_SIZE (RFC 7540 §6.5.2).
pub(crate) const DEFAULT_MAX_TABLE_SIZE: usize = 4096;
/// Default bound on the decoded size of one header list (name + value + 32
/// per field, the SETTINGS_MAX_HEADER_LIST_SIZE measure, RFC 7540 §6.5.2).
pub(crate) const DEFAULT_MAX_HEADER_LIST_SIZE: usize = 64 * 1024;
/// Hard cap on any table size we accept, whatever SETTINGS say: bounds the
/// memory a garbage SETTINGS frame can make us hold.
pub const TABLE_SIZE_CAP: usize = 1 << 20;
/// Per-entry overhead in table size accounting (§4.1).
const ENTRY_OVERHEAD: usize = 32;
/// Number of static table entries (Appendix A).
const STATIC_LEN: usize = 61;

/// RFC 7541 Appendix A.
static STATIC_TABLE: [(&str, &str); STATIC_LEN] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Stable identity of a dynamic table entry that was present when the
/// decoder attached (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    /// Which attach (0 for the first, +1 per [`Decoder::reattach`]): slots
    /// of an earlier attach never alias later ones.
    pub epoch: u32,
    /// 0 = the newest entry at attach time, 1 = the one inserted before it.
    pub age: u32,
}

/// One decoded header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// Name and value both seen on the wire (or in the static table).
    Known { name: Vec<u8>, value: Vec<u8> },
    /// Depends on a pre-attach slot whose contents came from
    /// [`Decoder::learn`], not from the wire: for an indexed field name and
    /// value are the learned ones; for a literal that named the slot, the
    /// name is learned and the value seen.
    Learned {
        slot: Slot,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    /// Depends on a pre-attach slot nobody has learned. `value` is `Some`
    /// when a literal supplied the value and only the name came from the
    /// slot; `None` for an indexed reference to the slot (both unknown).
    Unknown { slot: Slot, value: Option<Vec<u8>> },
}

/// Facts about one decoded header block besides its fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockFlags {
    /// Some field is [`Field::Unknown`].
    pub has_unknown: bool,
    /// Some field is [`Field::Learned`].
    pub has_learned: bool,
    /// The last dynamic table size update at the block start (§6.3).
    pub table_size_update: Option<usize>,
    /// Positions in `fields` of never-indexed literals (§6.2.3): the
    /// encoder marked them sensitive; a sink may want to redact them.
    pub never_indexed: Vec<usize>,
    /// The header list exceeded the configured bound: fields past it were
    /// dropped (the block was still fully decoded, so the table is in sync).
    pub truncated: bool,
}

/// A decoded header block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderBlock {
    pub fields: Vec<Field>,
    pub flags: BlockFlags,
}

/// A malformed header block (RFC 7541 §3.1: a decoding error). After one,
/// the decoder no longer knows its table and [`Decoder::reattach`]es itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("hpack: block ends inside an integer")]
    TruncatedInteger,
    #[error("hpack: integer overflows 32 bits")]
    IntegerOverflow,
    #[error("hpack: string of {len} bytes, only {available} left in the block")]
    TruncatedString { len: usize, available: usize },
    /// §6.1: "The index value of 0 is not used."
    #[error("hpack: index 0")]
    ZeroIndex,
    /// §2.3.3: an index past the static and dynamic tables.
    #[error("hpack: index {index} past the tables ({dynamic} dynamic entries at most)")]
    BadIndex { index: usize, dynamic: usize },
    #[error("hpack: {0}")]
    Huffman(#[from] HuffmanError),
    /// §6.3: the new size must not exceed the SETTINGS limit.
    #[error("hpack: table size update to {size} above the limit {limit}")]
    SizeUpdateAboveLimit { size: usize, limit: usize },
    /// §4.2: size updates only at the start of a header block.
    #[error("hpack: table size update after a header field")]
    SizeUpdateNotAtStart,
}

/// Why [`Decoder::learn`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("slot {0:?} belongs to an earlier attach")]
    StaleEpoch(Slot),
    #[error("slot {0:?} cannot have existed: the table could not hold it")]
    NoSuchSlot(Slot),
    /// The learned entries would not have fit in the table at attach
    /// (they all coexisted in it), so at least one of them is wrong.
    #[error("learned entries exceed the table size at attach")]
    TooLarge,
}

/// Decoder limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_HEADER_TABLE_SIZE in force (clamped to [`TABLE_SIZE_CAP`]).
    pub max_table_size: usize,
    /// Bound on one decoded header list (see [`DEFAULT_MAX_HEADER_LIST_SIZE`]).
    pub max_header_list_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_table_size: DEFAULT_MAX_TABLE_SIZE,
            max_header_list_size: DEFAULT_MAX_HEADER_LIST_SIZE,
        }
    }
}

/// A dynamic table entry's name.
#[derive(Debug, Clone)]
enum Name {
    Seen(Vec<u8>),
    /// Taken from a pre-attach slot; resolved through `learned` on lookup.
    Slot(Slot),
}

#[derive(Debug, Clone)]
struct Entry {
    name: Name,
    value: Vec<u8>,
    /// §4.1 size; a lower bound when the name is an unlearned slot.
    size: usize,
}

/// Where an index points.
enum Hit<'a> {
    Static(&'static (&'static str, &'static str)),
    Dynamic(&'a Entry),
    Pre(Slot),
}

/// A name as resolved for a literal.
enum NameSrc {
    Seen(Vec<u8>),
    Learned(Slot, Vec<u8>),
    Unknown(Slot),
}

/// HPACK decoder state for one direction of one HTTP/2 connection.
#[derive(Debug, Clone)]
pub struct Decoder {
    limits: Limits,
    /// Current maximum table size (§4.2), <= `limits.max_table_size`.
    capacity: usize,
    /// Post-attach entries, newest first (front = dynamic index 1).
    entries: VecDeque<Entry>,
    /// Sum of `entries` sizes.
    size: usize,
    /// Upper bound on pre-attach slots still in the table; 0 = synced.
    unknown: usize,
    epoch: u32,
    /// Table capacity assumed at attach: learned entries must fit in it.
    attach_capacity: usize,
    learned: HashMap<u32, (Vec<u8>, Vec<u8>)>,
    learned_size: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Decoder {
    /// A decoder that has seen the connection from its start: the dynamic
    /// table starts empty (§2.3.2).
    pub fn new(limits: Limits) -> Self {
        let max = limits.max_table_size.min(TABLE_SIZE_CAP);
        Decoder {
            limits: Limits {
                max_table_size: max,
                ..limits
            },
            capacity: max,
            entries: VecDeque::new(),
            size: 0,
            unknown: 0,
            epoch: 0,
            attach_capacity: 0,
            learned: HashMap::new(),
            learned_size: 0,
        }
    }

    /// A decoder attached to a connection mid-stream: the dynamic table's
    /// contents are unknown (see the module doc).
    pub fn attached(limits: Limits) -> Self {
        let mut d = Self::new(limits);
        d.start_attach();
        d
    }

    /// Forget the table (after a capture gap or a decoding error) and start
    /// a new attach epoch; earlier [`Slot`]s are no longer resolvable.
    pub fn reattach(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.start_attach();
    }

    fn start_attach(&mut self) {
        self.capacity = self.limits.max_table_size;
        self.entries.clear();
        self.size = 0;
        self.unknown = self.capacity / ENTRY_OVERHEAD;
        self.attach_capacity = self.capacity;
        self.learned.clear();
        self.learned_size = 0;
    }

    /// SETTINGS_HEADER_TABLE_SIZE as acknowledged by the encoder's side:
    /// the bound for later size updates (§4.2). The current size is left
    /// to the encoder's size update, which §4.2 requires after a decrease.
    pub fn set_max_table_size(&mut self, max: usize) {
        self.limits.max_table_size = max.min(TABLE_SIZE_CAP);
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// True when the table holds no unknown pre-attach slots.
    pub fn is_synced(&self) -> bool {
        self.unknown == 0
    }

    /// Current maximum table size (§4.2).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Size of the known entries (§4.1); a lower bound when some entry's
    /// name is an unlearned slot.
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Upper bound on the pre-attach slots that may still be present.
    pub fn unknown_slots(&self) -> usize {
        self.unknown
    }

    /// The post-attach dynamic entries, newest (index 62) first, resolved
    /// like an indexed reference to each.
    pub fn dynamic_entries(&self) -> Vec<Field> {
        self.entries.iter().map(|e| self.entry_field(e)).collect()
    }

    /// Record what pre-attach `slot` held. Later lookups of the slot (and
    /// of entries that took their name from it) yield [`Field::Learned`].
    pub fn learn(&mut self, slot: Slot, name: &[u8], value: &[u8]) -> Result<(), LearnError> {
        if slot.epoch != self.epoch || self.attach_capacity == 0 {
            return Err(LearnError::StaleEpoch(slot));
        }
        // Slot `age` coexisted with `age` newer slots at attach.
        if (slot.age as usize) >= self.attach_capacity / ENTRY_OVERHEAD {
            return Err(LearnError::NoSuchSlot(slot));
        }
        let old = self
            .learned
            .get(&slot.age)
            .map_or(0, |(n, v)| n.len() + v.len() + ENTRY_OVERHEAD);
        let new = name.len() + value.len() + ENTRY_OVERHEAD;
        if self.learned_size - old + new > self.attach_capacity {
            return Err(LearnError::TooLarge);
        }
        self.learned_size = self.learned_size - old + new;
        self.learned
            .insert(slot.age, (name.to_vec(), value.to_vec()));
        Ok(())
    }

    /// Decode one complete header block. On error the decoder reattaches
    /// (its table state is unknown from then on).
    pub fn decode(&mut self, block: &[u8]) -> Result<HeaderBlock, HpackError> {
        let r = self.decode_inner(block);
        if r.is_err() {
            self.reattach();
        }
        r
    }

    fn decode_inner(&mut self, block: &[u8]) -> Result<HeaderBlock, HpackError> {
        let mut out = HeaderBlock::default();
        let mut list_size = 0usize;
        let mut pos = 0usize;
        let mut any_field = false;
        while pos < block.len() {
            let b = block[pos];
            let field = if b & 0x80 != 0 {
                // §6.1 Indexed Header Field.
                let index = decode_int(block, &mut pos, 7)?;
                self.indexed(index)?
            } else if b & 0xe0 == 0x20 {
                // §6.3 Dynamic Table Size Update.
                if any_field {
                    return Err(HpackError::SizeUpdateNotAtStart);
                }
                let size = decode_int(block, &mut pos, 5)?;
                self.size_update(size)?;
                out.flags.table_size_update = Some(size);
                continue;
            } else {
                // §6.2.1 (01), §6.2.2 (0000), §6.2.3 (0001).
                let (prefix, index_it, never) = if b & 0x40 != 0 {
                    (6, true, false)
                } else {
                    (4, false, b & 0x10 != 0)
                };
                let name_index = decode_int(block, &mut pos, prefix)?;
                let name = if name_index == 0 {
                    NameSrc::Seen(decode_string(block, &mut pos)?)
                } else {
                    self.name_of(name_index)?
                };
                let value = decode_string(block, &mut pos)?;
                if never && !out.flags.truncated {
                    out.flags.never_indexed.push(out.fields.len());
                }
                self.literal(name, value, index_it)
            };
            any_field = true;
            let cost = field_size(&field);
            if out.flags.truncated
                || list_size.saturating_add(cost) > self.limits.max_header_list_size
            {
                out.flags.truncated = true;
                if out.flags.never_indexed.last() == Some(&out.fields.len()) {
                    out.flags.never_indexed.pop();
                }
                continue;
            }
            list_size += cost;
            match &field {
                Field::Known { .. } => {}
                Field::Learned { .. } => out.flags.has_learned = true,
                Field::Unknown { .. } => out.flags.has_unknown = true,
            }
            out.fields.push(field);
        }
        Ok(out)
    }

    /// §2.3.3 index space: 1..=61 static, then dynamic newest first.
    fn lookup(&self, index: usize) -> Result<Hit<'_>, HpackError> {
        if index == 0 {
            return Err(HpackError::ZeroIndex);
        }
        if index <= STATIC_LEN {
            return Ok(Hit::Static(&STATIC_TABLE[index - 1]));
        }
        let d = index - STATIC_LEN - 1;
        if let Some(e) = self.entries.get(d) {
            return Ok(Hit::Dynamic(e));
        }
        let age = d - self.entries.len();
        if age < self.unknown {
            return Ok(Hit::Pre(Slot {
                epoch: self.epoch,
                age: age as u32,
            }));
        }
        Err(HpackError::BadIndex {
            index,
            dynamic: self.entries.len() + self.unknown,
        })
    }

    fn learned(&self, slot: Slot) -> Option<&(Vec<u8>, Vec<u8>)> {
        (slot.epoch == self.epoch)
            .then(|| self.learned.get(&slot.age))
            .flatten()
    }

    fn entry_field(&self, e: &Entry) -> Field {
        match &e.name {
            Name::Seen(n) => Field::Known {
                name: n.clone(),
                value: e.value.clone(),
            },
            Name::Slot(s) => match self.learned(*s) {
                Some((n, _)) => Field::Learned {
                    slot: *s,
                    name: n.clone(),
                    value: e.value.clone(),
                },
                None => Field::Unknown {
                    slot: *s,
                    value: Some(e.value.clone()),
                },
            },
        }
    }

    fn indexed(&self, index: usize) -> Result<Field, HpackError> {
        Ok(match self.lookup(index)? {
            Hit::Static((n, v)) => Field::Known {
                name: n.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            },
            Hit::Dynamic(e) => self.entry_field(e),
            Hit::Pre(slot) => match self.learned(slot) {
                Some((n, v)) => Field::Learned {
                    slot,
                    name: n.clone(),
                    value: v.clone(),
                },
                None => Field::Unknown { slot, value: None },
            },
        })
    }

    fn name_of(&self, index: usize) -> Result<NameSrc, HpackError> {
        let slot = match self.lookup(index)? {
            Hit::Static((n, _)) => return Ok(NameSrc::Seen(n.as_bytes().to_vec())),
            Hit::Dynamic(Entry {
                name: Name::Seen(n),
                ..
            }) => return Ok(NameSrc::Seen(n.clone())),
            Hit::Dynamic(Entry {
                name: Name::Slot(s),
                ..
            }) => *s,
            Hit::Pre(s) => s,
        };
        Ok(match self.learned(slot) {
            Some((n, _)) => NameSrc::Learned(slot, n.clone()),
            None => NameSrc::Unknown(slot),
        })
    }

    fn literal(&mut self, name: NameSrc, value: Vec<u8>, index_it: bool) -> Field {
        if index_it {
            let (entry_name, name_len) = match &name {
                NameSrc::Seen(n) => (Name::Seen(n.clone()), n.len()),
                NameSrc::Learned(s, n) => (Name::Slot(*s), n.len()),
                NameSrc::Unknown(s) => (Name::Slot(*s), 0),
            };
            let size = name_len + value.len() + ENTRY_OVERHEAD;
            self.insert(Entry {
                name: entry_name,
                value: value.clone(),
                size,
            });
        }
        match name {
            NameSrc::Seen(name) => Field::Known { name, value },
            NameSrc::Learned(slot, name) => Field::Learned { slot, name, value },
            NameSrc::Unknown(slot) => Field::Unknown {
                slot,
                value: Some(value),
            },
        }
    }

    /// §4.4: evict oldest entries until the new one fits, then add it; an
    /// entry larger than the table empties it and is not added.
    fn insert(&mut self, entry: Entry) {
        if self.size + entry.size > self.capacity {
            // Pre-attach slots are the oldest: all of them go first.
            self.unknown = 0;
        }
        if entry.size > self.capacity {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.capacity - entry.size);
        self.size += entry.size;
        self.entries.push_front(entry);
        self.shrink_unknown();
    }

    /// §6.3 / §4.3.
    fn size_update(&mut self, size: usize) -> Result<(), HpackError> {
        if size > self.limits.max_table_size {
            return Err(HpackError::SizeUpdateAboveLimit {
                size,
                limit: self.limits.max_table_size,
            });
        }
        self.capacity = size;
        if self.size > size {
            self.unknown = 0;
        }
        self.evict_to(size);
        self.shrink_unknown();
        Ok(())
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size,
                None => break,
            }
        }
    }

    /// The eviction rule for pre-attach slots (module doc): at least 32
    /// bytes each, so only this many can still fit beside the known ones.
    fn shrink_unknown(&mut self) {
        let room = self.capacity.saturating_sub(self.size) / ENTRY_OVERHEAD;
        self.unknown = self.unknown.min(room);
    }
}

/// Header list size of a field (RFC 7540 §6.5.2); unknown parts count 0.
fn field_size(f: &Field) -> usize {
    ENTRY_OVERHEAD
        + match f {
            Field::Known { name, value } | Field::Learned { name, value, .. } => {
                name.len() + value.len()
            }
            Field::Unknown { value, .. } => value.as_ref().map_or(0, Vec::len),
        }
}

/// §5.1 integer with an N-bit prefix, starting at `block[*pos]` (whose
/// high bits carry the representation's pattern). Values are limited to 32
/// bits, far above anything valid here, so the shift never overflows and a
/// run of 0x80 continuation bytes ends in an error, not a loop.
fn decode_int(block: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let mask = (1u8 << prefix) - 1;
    let first = *block.get(*pos).ok_or(HpackError::TruncatedInteger)?;
    *pos += 1;
    let mut value = u64::from(first & mask);
    if value < u64::from(mask) {
        return Ok(value as usize);
    }
    let mut shift = 0u32;
    loop {
        let b = *block.get(*pos).ok_or(HpackError::TruncatedInteger)?;
        *pos += 1;
        if shift > 28 {
            return Err(HpackError::IntegerOverflow);
        }
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(HpackError::IntegerOverflow);
        }
        if b & 0x80 == 0 {
            return Ok(value as usize);
        }
        shift += 7;
    }
}

/// §5.2 string literal. The length is checked against the bytes left
/// before anything is allocated.
fn decode_string(block: &[u8], pos: &mut usize) -> Result<Vec<u8>, HpackError> {
    let huffman_coded = block.get(*pos).is_some_and(|b| b & 0x80 != 0);
    let len = decode_int(block, pos, 7)?;
    let available = block.len() - *pos;
    if len > available {
        return Err(HpackError::TruncatedString { len, available });
    }
    let raw = &block[*pos..*pos + len];
    *pos += len;
    if huffman_coded {
        let mut out = Vec::new();
        huffman::decode(raw, &mut out)?;
        Ok(out)
    } else {
        Ok(raw.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_strategies::{bytes_below, config};
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::TestRunner;
    use std::cell::Cell;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn known(name: &str, value: &str) -> Field {
        Field::Known {
            name: name.into(),
            value: value.into(),
        }
    }

    fn fields(list: &[(&str, &str)]) -> Vec<Field> {
        list.iter().map(|(n, v)| known(n, v)).collect()
    }

    /// Decode `block`, check its fields, the dynamic table (newest first)
    /// and its size, as the RFC's Appendix C lists them.
    fn step(
        d: &mut Decoder,
        block: &str,
        want: &[(&str, &str)],
        table: &[(&str, &str)],
        size: usize,
    ) {
        let got = d.decode(&hex(block)).unwrap();
        assert_eq!(got.fields, fields(want));
        assert!(!got.flags.has_unknown && !got.flags.truncated);
        assert_eq!(d.dynamic_entries(), fields(table));
        assert_eq!(d.table_size(), size);
        assert!(d.is_synced());
    }

    fn limits(table: usize) -> Limits {
        Limits {
            max_table_size: table,
            ..Limits::default()
        }
    }

    // ---- RFC 7541 Appendix C: an encoder independent of ours ----

    #[test]
    fn c1_integers() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix;
        // C.1.3: 42 on a byte boundary (8-bit prefix, which HPACK never
        // uses; the same byte reads as 42 with the 7-bit prefix). The high
        // bits of the first byte are the representation's and are masked.
        for (bytes, prefix, want) in [
            (&[0xea_u8][..], 5, 10),
            (&[0x1f, 0x9a, 0x0a], 5, 1337),
            (&[0x2a], 7, 42),
        ] {
            let mut pos = 0;
            assert_eq!(decode_int(bytes, &mut pos, prefix), Ok(want));
            assert_eq!(pos, bytes.len());
        }
    }

    #[test]
    fn c2_single_representations() {
        // C.2.1 literal with indexing.
        let mut d = Decoder::default();
        step(
            &mut d,
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            &[("custom-key", "custom-header")],
            &[("custom-key", "custom-header")],
            55,
        );
        // C.2.2 literal without indexing.
        let mut d = Decoder::default();
        step(
            &mut d,
            "040c 2f73 616d 706c 652f 7061 7468",
            &[(":path", "/sample/path")],
            &[],
            0,
        );
        // C.2.3 never indexed.
        let mut d = Decoder::default();
        let got = d
            .decode(&hex("1008 7061 7373 776f 7264 0673 6563 7265 74"))
            .unwrap();
        assert_eq!(got.fields, fields(&[("password", "secret")]));
        assert_eq!(got.flags.never_indexed, vec![0]);
        assert_eq!(d.table_size(), 0);
        // C.2.4 indexed.
        let mut d = Decoder::default();
        step(&mut d, "82", &[(":method", "GET")], &[], 0);
    }

    const REQ1: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    const REQ2: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ];
    const REQ3: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    const REQ_T1: &[(&str, &str)] = &[(":authority", "www.example.com")];
    const REQ_T2: &[(&str, &str)] = &[
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ];
    const REQ_T3: &[(&str, &str)] = &[
        ("custom-key", "custom-value"),
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ];

    #[test]
    fn c3_requests_without_huffman() {
        let mut d = Decoder::default();
        step(
            &mut d,
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            REQ1,
            REQ_T1,
            57,
        );
        step(
            &mut d,
            "8286 84be 5808 6e6f 2d63 6163 6865",
            REQ2,
            REQ_T2,
            110,
        );
        step(
            &mut d,
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            REQ3,
            REQ_T3,
            164,
        );
    }

    #[test]
    fn c4_requests_with_huffman() {
        let mut d = Decoder::default();
        step(
            &mut d,
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            REQ1,
            REQ_T1,
            57,
        );
        step(&mut d, "8286 84be 5886 a8eb 1064 9cbf", REQ2, REQ_T2, 110);
        step(
            &mut d,
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            REQ3,
            REQ_T3,
            164,
        );
    }

    const DATE1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
    const DATE2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
    const LOC: &str = "https://www.example.com";
    const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

    /// C.5/C.6 run with SETTINGS_HEADER_TABLE_SIZE 256, so the second and
    /// third responses evict.
    fn responses(blocks: [&str; 3]) {
        let mut d = Decoder::new(limits(256));
        step(
            &mut d,
            blocks[0],
            &[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", DATE1),
                ("location", LOC),
            ],
            &[
                ("location", LOC),
                ("date", DATE1),
                ("cache-control", "private"),
                (":status", "302"),
            ],
            222,
        );
        step(
            &mut d,
            blocks[1],
            &[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", DATE1),
                ("location", LOC),
            ],
            &[
                (":status", "307"),
                ("location", LOC),
                ("date", DATE1),
                ("cache-control", "private"),
            ],
            222,
        );
        step(
            &mut d,
            blocks[2],
            &[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", DATE2),
                ("location", LOC),
                ("content-encoding", "gzip"),
                ("set-cookie", COOKIE),
            ],
            &[
                ("set-cookie", COOKIE),
                ("content-encoding", "gzip"),
                ("date", DATE2),
            ],
            215,
        );
    }

    #[test]
    fn c5_responses_without_huffman() {
        responses([
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        ]);
    }

    #[test]
    fn c6_responses_with_huffman() {
        responses([
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ]);
    }

    // ---- late attach ----

    const SLOT0: Slot = Slot { epoch: 0, age: 0 };
    const SLOT1: Slot = Slot { epoch: 0, age: 1 };

    /// Literal with incremental indexing, literal name (§6.2.1).
    fn insert_block(name: &str, value: &str) -> Vec<u8> {
        let mut b = vec![0x40, name.len() as u8];
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
        b
    }

    #[test]
    fn attach_unknown_slot_is_stable_and_learnable() {
        let mut d = Decoder::attached(Limits::default());
        assert!(!d.is_synced());
        // Index 62 and 63: the two newest pre-attach entries.
        let got = d.decode(&[0xbe, 0xbf]).unwrap();
        assert_eq!(
            got.fields,
            vec![
                Field::Unknown {
                    slot: SLOT0,
                    value: None
                },
                Field::Unknown {
                    slot: SLOT1,
                    value: None
                }
            ]
        );
        assert!(got.flags.has_unknown);

        // One known insertion shifts the pre-attach slots by one index.
        d.decode(&insert_block("a", "b")).unwrap();
        let got = d.decode(&[0xbe, 0xbf, 0xc0]).unwrap();
        assert_eq!(
            got.fields,
            vec![
                known("a", "b"),
                Field::Unknown {
                    slot: SLOT0,
                    value: None
                },
                Field::Unknown {
                    slot: SLOT1,
                    value: None
                },
            ]
        );

        // A later stage infers slot 0; lookups now yield it as learned.
        d.learn(SLOT0, b"content-type", b"application/grpc")
            .unwrap();
        let got = d.decode(&[0xbf, 0xc0]).unwrap();
        assert_eq!(
            got.fields,
            vec![
                Field::Learned {
                    slot: SLOT0,
                    name: b"content-type".to_vec(),
                    value: b"application/grpc".to_vec(),
                },
                Field::Unknown {
                    slot: SLOT1,
                    value: None
                },
            ]
        );
        assert!(got.flags.has_learned && got.flags.has_unknown);
    }

    #[test]
    fn attach_literal_with_unknown_name() {
        let mut d = Decoder::attached(Limits::default());
        // §6.2.1 with name index 62 (fits the 6-bit prefix: 0x40 | 62 =
        // 0x7e), literal value "v".
        let got = d.decode(&[0x7e, 0x01, b'v']).unwrap();
        let partial = Field::Unknown {
            slot: SLOT0,
            value: Some(b"v".to_vec()),
        };
        assert_eq!(got.fields, vec![partial.clone()]);
        // The inserted entry (index 62) keeps the slot's unknown name; the
        // pre-attach slot 0 is now index 63.
        let got = d.decode(&[0xbe, 0xbf]).unwrap();
        assert_eq!(
            got.fields,
            vec![
                partial,
                Field::Unknown {
                    slot: SLOT0,
                    value: None
                }
            ]
        );
        d.learn(SLOT0, b"te", b"trailers").unwrap();
        let got = d.decode(&[0xbe]).unwrap();
        assert_eq!(
            got.fields,
            vec![Field::Learned {
                slot: SLOT0,
                name: b"te".to_vec(),
                value: b"v".to_vec(),
            }]
        );
    }

    #[test]
    fn attach_eviction_rule_and_sync() {
        let mut d = Decoder::attached(Limits::default());
        assert_eq!(d.unknown_slots(), 4096 / 32);
        // Size update to 100: at most 3 pre-attach slots of >= 32 bytes.
        d.decode(&[0x3f, 0x45]).unwrap(); // 31 + 69 = 100
        assert_eq!(d.capacity(), 100);
        assert_eq!(d.unknown_slots(), 3);
        // Indexes 62..=64 are slots 0..=2; 65 cannot exist.
        assert!(d.decode(&[0xbe, 0xbf, 0xc0]).is_ok());
        assert_eq!(
            d.decode(&[0xc1]),
            Err(HpackError::BadIndex {
                index: 65,
                dynamic: 3
            })
        );
        // The error reattached the decoder in a new epoch.
        assert!(!d.is_synced());
        assert_eq!(
            d.decode(&[0xbe]).unwrap().fields,
            vec![Field::Unknown {
                slot: Slot { epoch: 1, age: 0 },
                value: None
            }]
        );
        assert_eq!(
            d.learn(SLOT0, b"x", b"y"),
            Err(LearnError::StaleEpoch(SLOT0))
        );

        // A known entry of 34 + 32 = 66 bytes leaves room for one slot in
        // 100; a second one overflows: every pre-attach slot is gone.
        let mut d = Decoder::attached(Limits::default());
        d.decode(&[0x3f, 0x45]).unwrap();
        let v = "x".repeat(33);
        d.decode(&insert_block("k", &v)).unwrap();
        assert_eq!(d.unknown_slots(), 1);
        d.decode(&insert_block("k", &v)).unwrap();
        assert!(d.is_synced());
        assert_eq!(d.dynamic_entries(), vec![known("k", &v)]);
        assert_eq!(
            d.decode(&[0xbf]),
            Err(HpackError::BadIndex {
                index: 63,
                dynamic: 1
            })
        );
    }

    #[test]
    fn learn_bounds() {
        let mut d = Decoder::attached(limits(256));
        let slot = |age| Slot { epoch: 0, age };
        assert_eq!(
            d.learn(slot(8), b"a", b"b"),
            Err(LearnError::NoSuchSlot(slot(8)))
        );
        d.learn(slot(0), &[b'n'; 100], &[b'v'; 100]).unwrap();
        // 232 + 33 > 256: these entries could not have coexisted.
        assert_eq!(d.learn(slot(1), b"a", b""), Err(LearnError::TooLarge));
        // Re-learning the same slot replaces it.
        d.learn(slot(0), b"a", b"b").unwrap();
        d.learn(slot(1), b"a", b"").unwrap();
        let mut fresh = Decoder::default();
        assert!(fresh.learn(SLOT0, b"a", b"b").is_err());
    }

    // ---- errors ----

    #[test]
    fn malformed_blocks() {
        let err = |b: &[u8]| Decoder::default().decode(b).unwrap_err();
        assert_eq!(err(&[0x80]), HpackError::ZeroIndex);
        assert_eq!(
            err(&[0xbe]),
            HpackError::BadIndex {
                index: 62,
                dynamic: 0
            }
        );
        assert_eq!(err(&[0xff]), HpackError::TruncatedInteger);
        assert_eq!(err(&[0xff, 0x80, 0x80]), HpackError::TruncatedInteger);
        assert_eq!(
            err(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            HpackError::IntegerOverflow
        );
        assert_eq!(
            err(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            HpackError::IntegerOverflow
        );
        assert_eq!(err(&[0x40]), HpackError::TruncatedInteger);
        assert_eq!(
            err(&[0x40, 0x05, b'a']),
            HpackError::TruncatedString {
                len: 5,
                available: 1
            }
        );
        // A length of 2^32 - 1 declared with 3 bytes of input: refused
        // before any allocation.
        assert!(matches!(
            err(&[0x04, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            HpackError::TruncatedString { .. } | HpackError::IntegerOverflow
        ));
        // Huffman EOS (30 ones + padding) and bad padding (§5.2).
        assert_eq!(
            err(&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]),
            HpackError::Huffman(HuffmanError::Eos)
        );
        assert_eq!(
            err(&[0x04, 0x81, 0x18]),
            HpackError::Huffman(HuffmanError::Padding)
        );
        // Size update above the SETTINGS limit, and after a field (§4.2).
        assert_eq!(
            err(&[0x3f, 0xe2, 0x1f]),
            HpackError::SizeUpdateAboveLimit {
                size: 4097,
                limit: 4096
            }
        );
        assert_eq!(err(&[0x82, 0x20]), HpackError::SizeUpdateNotAtStart);
        // Two updates at the start are fine (§4.2: shrink then grow).
        let mut d = Decoder::default();
        let got = d.decode(&[0x20, 0x3f, 0xe1, 0x1f, 0x82]).unwrap();
        assert_eq!(got.flags.table_size_update, Some(4096));
        assert_eq!(got.fields, fields(&[(":method", "GET")]));
    }

    #[test]
    fn settings_limit_is_honoured() {
        let mut d = Decoder::default();
        d.set_max_table_size(8192);
        d.decode(&[0x3f, 0xe1, 0x3f]).unwrap(); // 31 + 8161 = 8192
        assert_eq!(d.capacity(), 8192);
        d.set_max_table_size(usize::MAX);
        assert_eq!(d.limits().max_table_size, TABLE_SIZE_CAP);
    }

    #[test]
    fn header_list_bound_truncates_but_keeps_table() {
        let mut d = Decoder::new(Limits {
            max_table_size: 4096,
            max_header_list_size: 100,
        });
        let mut block = Vec::new();
        for i in 0..5u8 {
            block.extend(insert_block("name", &format!("value-{i}")));
        }
        let got = d.decode(&block).unwrap();
        // 4 + 7 + 32 = 43 per field: two fit in 100.
        assert_eq!(got.fields.len(), 2);
        assert!(got.flags.truncated);
        // All five were inserted regardless: the table stays in sync.
        assert_eq!(d.dynamic_entries().len(), 5);
        assert_eq!(d.dynamic_entries()[0], known("name", "value-4"));
    }

    // ---- robustness ----

    fn check_bounds(d: &Decoder, got: &Result<HeaderBlock, HpackError>, lim: Limits) {
        assert!(d.capacity() <= lim.max_table_size);
        assert!(d.table_size() <= d.capacity());
        assert!(d.entries.len() <= d.capacity() / ENTRY_OVERHEAD);
        let stored: usize = d
            .entries
            .iter()
            .map(|e| e.value.len() + ENTRY_OVERHEAD)
            .sum();
        assert!(stored <= d.capacity());
        assert!(d.unknown <= lim.max_table_size / ENTRY_OVERHEAD);
        if let Ok(b) = got {
            assert!(b.fields.iter().map(field_size).sum::<usize>() <= lim.max_header_list_size);
        }
    }

    /// A random block below 64 bytes: pure noise, or (half of them) noise
    /// whose bytes after the first are masked to their low 3 bits one time
    /// in three, which makes short strings and small indexes likely.
    fn noise_block() -> impl Strategy<Value = Vec<u8>> {
        (bytes_below(64), any::<bool>()).prop_perturb(|(mut block, biased), mut rng| {
            if biased {
                for b in block.iter_mut().skip(1) {
                    if rng.next_u32() % 3 == 0 {
                        *b &= 0x07;
                    }
                }
            }
            block
        })
    }

    /// One round of the noise property: a block for both decoders, and
    /// for each, one time in fifty, a slot (age below 20) to learn the
    /// block as a name of.
    fn noise_round() -> impl Strategy<Value = (Vec<u8>, [Option<u32>; 2])> {
        let learn = || prop::option::weighted(0.02, 0u32..20);
        (noise_block(), [learn(), learn()])
    }

    /// Random blocks (pure noise, and noise biased towards valid
    /// representations), 200 rounds per case on a synced and an attached
    /// decoder, never panic and never exceed the bounds; learning a slot
    /// keeps within the attach capacity.
    #[test]
    fn random_blocks_never_panic() {
        let lim = Limits {
            max_table_size: 512,
            max_header_list_size: 1024,
        };
        // Decodes that succeeded, and all decodes, over every case.
        let ok = Cell::new(0usize);
        let decodes = Cell::new(0usize);
        let rounds = prop::collection::vec(noise_round(), 200);
        TestRunner::new(config(100))
            .run(&rounds, |rounds| {
                let mut synced = Decoder::new(lim);
                let mut attached = Decoder::attached(lim);
                for (block, learn) in rounds {
                    for (d, learn) in [&mut synced, &mut attached].into_iter().zip(learn) {
                        let got = d.decode(&block);
                        ok.set(ok.get() + usize::from(got.is_ok()));
                        decodes.set(decodes.get() + 1);
                        check_bounds(d, &got, lim);
                        if let Some(age) = learn {
                            let slot = Slot {
                                epoch: d.epoch,
                                age,
                            };
                            let _ = d.learn(slot, &block, b"v");
                            prop_assert!(d.learned_size <= d.attach_capacity);
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
        // At least one valid block in 40 (1000 of 40,000 decodes at the
        // default 100 cases) for the noise to exercise the table.
        assert!(
            ok.get() * 40 > decodes.get(),
            "too few valid blocks ({} of {}) to exercise the table",
            ok.get(),
            decodes.get()
        );
    }

    /// One field of a random header list: an indexed field one time in four
    /// (when the table is not empty; the `Index` picks the entry), else a
    /// literal (name below 12 bytes, value below 40) with incremental
    /// indexing, without indexing or never indexed, each string Huffman
    /// coded or not.
    #[derive(Debug, Clone)]
    struct FieldOp {
        indexed: Option<Index>,
        name: Vec<u8>,
        value: Vec<u8>,
        representation: u8,
        huff_name: bool,
        huff_value: bool,
    }

    fn field_op() -> impl Strategy<Value = FieldOp> {
        (
            prop::option::weighted(0.25, any::<Index>()),
            bytes_below(12),
            bytes_below(40),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(indexed, name, value, representation, huff_name, huff_value)| FieldOp {
                    indexed,
                    name,
                    value,
                    representation,
                    huff_name,
                    huff_value,
                },
            )
    }

    proptest! {
        #![proptest_config(config(40))]

        /// A minimal encoder (tests only) for random header lists: our
        /// decoder must return exactly what was encoded, whatever mix of
        /// representations, Huffman and table pressure, block after block
        /// (up to 100 blocks of fewer than 6 fields on one decoder).
        #[test]
        fn random_round_trip(
            blocks in prop::collection::vec(prop::collection::vec(field_op(), 0..6), 1..=100),
        ) {
            fn int(out: &mut Vec<u8>, pattern: u8, prefix: u8, mut v: usize) {
                let max = (1usize << prefix) - 1;
                if v < max {
                    out.push(pattern | v as u8);
                    return;
                }
                out.push(pattern | max as u8);
                v -= max;
                while v >= 128 {
                    out.push((v % 128) as u8 | 0x80);
                    v /= 128;
                }
                out.push(v as u8);
            }
            fn string(out: &mut Vec<u8>, s: &[u8], huff: bool) {
                if huff {
                    let h = huffman::encode(s);
                    int(out, 0x80, 7, h.len());
                    out.extend(h);
                } else {
                    int(out, 0, 7, s.len());
                    out.extend_from_slice(s);
                }
            }
            let mut d = Decoder::new(limits(300));
            // The encoder's view of the table: (name, value), newest first.
            let mut table: VecDeque<(Vec<u8>, Vec<u8>)> = VecDeque::new();
            for ops in blocks {
                let mut block = Vec::new();
                let mut want = Vec::new();
                for op in ops {
                    if let Some(pick) = op.indexed.filter(|_| !table.is_empty()) {
                        let i = pick.index(table.len());
                        int(&mut block, 0x80, 7, STATIC_LEN + 1 + i);
                        let (n, v) = table[i].clone();
                        want.push(Field::Known { name: n, value: v });
                        continue;
                    }
                    let FieldOp { name, value, .. } = op;
                    let (pattern, prefix, index_it) = match op.representation {
                        0 => (0x40, 6, true),
                        1 => (0x00, 4, false),
                        _ => (0x10, 4, false),
                    };
                    int(&mut block, pattern, prefix, 0);
                    string(&mut block, &name, op.huff_name);
                    string(&mut block, &value, op.huff_value);
                    if index_it {
                        let size = name.len() + value.len() + 32;
                        let mut total: usize =
                            table.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
                        while total + size > 300 {
                            match table.pop_back() {
                                Some((n, v)) => total -= n.len() + v.len() + 32,
                                None => break,
                            }
                        }
                        if size <= 300 {
                            table.push_front((name.clone(), value.clone()));
                        }
                    }
                    want.push(Field::Known { name, value });
                }
                let got = d.decode(&block).unwrap();
                prop_assert_eq!(got.fields, want);
                let t: Vec<Field> = table
                    .iter()
                    .map(|(n, v)| Field::Known {
                        name: n.clone(),
                        value: v.clone(),
                    })
                    .collect();
                prop_assert_eq!(d.dynamic_entries(), t);
            }
        }
    }
}
