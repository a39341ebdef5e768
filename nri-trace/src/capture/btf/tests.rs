use proptest::{prelude::*, test_runner::TestRunner};

use super::*;
use crate::decode::test_strategies;

/// The kernel BTF, or `None` (with the reason printed) when this
/// machine has none; under CI=true a missing file fails the test.
fn kernel_btf() -> Option<Vec<u8>> {
    match read_btf_file(Path::new(KERNEL_BTF_PATH)) {
        Ok(blob) => Some(blob),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true and the kernel BTF is not usable: {e}")
        }
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

/// Byte offset of `member` in `struct struct_name` of a raw BTF blob.
fn member_offset(btf: &[u8], struct_name: &str, member: &str) -> Result<u32, BtfError> {
    BtfIndex::parse(btf)?.member_offset(struct_name, member)
}

#[test]
fn kernel_task_struct_offsets() {
    let Some(blob) = kernel_btf() else { return };
    let btf = BtfIndex::parse(&blob).expect("parse kernel BTF");
    let size = btf.struct_size("task_struct").unwrap();
    let exit_code = btf.member_offset("task_struct", "exit_code").unwrap();
    let pid = btf.member_offset("task_struct", "pid").unwrap();
    let tgid = btf.member_offset("task_struct", "tgid").unwrap();
    eprintln!("task_struct size {size}: exit_code {exit_code}, pid {pid}, tgid {tgid}");
    // pid_t pid; pid_t tgid; are adjacent in every kernel since 2.6.
    assert_eq!(pid + 4, tgid);
    assert_eq!(exit_code % 4, 0, "exit_code is an int");
    for off in [exit_code, pid, tgid] {
        assert!(
            off > 0 && off + 4 <= size,
            "offset {off} outside task_struct ({size})"
        );
    }
    // Bitfields and missing names are errors.
    assert!(matches!(
        btf.member_offset("task_struct", "in_execve"),
        Err(BtfError::Bitfield { .. } | BtfError::MemberNotFound { .. })
    ));
    assert!(matches!(
        btf.member_offset("task_struct", "no_such_member"),
        Err(BtfError::MemberNotFound { .. })
    ));
    assert!(matches!(
        btf.member_offset("no_such_struct_xyz", "pid"),
        Err(BtfError::StructNotFound { .. })
    ));
}

/// Every named, non-bitfield member of task_struct against bpftool's
/// dump of the same file (bpftool: `cargo xtask setup` installs it; a
/// test run without it skips, or fails under CI=true).
#[test]
fn kernel_offsets_match_bpftool() {
    let Some(blob) = kernel_btf() else { return };
    let out = std::process::Command::new("bpftool")
        .args(["btf", "dump", "file", KERNEL_BTF_PATH, "format", "raw"])
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true and bpftool did not run (cargo xtask setup installs it): {other:?}")
        }
        _ => {
            eprintln!("skipping: bpftool not installed or failed");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let btf = BtfIndex::parse(&blob).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| !l.contains("STRUCT 'task_struct' "));
    let header = lines.next().expect("bpftool dumps task_struct");
    assert!(header.contains(&format!("size={}", btf.struct_size("task_struct").unwrap())));
    let mut checked = 0;
    for line in lines.take_while(|l| l.starts_with('\t')) {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap().trim_matches('\'');
        let bits: u64 = parts
            .find_map(|p| p.strip_prefix("bits_offset="))
            .unwrap()
            .parse()
            .unwrap();
        if name == "(anon)" || line.contains("bitfield_size=") || bits & 7 != 0 {
            continue;
        }
        let ours = btf.member_offset("task_struct", name).unwrap();
        assert_eq!(u64::from(ours), bits / 8, "task_struct.{name}");
        checked += 1;
    }
    assert!(checked > 100, "only {checked} members compared");
}

/// sk_buff keeps its list pointers, tstamp and _skb_refdst/destructor in
/// anonymous unions (and an anonymous struct inside one).
#[test]
fn kernel_anonymous_union_members() {
    let Some(blob) = kernel_btf() else { return };
    let btf = BtfIndex::parse(&blob).unwrap();
    let size = btf.struct_size("sk_buff").unwrap();
    let next = btf.member_offset("sk_buff", "next").unwrap();
    let prev = btf.member_offset("sk_buff", "prev").unwrap();
    let tstamp = btf.member_offset("sk_buff", "tstamp").unwrap();
    let refdst = btf.member_offset("sk_buff", "_skb_refdst").unwrap();
    let destructor = btf.member_offset("sk_buff", "destructor").unwrap();
    eprintln!(
        "sk_buff size {size}: next {next}, prev {prev}, tstamp {tstamp}, \
             _skb_refdst {refdst}, destructor {destructor}"
    );
    assert_eq!(next, 0);
    assert_eq!(prev, 8);
    assert_eq!(refdst + 8, destructor);
    assert!(tstamp > 0 && destructor + 8 <= size);
}

/// Garbage, empty and truncated blobs and random corruption of the
/// real one give errors, not panics.
#[test]
fn kernel_blob_truncated_and_corrupted() {
    let Some(blob) = kernel_btf() else { return };
    let n = blob.len();
    // Cuts anywhere; 1-9 corrupted bytes, half of them in the header
    // and the start of the type section.
    let corruption = prop::collection::vec((prop_oneof![0..n.min(4096), 0..n], any::<u8>()), 1..=9);
    let mut runner = TestRunner::new(test_strategies::config(40));
    runner
        .run(&(0..n, corruption), |(len, bytes)| {
            prop_assert!(member_offset(&blob[..len], "task_struct", "exit_code").is_err());
            let mut mutated = blob.clone();
            for (at, b) in bytes {
                mutated[at] = b;
            }
            let _ = member_offset(&mutated, "task_struct", "exit_code");
            Ok(())
        })
        .unwrap();
}

// ---- synthetic blobs ----

/// Builds a BTF blob in either byte order.
struct Builder {
    be: bool,
    types: Vec<u8>,
    strings: Vec<u8>,
    next_id: u32,
}

impl Builder {
    fn new(be: bool) -> Self {
        Builder {
            be,
            types: Vec::new(),
            strings: vec![0],
            next_id: 1,
        }
    }
    fn u32(&mut self, v: u32) {
        let b = if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.types.extend_from_slice(&b);
    }
    fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }
    fn head(&mut self, name: &str, kind: u32, vlen: u32, kflag: bool, size: u32) -> u32 {
        let n = self.str(name);
        self.u32(n);
        self.u32(vlen | kind << 24 | u32::from(kflag) << 31);
        self.u32(size);
        self.next_id += 1;
        self.next_id - 1
    }
    fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
        let id = self.head(name, KIND_INT, 0, false, size);
        self.u32(bits);
        id
    }
    /// Members: (name, type, bit offset, bitfield size).
    fn compound(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        kflag: bool,
        members: &[(&str, u32, u32, u32)],
    ) -> u32 {
        let id = self.head(name, kind, members.len() as u32, kflag, size);
        for &(m, ty, off, bits) in members {
            let n = self.str(m);
            self.u32(n);
            self.u32(ty);
            self.u32(if kflag { bits << 24 | off } else { off });
        }
        id
    }
    fn finish(&self) -> Vec<u8> {
        let w = |v: u32| {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        out.extend_from_slice(&if self.be {
            MAGIC.to_be_bytes()
        } else {
            MAGIC.to_le_bytes()
        });
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&w(24));
        out.extend_from_slice(&w(0));
        out.extend_from_slice(&w(self.types.len() as u32));
        out.extend_from_slice(&w(self.types.len() as u32));
        out.extend_from_slice(&w(self.strings.len() as u32));
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// ```c
/// struct outer {                  // 32 bytes
///     int a;                      // 0
///     union {                     // 4
///         int b;                  // 4
///         struct { int c; int d; };   // 4, 8
///     };
///     const my_u32 e;             // 12 (typedef behind const)
///     int f:3;                    // bit 128
///     int g;                      // 20
///     char h;                     // 24, int of 8 bits
///     int old_bf;                 // bit 200, old-style bitfield (int of 5 bits)
/// };
/// ```
fn sample(be: bool, kflag: bool) -> Vec<u8> {
    let mut b = Builder::new(be);
    let int = b.int("int", 4, 32); // 1
    let ch = b.int("char", 1, 8); // 2
    let td = b.head("my_u32", KIND_TYPEDEF, 0, false, int); // 3
    let cst = b.head("", KIND_CONST, 0, false, td); // 4
    let inner = b.compound(
        KIND_STRUCT,
        "",
        8,
        false,
        &[("c", int, 0, 0), ("d", int, 32, 0)],
    );
    let un = b.compound(
        KIND_UNION,
        "",
        8,
        false,
        &[("b", int, 0, 0), ("", inner, 0, 0)],
    );
    let small = b.int("int", 4, 5); // an old-style 5-bit bitfield base
    b.head("outer", KIND_FWD, 0, false, 0);
    b.head("proto", KIND_FUNC_PROTO, 2, false, 0);
    b.u32(0);
    b.u32(int);
    b.u32(0);
    b.u32(int);
    let members: &[(&str, u32, u32, u32)] = &[
        ("a", int, 0, 0),
        ("", un, 32, 0),
        ("e", cst, 96, 0),
        ("f", int, 128, 3),
        ("g", int, 160, 0),
        ("h", ch, 192, 0),
        ("old_bf", small, 200, 0),
    ];
    if kflag {
        b.compound(KIND_STRUCT, "outer", 32, true, members);
    } else {
        // Without kind_flag f is a plain member at bit 128 of a 3-bit int.
        let three = b.int("int", 4, 3);
        let mut m = members.to_vec();
        m[3] = ("f", three, 128, 0);
        b.compound(KIND_STRUCT, "outer", 32, false, &m);
    }
    b.finish()
}

#[test]
fn synthetic_offsets_and_anonymous_members() {
    for be in [false, true] {
        for kflag in [false, true] {
            let blob = sample(be, kflag);
            let off = |m| member_offset(&blob, "outer", m);
            assert_eq!(off("a").unwrap(), 0);
            assert_eq!(off("b").unwrap(), 4, "member of an anonymous union");
            assert_eq!(off("c").unwrap(), 4, "struct in an anonymous union");
            assert_eq!(off("d").unwrap(), 8);
            assert_eq!(off("e").unwrap(), 12);
            assert_eq!(off("g").unwrap(), 20);
            assert_eq!(off("h").unwrap(), 24);
            assert!(matches!(
                off("f"),
                Err(BtfError::Bitfield {
                    bit_offset: 128,
                    ..
                })
            ));
            assert!(matches!(off("old_bf"), Err(BtfError::Bitfield { .. })));
            assert!(matches!(off("zz"), Err(BtfError::MemberNotFound { .. })));
            // FWD "outer" and the anonymous types are not structs named so.
            assert!(matches!(
                member_offset(&blob, "inner", "c"),
                Err(BtfError::StructNotFound { .. })
            ));
            assert_eq!(
                BtfIndex::parse(&blob)
                    .unwrap()
                    .struct_size("outer")
                    .unwrap(),
                32
            );
        }
    }
}

#[test]
fn anonymous_member_cycle_is_an_error() {
    let mut b = Builder::new(false);
    let int = b.int("int", 4, 32);
    // Type 2: an anonymous struct whose anonymous member is itself.
    b.compound(KIND_STRUCT, "", 4, false, &[("", 2, 0, 0), ("", 2, 0, 0)]);
    b.compound(
        KIND_STRUCT,
        "loop",
        8,
        false,
        &[("", 2, 0, 0), ("x", int, 32, 0)],
    );
    let blob = b.finish();
    assert!(matches!(
        member_offset(&blob, "loop", "x"),
        Err(BtfError::Malformed(_))
    ));
    // Typedef chain pointing to itself.
    let mut b = Builder::new(false);
    b.head("t", KIND_TYPEDEF, 0, false, 1);
    b.compound(KIND_STRUCT, "s", 4, false, &[("", 1, 0, 0)]);
    let blob = b.finish();
    assert!(matches!(
        member_offset(&blob, "s", "x"),
        Err(BtfError::Malformed(_))
    ));
}

#[test]
fn bad_blobs_are_errors() {
    let e = |blob: &[u8]| member_offset(blob, "outer", "a").unwrap_err();
    assert!(matches!(e(&[]), BtfError::Truncated { .. }));
    assert!(matches!(e(&[0x9f]), BtfError::Truncated { .. }));
    assert!(matches!(e(&[0u8; 64]), BtfError::BadMagic { found: 0 }));
    assert!(matches!(
        e(b"\x7fELF garbage garbage garbage"),
        BtfError::BadMagic { .. }
    ));
    let good = sample(false, true);
    let mut v2 = good.clone();
    v2[2] = 2;
    assert!(matches!(e(&v2), BtfError::UnsupportedVersion(2)));
    // Unknown kind 31 as the first type.
    let mut unknown = good.clone();
    unknown[24 + 7] = 31;
    assert!(matches!(
        e(&unknown),
        BtfError::UnknownKind { kind: 31, id: 1 }
    ));
    // Section lengths beyond the blob.
    let mut long = good.clone();
    long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(e(&long), BtfError::Truncated { .. }));
    let mut hdr = good.clone();
    hdr[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(e(&hdr), BtfError::Truncated { .. }));
    // Every prefix of a good blob is an error (sections run past its end).
    for len in 0..good.len() {
        assert!(
            member_offset(&good[..len], "outer", "a").is_err(),
            "prefix {len}"
        );
    }
}

proptest! {
    #![proptest_config(test_strategies::config(20_000))]

    /// Random corruption of a good blob, and random garbage, give an
    /// answer or an error, never a panic.
    #[test]
    fn corrupted_and_random_blobs_never_panic(
        bytes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..=7),
        junk in test_strategies::bytes_below(200),
    ) {
        let mut blob = sample(false, true);
        for (at, b) in bytes {
            let at = at.index(blob.len());
            blob[at] = b;
        }
        let _ = member_offset(&blob, "outer", "d");
        let _ = member_offset(&junk, "outer", "d");
    }
}

#[test]
fn error_messages_say_what_to_do() {
    let e = read_btf_file(Path::new("/nonexistent/btf/vmlinux")).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("CONFIG_DEBUG_INFO_BTF"), "{msg}");
    assert!(msg.contains("exit codes will be shown as unknown"), "{msg}");
}
