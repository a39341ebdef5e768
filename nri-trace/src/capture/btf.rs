//! Member offsets of kernel structs, read from the kernel's BTF at runtime.
//!
//! The eBPF programs are built with aya-ebpf, which has no CO-RE
//! relocations, so a program that reads a kernel struct member (the
//! `sched_process_exit` tracepoint reads `task_struct.exit_code` with
//! `bpf_probe_read_kernel(task + offset)`) gets the member's byte offset from
//! user space, which looks it up here in `/sys/kernel/btf/vmlinux`.
//!
//! This is a small parser of our own, not `aya_obj::btf`: aya 0.14 re-exports
//! only `Btf` and `BtfError` from aya-obj 0.3, and even aya-obj keeps what is
//! needed crate-private (`Btf::type_by_id`, `Struct::members`, `BtfMember`'s
//! fields are `pub(crate)`), so its public API can find a type id by name
//! but not a struct's members or their offsets.
//!
//! Nor is it one of the BTF crates on crates.io. Both were tried against
//! what this file guarantees, with the blobs of its tests and the 6.18
//! kernel's `/sys/kernel/btf/vmlinux` (truncated and corrupted too):
//!
//! - `btfparse` 1.3.9. Its member lookup, `TypeInformation::offset_of`,
//!   bounds neither typedef chains nor anonymous-member recursion: a typedef
//!   to itself loops forever, and an anonymous struct that contains itself,
//!   or random corruption of the tests' sample blob, overflows the stack and
//!   aborts the process (no panic to catch). `id_of` keeps one type per name
//!   (the last one, of any kind), so with two `struct s` and a `typedef s` it
//!   searches the wrong one. Its parser rejects the whole blob when a struct
//!   without kind_flag has a member at a bit offset that is not a multiple
//!   of 8 (valid BTF: an old-style bitfield), does not check the version (a
//!   version-2 blob is read as version 1), and its `Error` implements neither
//!   `Display` nor `std::error::Error`, so it cannot be a `#[source]`. Only
//!   its parser survived the malformed blobs; the lookup, the limits and the
//!   checks would all stay here.
//! - `btf-rs` 2.0.0. It parsed every malformed blob without a panic, but it
//!   resolves one type at a time and has no member lookup, so the
//!   anonymous-member search, the typedef/qualifier chain and their limits
//!   would stay here. Its `Int` does not expose the bit width or offset
//!   (`btf_int::bits()` is crate-private), so a bitfield in a struct without
//!   kind_flag (an int narrower than its size, at a byte-aligned bit offset)
//!   would come back as a byte offset instead of [`BtfError::Bitfield`]
//!   (6.18's BTF has no such member: pahole sets kind_flag on every struct
//!   with bitfields; other BTF producers may not). A type name offset into
//!   the middle of a string, which the kernel accepts, fails the whole parse.
//!   It copies every string and type into owned values: 100-170 ms and 47 MB
//!   resident per lookup in vmlinux in a release build, where this parser
//!   takes about 1 ms and 8 MB (both counting the 5.5 MB blob). And it is
//!   LGPL-2.1-or-later, an obligation that no dependency of this MIT OR
//!   Apache-2.0 binary carries today.
//!
//! The format follows the kernel's `Documentation/bpf/btf.rst` ("BTF Type
//! and String Encoding"): a header (`struct btf_header`), a type section of
//! `struct btf_type` records, each followed by kind-specific data, and a
//! string section of NUL-terminated names. Type ids start at 1 (0 is
//! `void`) in the order of the type section.
//!
//! The blob is untrusted input: no function here panics on any input, no
//! allocation is sized from a length in the blob, and every loop is bounded
//! (by the blob's size, by [`MAX_ANON_DEPTH`], [`MAX_MODIFIER_CHAIN`] and
//! [`MAX_MEMBER_VISITS`]). Bad input is a [`BtfError`].

use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the running kernel exposes its BTF (CONFIG_DEBUG_INFO_BTF).
pub(crate) const KERNEL_BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// Largest kernel BTF file read (vmlinux BTF is a few MiB).
pub(crate) const MAX_BTF_FILE_SIZE: u64 = 256 << 20;

/// How deep anonymous struct/union members are searched (kernel structs
/// nest them 3-4 deep at most).
pub(crate) const MAX_ANON_DEPTH: u32 = 8;

/// How many typedef/const/volatile/restrict/type-tag links are followed to
/// the type under them.
pub(crate) const MAX_MODIFIER_CHAIN: u32 = 32;

/// How many struct/union members one lookup visits at most, over all
/// candidate structs and nested anonymous members (task_struct has ~250).
pub(crate) const MAX_MEMBER_VISITS: u32 = 1 << 22;

/// Errors of BTF lookups; every message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The kernel BTF file could not be read.
    #[error(
        "kernel BTF {} not readable ({source}): is CONFIG_DEBUG_INFO_BTF enabled? \
         exit codes will be shown as unknown",
        path.display()
    )]
    Unreadable {
        /// The file that was read.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The kernel BTF file is larger than [`MAX_BTF_FILE_SIZE`].
    #[error(
        "kernel BTF {} is larger than {limit} bytes: not a BTF blob? \
         exit codes will be shown as unknown",
        path.display()
    )]
    TooLarge {
        /// The file that was read.
        path: PathBuf,
        /// The size limit.
        limit: u64,
    },
    /// The blob does not start with the BTF magic 0xeB9F in either byte order.
    #[error(
        "not a BTF blob: magic {found:#06x}, expected 0xeb9f; \
         pass a raw BTF file such as {KERNEL_BTF_PATH}"
    )]
    BadMagic {
        /// The first two bytes, little-endian.
        found: u16,
    },
    /// A BTF version other than 1.
    #[error(
        "unsupported BTF version {0} (only version 1 is known): update nri-trace's BTF parser"
    )]
    UnsupportedVersion(u8),
    /// Part of the blob lies beyond its end.
    #[error(
        "BTF blob truncated: {what} ends at byte {end} but the blob has {len} bytes; \
         pass the whole file (e.g. {KERNEL_BTF_PATH})"
    )]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it would end.
        end: u64,
        /// The size of the blob (or of the section read).
        len: u64,
    },
    /// The blob breaks a rule of the BTF format.
    #[error("malformed BTF: {0}; is this a raw BTF file such as {KERNEL_BTF_PATH}?")]
    Malformed(String),
    /// A type kind this parser does not know, so the rest of the type
    /// section cannot be walked.
    #[error(
        "unknown BTF kind {kind} at type id {id}: the kernel's BTF is newer than \
         nri-trace's parser; update nri-trace (exit codes will be shown as unknown)"
    )]
    UnknownKind {
        /// The kind number.
        kind: u32,
        /// The type id of the record.
        id: u32,
    },
    /// No struct of that name.
    #[error(
        "struct {name} not found in BTF: this kernel is not supported for \
         reading it; values read from it will be shown as unknown"
    )]
    StructNotFound {
        /// The struct that was looked for.
        name: String,
    },
    /// The struct (and its anonymous members) has no member of that name.
    #[error(
        "struct {struct_name} has no member {member} in BTF (searched its anonymous \
         members too): this kernel's layout is not supported; \
         values read from it will be shown as unknown"
    )]
    MemberNotFound {
        /// The struct searched.
        struct_name: String,
        /// The member looked for.
        member: String,
    },
    /// The member is a bitfield (or not byte-aligned), so it has no byte offset.
    #[error(
        "{struct_name}.{member} is a bitfield at bit {bit_offset}: it has no byte offset \
         to read with bpf_probe_read_kernel; read the containing word instead"
    )]
    Bitfield {
        /// The struct searched.
        struct_name: String,
        /// The member.
        member: String,
        /// The member's bit offset from the start of the struct.
        bit_offset: u64,
    },
}

/// Reads a BTF file (at most [`MAX_BTF_FILE_SIZE`] bytes); parse it with
/// [`BtfIndex::parse`] to look up several members with one read.
pub(crate) fn read_btf_file(path: &Path) -> Result<Vec<u8>, BtfError> {
    let unreadable = |source| BtfError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut blob = Vec::new();
    // sysfs files may report a size of 0 or 4096: read to the end, bounded.
    file.take(MAX_BTF_FILE_SIZE + 1)
        .read_to_end(&mut blob)
        .map_err(unreadable)?;
    if blob.len() as u64 > MAX_BTF_FILE_SIZE {
        return Err(BtfError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_BTF_FILE_SIZE,
        });
    }
    Ok(blob)
}

// Kinds (btf.rst, "BTF Type and String Encoding").
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

const MAGIC: u16 = 0xeb9f;
/// `sizeof(struct btf_header)` of version 1.
const HEADER_LEN: usize = 24;
/// `sizeof(struct btf_type)`.
const TYPE_LEN: usize = 12;
/// `sizeof(struct btf_member)`.
const MEMBER_LEN: usize = 12;

/// A parsed BTF blob: its sections and the position of every type record,
/// to look members up by name.
#[derive(Debug)]
pub struct BtfIndex<'a> {
    big_endian: bool,
    /// The type section.
    types: &'a [u8],
    /// The string section; starts and ends with a NUL.
    strings: &'a [u8],
    /// Offset in `types` of the record of type id `i + 1`.
    offsets: Vec<u32>,
}

/// One `struct btf_type` record.
#[derive(Clone, Copy, Debug)]
struct TypeRec<'a> {
    id: u32,
    name_off: u32,
    kind: u32,
    kind_flag: bool,
    /// `size` or `type`, by kind.
    size_or_type: u32,
    /// The kind-specific data after the record.
    extra: &'a [u8],
}

impl<'a> BtfIndex<'a> {
    /// Checks the header and string section and walks the type section.
    pub fn parse(blob: &'a [u8]) -> Result<Self, BtfError> {
        let blob_len = blob.len() as u64;
        let Some(magic) = blob.get(0..2) else {
            return Err(BtfError::Truncated {
                what: "header",
                end: HEADER_LEN as u64,
                len: blob_len,
            });
        };
        // The magic tells the byte order (btf.rst: "magic" is 0xeB9F, and
        // the blob is in the byte order of the machine that wrote it).
        let big_endian = match [magic[0], magic[1]] {
            m if u16::from_le_bytes(m) == MAGIC => false,
            m if u16::from_be_bytes(m) == MAGIC => true,
            m => {
                return Err(BtfError::BadMagic {
                    found: u16::from_le_bytes(m),
                })
            }
        };
        if blob.len() < HEADER_LEN {
            return Err(BtfError::Truncated {
                what: "header",
                end: HEADER_LEN as u64,
                len: blob_len,
            });
        }
        let version = blob[2];
        if version != 1 {
            return Err(BtfError::UnsupportedVersion(version));
        }
        let word = |at: usize| read_u32(blob, at, big_endian).unwrap_or(0);
        let hdr_len = word(4);
        let (type_off, type_len) = (word(8), word(12));
        let (str_off, str_len) = (word(16), word(20));
        if (hdr_len as usize) < HEADER_LEN {
            return Err(BtfError::Malformed(format!(
                "header length {hdr_len} is shorter than {HEADER_LEN}"
            )));
        }
        let section = |what: &'static str, off: u32, len: u32| -> Result<&'a [u8], BtfError> {
            // u64: no overflow from three u32s.
            let start = u64::from(hdr_len) + u64::from(off);
            let end = start + u64::from(len);
            if end > blob_len {
                return Err(BtfError::Truncated {
                    what,
                    end,
                    len: blob_len,
                });
            }
            // end <= blob.len(), so both fit in usize.
            blob.get(start as usize..end as usize)
                .ok_or(BtfError::Truncated {
                    what,
                    end,
                    len: blob_len,
                })
        };
        let types = section("type section", type_off, type_len)?;
        let strings = section("string section", str_off, str_len)?;
        // btf.rst: the first string is the empty string (name_off 0), and
        // the kernel requires the section to end with a NUL.
        if strings.first() != Some(&0) || strings.last() != Some(&0) {
            return Err(BtfError::Malformed(
                "string section does not start and end with a NUL".into(),
            ));
        }

        let mut index = BtfIndex {
            big_endian,
            types,
            strings,
            offsets: Vec::new(),
        };
        // Each step advances at least TYPE_LEN bytes, so this runs at most
        // types.len() / TYPE_LEN times.
        let mut pos = 0usize;
        while pos < types.len() {
            let id = index.offsets.len() as u32 + 1;
            let rec = index.record_at(pos, id)?;
            // pos < types.len() <= u32::MAX (type_len is a u32).
            index.offsets.push(pos as u32);
            // record_at checked that the record and its data are in `types`.
            pos += TYPE_LEN + rec.extra.len();
        }
        Ok(index)
    }

    /// Number of types (the largest type id).
    pub fn type_count(&self) -> u32 {
        self.offsets.len() as u32
    }

    /// Size in bytes of `struct name` (the first complete one of that name).
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        for id in 1..=self.type_count() {
            let rec = self.type_by_id(id)?;
            if rec.kind == KIND_STRUCT && self.name_is(rec.name_off, name)? {
                return Ok(rec.size_or_type);
            }
        }
        Err(BtfError::StructNotFound { name: name.into() })
    }

    /// Byte offset of `member` in `struct struct_name`. Members of
    /// anonymous struct/union members are found too (up to
    /// [`MAX_ANON_DEPTH`] deep), with the offsets of the anonymous members
    /// added. A bitfield member is an error.
    ///
    /// If several structs have that name (BTF of modules or unusual
    /// kernels), the first one that has the member answers.
    pub fn member_offset(&self, struct_name: &str, member: &str) -> Result<u32, BtfError> {
        let mut budget = MAX_MEMBER_VISITS;
        let mut found_struct = false;
        for id in 1..=self.type_count() {
            let rec = self.type_by_id(id)?;
            if rec.kind != KIND_STRUCT || !self.name_is(rec.name_off, struct_name)? {
                continue;
            }
            found_struct = true;
            if let Some(bits) = self.find_member(rec, struct_name, member, 0, 0, &mut budget)? {
                return u32::try_from(bits / 8).map_err(|_too_big| {
                    BtfError::Malformed(format!(
                        "offset of {struct_name}.{member} ({bits} bits) does not fit in 32 bits"
                    ))
                });
            }
        }
        if found_struct {
            Err(BtfError::MemberNotFound {
                struct_name: struct_name.into(),
                member: member.into(),
            })
        } else {
            Err(BtfError::StructNotFound {
                name: struct_name.into(),
            })
        }
    }

    /// Searches the members of struct/union `rec`, placed at bit `base`,
    /// for `member`; returns its bit offset from the outermost struct.
    fn find_member(
        &self,
        rec: TypeRec<'_>,
        struct_name: &str,
        member: &str,
        base: u64,
        depth: u32,
        budget: &mut u32,
    ) -> Result<Option<u64>, BtfError> {
        // vlen <= 0xffff, and `extra` holds exactly vlen members.
        for m in rec.extra.chunks_exact(MEMBER_LEN) {
            *budget = budget.checked_sub(1).ok_or_else(|| {
                BtfError::Malformed(format!(
                    "more than {MAX_MEMBER_VISITS} members visited looking for \
                     {struct_name}.{member} (anonymous members nested in a loop?)"
                ))
            })?;
            let name_off = self.u32_in(m, 0);
            let member_type = self.u32_in(m, 4);
            let raw_offset = self.u32_in(m, 8);
            // btf.rst, BTF_KIND_STRUCT: with kind_flag the offset is
            // bitfield size << 24 | bit offset, else just the bit offset.
            let (bit_offset, bitfield_size) = if rec.kind_flag {
                (raw_offset & 0x00ff_ffff, raw_offset >> 24)
            } else {
                (raw_offset, 0)
            };
            let bit_offset = base + u64::from(bit_offset);
            let name = self.name(name_off)?;
            if name == member.as_bytes() {
                // Without kind_flag a bitfield is an int type narrower than
                // its size; with kind_flag such an int is malformed: either
                // way there is no byte offset to give.
                let bitfield = bitfield_size != 0
                    || bit_offset & 7 != 0
                    || self.is_int_bitfield(member_type)?;
                if bitfield {
                    return Err(BtfError::Bitfield {
                        struct_name: struct_name.into(),
                        member: member.into(),
                        bit_offset,
                    });
                }
                return Ok(Some(bit_offset));
            }
            if !name.is_empty() || bitfield_size != 0 {
                continue;
            }
            // An anonymous member: search it if it is a struct or union
            // (unnamed bitfields used as padding are ints).
            let inner = self.resolve(member_type)?;
            let Some(inner) = inner else { continue };
            if inner.kind != KIND_STRUCT && inner.kind != KIND_UNION {
                continue;
            }
            if depth >= MAX_ANON_DEPTH {
                return Err(BtfError::Malformed(format!(
                    "anonymous members nested more than {MAX_ANON_DEPTH} deep in \
                     {struct_name} (type id {})",
                    inner.id
                )));
            }
            if let Some(found) =
                self.find_member(inner, struct_name, member, bit_offset, depth + 1, budget)?
            {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Whether `type_id` is an int narrower than its storage or not at its
    /// start: how a bitfield member is encoded when the struct has no
    /// kind_flag (btf.rst, BTF_KIND_INT: BTF_INT_OFFSET and BTF_INT_BITS).
    fn is_int_bitfield(&self, type_id: u32) -> Result<bool, BtfError> {
        let Some(rec) = self.resolve(type_id)? else {
            return Ok(false);
        };
        if rec.kind != KIND_INT {
            return Ok(false);
        }
        let encoding = self.u32_in(rec.extra, 0);
        let bits = encoding & 0xff;
        let offset = (encoding >> 16) & 0xff;
        Ok(offset != 0 || u64::from(bits) != u64::from(rec.size_or_type) * 8)
    }

    /// The type under typedefs and qualifiers; `None` for `void`.
    fn resolve(&self, mut type_id: u32) -> Result<Option<TypeRec<'a>>, BtfError> {
        for _ in 0..MAX_MODIFIER_CHAIN {
            if type_id == 0 {
                return Ok(None);
            }
            let rec = self.type_by_id(type_id)?;
            match rec.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    type_id = rec.size_or_type;
                }
                _ => return Ok(Some(rec)),
            }
        }
        Err(BtfError::Malformed(format!(
            "more than {MAX_MODIFIER_CHAIN} typedefs/qualifiers in a row at type id {type_id}"
        )))
    }

    fn type_by_id(&self, id: u32) -> Result<TypeRec<'a>, BtfError> {
        let pos = id
            .checked_sub(1)
            .and_then(|i| self.offsets.get(i as usize))
            .ok_or_else(|| {
                BtfError::Malformed(format!(
                    "type id {id} out of range (1..={})",
                    self.type_count()
                ))
            })?;
        self.record_at(*pos as usize, id)
    }

    /// The record at `pos` in the type section, with its kind-specific data.
    fn record_at(&self, pos: usize, id: u32) -> Result<TypeRec<'a>, BtfError> {
        let types = self.types;
        let truncated = |end: u64| BtfError::Truncated {
            what: "type record",
            end,
            len: types.len() as u64,
        };
        let head_end = pos.saturating_add(TYPE_LEN);
        let head = types
            .get(pos..head_end)
            .ok_or_else(|| truncated(pos as u64 + TYPE_LEN as u64))?;
        let name_off = self.u32_in(head, 0);
        let info = self.u32_in(head, 4);
        let size_or_type = self.u32_in(head, 8);
        // btf.rst: vlen bits 0-15, kind bits 24-28, kind_flag bit 31.
        let vlen = info & 0xffff;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 != 0;
        let extra_len = match kind {
            KIND_INT => 4,
            KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
            KIND_ARRAY => 12,
            KIND_STRUCT | KIND_UNION => 12 * vlen,
            KIND_ENUM => 8 * vlen,
            KIND_FUNC_PROTO => 8 * vlen,
            KIND_VAR => 4,
            KIND_DATASEC => 12 * vlen,
            KIND_DECL_TAG => 4,
            KIND_ENUM64 => 12 * vlen,
            _ => return Err(BtfError::UnknownKind { kind, id }),
        } as usize;
        let extra = types
            .get(head_end..head_end.saturating_add(extra_len))
            .ok_or_else(|| truncated(head_end as u64 + extra_len as u64))?;
        Ok(TypeRec {
            id,
            name_off,
            kind,
            kind_flag,
            size_or_type,
            extra,
        })
    }

    /// The NUL-terminated string at `off` in the string section, without
    /// the NUL.
    fn name(&self, off: u32) -> Result<&'a [u8], BtfError> {
        let rest = self.strings.get(off as usize..).ok_or_else(|| {
            BtfError::Malformed(format!(
                "name offset {off} beyond the string section ({} bytes)",
                self.strings.len()
            ))
        })?;
        // The section ends with a NUL (checked in parse), so rest has one
        // unless it is empty (off == len), which the get above allows.
        let end = rest.iter().position(|&b| b == 0).ok_or_else(|| {
            BtfError::Malformed(format!(
                "name offset {off} at the end of the string section"
            ))
        })?;
        Ok(&rest[..end])
    }

    fn name_is(&self, off: u32, want: &str) -> Result<bool, BtfError> {
        Ok(self.name(off)? == want.as_bytes())
    }

    /// The u32 at `at` in `bytes` in the blob's byte order; 0 if out of
    /// range (callers pass slices they sized).
    fn u32_in(&self, bytes: &[u8], at: usize) -> u32 {
        read_u32(bytes, at, self.big_endian).unwrap_or(0)
    }
}

fn read_u32(bytes: &[u8], at: usize, big_endian: bool) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

#[cfg(test)]
mod tests;
