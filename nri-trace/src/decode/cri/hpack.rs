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
mod tests;
