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
fn step(d: &mut Decoder, block: &str, want: &[(&str, &str)], table: &[(&str, &str)], size: usize) {
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
