use super::*;
use crate::decode::cri::frame::header::{
    FLAG_ACK, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, FLAG_PRIORITY, HEADER_LEN,
};
use crate::decode::cri::frame::test_frames::{settings_payload, tf, C31, C41, C42};
use crate::decode::test_strategies::{bytes, bytes_below, config, cuts, garbage_before};
use proptest::prelude::*;
use proptest::sample::Index;

/// A client-direction stream, as (wire unit, events it completes).
/// The first unit is the preface.
fn sample_units() -> Vec<(Vec<u8>, Vec<FrameEvent>)> {
    let settings = [(1u16, 4096u32), (4, 65535), (5, 16384)];
    // gRPC length-prefixed message: uncompressed, 5 bytes of protobuf.
    let grpc_msg = [0x00, 0, 0, 0, 5, 0x0a, 0x03, b'f', b'o', b'o'];
    let mut padded_data = vec![3u8];
    padded_data.extend_from_slice(&grpc_msg);
    padded_data.extend_from_slice(&[0, 0, 0]);
    // HEADERS with PADDED | PRIORITY | END_HEADERS: pad 2, exclusive
    // dependency on stream 1, weight 15, C.4.1, 2 zero pad octets.
    let mut prio_headers = vec![2u8, 0x80, 0, 0, 1, 15];
    prio_headers.extend_from_slice(C41);
    prio_headers.extend_from_slice(&[0, 0]);
    // C.3.1, then a literal field without indexing, new name (RFC 7541
    // §6.2.2) `x: aaa…` whose value length (an HPACK integer, §5.1)
    // makes the block 16400 bytes.
    let value_len = 16400 - C31.len() - 3 - 3;
    let mut big_block = C31.to_vec();
    big_block.extend_from_slice(&[0x00, 0x01, b'x']);
    let rest = value_len - 127;
    big_block.extend_from_slice(&[0x7f, 0x80 | (rest & 0x7f) as u8, (rest >> 7) as u8]);
    big_block.extend(std::iter::repeat_n(b'a', value_len));
    assert_eq!(big_block.len(), 16400);
    let mut goaway = vec![0, 0, 0, 3, 0, 0, 0, 0];
    goaway.extend_from_slice(b"bye");
    vec![
        (PREFACE.to_vec(), vec![FrameEvent::Preface]),
        (
            tf(4, 0, 0, &settings_payload(&settings)),
            vec![FrameEvent::Frame(Frame::Settings {
                ack: false,
                settings: settings.to_vec(),
            })],
        ),
        (
            tf(8, 0, 0, &983_041u32.to_be_bytes()),
            vec![FrameEvent::Frame(Frame::WindowUpdate {
                stream_id: 0,
                increment: 983_041,
            })],
        ),
        // A block larger than a frame: a full HEADERS (split at the max
        // frame size, as encoders do) + CONTINUATION.
        (tf(1, 0, 1, &big_block[..16384]), vec![]),
        (
            tf(9, FLAG_END_HEADERS, 1, &big_block[16384..]),
            vec![FrameEvent::HeaderBlock(HeaderBlock {
                stream_id: 1,
                fragment: big_block.clone(),
                end_stream: false,
                priority: None,
            })],
        ),
        (
            tf(0, FLAG_PADDED, 1, &padded_data),
            vec![FrameEvent::Frame(Frame::Data {
                stream_id: 1,
                end_stream: false,
                data: grpc_msg.to_vec(),
                padding: 3,
            })],
        ),
        (
            tf(0, FLAG_END_STREAM, 1, &[]),
            vec![FrameEvent::Frame(Frame::Data {
                stream_id: 1,
                end_stream: true,
                data: vec![],
                padding: 0,
            })],
        ),
        (
            tf(
                1,
                FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
                3,
                &prio_headers,
            ),
            vec![FrameEvent::HeaderBlock(HeaderBlock {
                stream_id: 3,
                fragment: C41.to_vec(),
                end_stream: false,
                priority: Some(PrioritySpec {
                    exclusive: true,
                    stream_dependency: 1,
                    weight: 15,
                }),
            })],
        ),
        (
            tf(6, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
            vec![FrameEvent::Frame(Frame::Ping {
                ack: false,
                data: *b"\x01\x02\x03\x04\x05\x06\x07\x08",
            })],
        ),
        (
            tf(4, FLAG_ACK, 0, &[]),
            vec![FrameEvent::Frame(Frame::Settings {
                ack: true,
                settings: vec![],
            })],
        ),
        (
            tf(3, 0, 3, &8u32.to_be_bytes()),
            vec![FrameEvent::Frame(Frame::RstStream {
                stream_id: 3,
                error_code: 8,
            })],
        ),
        (
            tf(2, 0, 5, &[0, 0, 0, 3, 200]),
            vec![FrameEvent::Frame(Frame::Priority {
                stream_id: 5,
                priority: PrioritySpec {
                    exclusive: false,
                    stream_dependency: 3,
                    weight: 200,
                },
            })],
        ),
        (
            tf(1, FLAG_END_HEADERS | FLAG_END_STREAM, 7, C42),
            vec![FrameEvent::HeaderBlock(HeaderBlock {
                stream_id: 7,
                fragment: C42.to_vec(),
                end_stream: true,
                priority: None,
            })],
        ),
        (
            tf(7, 0, 0, &goaway),
            vec![FrameEvent::Frame(Frame::GoAway {
                last_stream_id: 3,
                error_code: 0,
                debug_data: b"bye".to_vec(),
            })],
        ),
    ]
}

fn sample() -> (Vec<u8>, Vec<(FrameEvent, Option<u64>)>) {
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for (bytes, evs) in sample_units() {
        wire.extend(bytes);
        for e in evs {
            want.push((e, Some(wire.len() as u64)));
        }
    }
    (wire, want)
}

fn drain(d: &mut FrameDecoder) -> Vec<(FrameEvent, Option<u64>)> {
    std::iter::from_fn(|| d.next_with_end()).collect()
}

fn decode_split(wire: &[u8], cuts: &[usize]) -> Vec<(FrameEvent, Option<u64>)> {
    let mut d = FrameDecoder::new();
    let mut out = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&wire.len())) {
        d.push(&wire[last..c]);
        last = c;
        assert!(d.buffered() <= d.max_buffered());
        out.extend(drain(&mut d));
    }
    out
}

fn events(v: Vec<(FrameEvent, Option<u64>)>) -> Vec<FrameEvent> {
    v.into_iter().map(|(e, _)| e).collect()
}

#[test]
fn decodes_whole_stream_with_offsets() {
    let (wire, want) = sample();
    assert_eq!(decode_split(&wire, &[]), want);
}

#[test]
fn server_direction_without_preface() {
    let (wire, want) = sample();
    let got = decode_split(&wire[PREFACE.len()..], &[]);
    let want: Vec<_> = want[1..]
        .iter()
        .map(|(e, end)| (e.clone(), end.map(|o| o - PREFACE.len() as u64)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn every_single_split_point() {
    let (wire, want) = sample();
    for i in 0..=wire.len() {
        assert_eq!(decode_split(&wire, &[i]), want, "split at {i}");
    }
}

/// The sample without its 16 KiB block (for quadratic tests).
fn small_sample() -> (Vec<u8>, Vec<FrameEvent>) {
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for (i, (bytes, evs)) in sample_units().into_iter().enumerate() {
        if i != 3 && i != 4 {
            wire.extend(bytes);
            want.extend(evs);
        }
    }
    (wire, want)
}

#[test]
fn every_pair_of_split_points() {
    let (wire, want) = small_sample();
    for i in 0..=wire.len() {
        for j in i..=wire.len() {
            let got = events(decode_split(&wire, &[i, j]));
            assert_eq!(got, want, "split {i},{j}");
        }
    }
}

#[test]
fn byte_at_a_time() {
    let (wire, want) = sample();
    let cuts: Vec<usize> = (1..wire.len()).collect();
    assert_eq!(decode_split(&wire, &cuts), want);
}

/// The preface, then a random sequence of fewer than 20 self-contained
/// units of the sample (never the HEADERS that needs its CONTINUATION
/// alone: picking either gives both), the events they make, and cuts.
fn valid_sequence() -> impl Strategy<Value = (Vec<u8>, Vec<FrameEvent>, Vec<usize>)> {
    let n = sample_units().len();
    prop::collection::vec(1..n, 0..20).prop_flat_map(|picks| {
        let units = sample_units();
        let mut wire = PREFACE.to_vec();
        let mut want = vec![FrameEvent::Preface];
        for k in picks {
            let k = if k == 3 { 4 } else { k };
            if k == 4 {
                wire.extend_from_slice(&units[3].0);
            }
            wire.extend_from_slice(&units[k].0);
            want.extend(units[k].1.iter().cloned());
        }
        let len = wire.len();
        (Just(wire), Just(want), cuts(len, 16))
    })
}

proptest! {
    #![proptest_config(config(300))]

    /// Random valid sequences decode to their events whatever the
    /// splits.
    #[test]
    fn random_splits_of_random_valid_sequences((wire, want, cuts) in valid_sequence()) {
        prop_assert_eq!(events(decode_split(&wire, &cuts)), want);
    }
}

#[test]
fn mid_frame_start_resyncs_and_decodes_later_frames() {
    let units = sample_units();
    let (wire, _) = sample();
    let mut off = 0;
    for (i, (bytes, _)) in units.iter().enumerate() {
        let (start_i, end_i) = (off, off + bytes.len());
        off = end_i;
        // A start inside unit i must resync onto unit i + 1, unless that
        // is a CONTINUATION (the block start is lost: tested elsewhere).
        if i + 1 >= units.len() || i + 1 == 4 {
            continue;
        }
        let later: Vec<FrameEvent> = units[i + 1..]
            .iter()
            .flat_map(|(_, e)| e.iter().cloned())
            .collect();
        for start in start_i + 1..end_i {
            let got = events(decode_split(&wire[start..], &[]));
            assert_eq!(
                got[0],
                FrameEvent::Resync {
                    skipped: end_i - start
                },
                "unit {i} start {start}"
            );
            assert_eq!(&got[1..], &later[..], "unit {i} start {start}");
        }
    }
}

#[test]
fn start_inside_a_block_reports_orphan_continuation() {
    let units = sample_units();
    let (wire, _) = sample();
    let hdr_start: usize = units[..3].iter().map(|u| u.0.len()).sum();
    let got = events(decode_split(&wire[hdr_start + 2..], &[]));
    assert_eq!(
        got[0],
        FrameEvent::Resync {
            skipped: units[3].0.len() - 2
        }
    );
    assert_eq!(
        got[1],
        FrameEvent::BlockError {
            stream_id: 1,
            error: BlockError::UnexpectedContinuation
        }
    );
    assert_eq!(got[2], units[5].1[0]);
}

/// Garbage holding no header start (`test_strategies::headerless_garbage`),
/// then the sample without its preface, cut anywhere.
fn garbage_then_body() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    garbage_before(
        &sample().0[PREFACE.len()..],
        &[1, 3, 9, 13, 100, 1000, 20_000],
        20_000,
    )
}

proptest! {
    #![proptest_config(config(64))]

    /// All of the garbage is skipped, in one `Resync`, and every frame
    /// after it decodes, whatever the splits.
    #[test]
    fn garbage_prefix_resyncs((g, cuts) in garbage_then_body()) {
        let (wire, want) = sample();
        let mut s = g.clone();
        s.extend_from_slice(&wire[PREFACE.len()..]);
        let got = events(decode_split(&s, &cuts));
        prop_assert_eq!(&got[0], &FrameEvent::Resync { skipped: g.len() });
        let want: Vec<_> = events(want[1..].to_vec());
        prop_assert_eq!(&got[1..], &want[..]);
    }
}

#[test]
fn gap_mid_block_and_mid_frame() {
    let units = sample_units();
    let (wire, _) = sample();
    let hdr_end: usize = units[..4].iter().map(|u| u.0.len()).sum();
    let mut d = FrameDecoder::new();
    // Up to the HEADERS frame and 3 bytes of its CONTINUATION.
    d.push(&wire[..hdr_end + 3]);
    let mut got = events(drain(&mut d));
    d.gap();
    // The rest of the CONTINUATION is lost; resume at the next frame.
    d.push(&wire[hdr_end + units[4].0.len()..]);
    got.extend(events(drain(&mut d)));
    assert_eq!(
        got[..3],
        [
            FrameEvent::Preface,
            units[1].1[0].clone(),
            units[2].1[0].clone()
        ]
    );
    assert_eq!(
        got[3],
        FrameEvent::BlockError {
            stream_id: 1,
            error: BlockError::Lost
        }
    );
    assert_eq!(got[4], FrameEvent::Resync { skipped: 3 });
    assert_eq!(got[5], units[5].1[0]);
    assert_eq!(got.last(), units.last().unwrap().1.last());
}

#[test]
fn gap_inside_preface() {
    let (wire, want) = sample();
    let mut d = FrameDecoder::new();
    d.push(&wire[..10]);
    assert_eq!(d.buffered(), 10);
    d.gap();
    d.push(&wire[PREFACE.len()..]);
    let got = drain(&mut d);
    assert_eq!(got[0], (FrameEvent::Resync { skipped: 10 }, None));
    // Offsets keep counting the 10 bytes pushed (14 lost bytes aren't).
    assert_eq!(got[1].0, want[1].0);
    assert_eq!(got[1].1, want[1].1.map(|o| o - 14));
}

/// Sync a decoder on a lone SETTINGS frame first, so that malformed
/// frames after it are met in sync (while hunting they are rejected).
fn synced() -> FrameDecoder {
    let mut d = FrameDecoder::new();
    d.push(&tf(4, 0, 0, &[]));
    assert_eq!(
        d.next(),
        Some(FrameEvent::Frame(Frame::Settings {
            ack: false,
            settings: vec![]
        }))
    );
    assert!(d.is_synced());
    d
}

#[test]
fn malformed_frames_are_reported_and_decoding_continues() {
    use FrameType as T;
    let cases: Vec<(Vec<u8>, FrameError)> = vec![
        (
            tf(3, 0, 1, &[0, 0, 8]),
            FrameError::Length {
                frame_type: T::RstStream,
                length: 3,
            },
        ),
        (
            tf(6, 0, 0, &[0; 7]),
            FrameError::Length {
                frame_type: T::Ping,
                length: 7,
            },
        ),
        (
            tf(8, 0, 1, &[0, 0, 0, 1, 0]),
            FrameError::Length {
                frame_type: T::WindowUpdate,
                length: 5,
            },
        ),
        (
            tf(4, 0, 0, &[0; 7]),
            FrameError::Length {
                frame_type: T::Settings,
                length: 7,
            },
        ),
        (
            tf(4, FLAG_ACK, 0, &[0, 1, 0, 0, 0, 0]),
            FrameError::Length {
                frame_type: T::Settings,
                length: 6,
            },
        ),
        (
            tf(2, 0, 1, &[0; 4]),
            FrameError::Length {
                frame_type: T::Priority,
                length: 4,
            },
        ),
        (
            tf(7, 0, 0, &[0; 7]),
            FrameError::Length {
                frame_type: T::GoAway,
                length: 7,
            },
        ),
        // §6.1: padding as long as the payload.
        (
            tf(0, FLAG_PADDED, 1, &[3, 0, 0]),
            FrameError::Padding { pad_length: 3 },
        ),
        // §6.2: padding eating into the priority fields.
        (
            tf(1, FLAG_PADDED | FLAG_PRIORITY, 1, &[2, 0, 0, 0, 0, 9, 0]),
            FrameError::Padding { pad_length: 2 },
        ),
        (
            tf(0, FLAG_PADDED, 1, &[]),
            FrameError::Length {
                frame_type: T::Data,
                length: 0,
            },
        ),
        (
            tf(0, 0, 0, b"x"),
            FrameError::StreamId {
                frame_type: T::Data,
                stream_id: 0,
            },
        ),
        (
            tf(4, 0, 1, &[]),
            FrameError::StreamId {
                frame_type: T::Settings,
                stream_id: 1,
            },
        ),
        (
            tf(9, FLAG_END_HEADERS, 0, b"x"),
            FrameError::StreamId {
                frame_type: T::Continuation,
                stream_id: 0,
            },
        ),
    ];
    for (bytes, error) in cases {
        let mut d = synced();
        d.push(&bytes);
        d.push(&tf(6, FLAG_ACK, 0, &[9; 8]));
        let got = drain(&mut d);
        let header = FrameHeader::parse(&bytes).unwrap();
        let end = (HEADER_LEN + bytes.len()) as u64;
        assert_eq!(
            got,
            vec![
                (FrameEvent::Malformed { header, error }, Some(end)),
                (
                    FrameEvent::Frame(Frame::Ping {
                        ack: true,
                        data: [9; 8]
                    }),
                    Some(end + 17)
                ),
            ],
            "{bytes:02x?}"
        );
    }
}

#[test]
fn unknown_type_and_undefined_flags_are_ignored_in_sync() {
    let mut d = synced();
    // §4.1: unknown type reported and skipped; undefined flag 0x40 on
    // PING ignored; reserved bit of the stream id ignored.
    d.push(&tf(0xb, 0xff, 3, b"ext"));
    d.push(&tf(6, 0x40, 0, &[1; 8]));
    d.push(&tf(8, 0, 0x8000_0005, &[0x80, 0, 0, 1]));
    assert_eq!(
        events(drain(&mut d)),
        vec![
            FrameEvent::Frame(Frame::Unknown {
                frame_type: 0xb,
                flags: 0xff,
                stream_id: 3,
                payload: b"ext".to_vec()
            }),
            FrameEvent::Frame(Frame::Ping {
                ack: false,
                data: [1; 8]
            }),
            FrameEvent::Frame(Frame::WindowUpdate {
                stream_id: 5,
                increment: 1
            }),
        ]
    );
}

#[test]
fn interleaved_frame_cuts_the_block() {
    let mut d = synced();
    d.push(&tf(1, 0, 1, &C31[..5]));
    d.push(&tf(6, 0, 0, &[0; 8]));
    d.push(&tf(9, FLAG_END_HEADERS, 1, &C31[5..]));
    // A CONTINUATION of another stream cuts too, and is dropped.
    d.push(&tf(1, FLAG_END_STREAM, 3, &C41[..4]));
    d.push(&tf(9, FLAG_END_HEADERS, 5, &C41[4..]));
    // Then a clean block.
    d.push(&tf(1, FLAG_END_STREAM, 7, &C41[..4]));
    d.push(&tf(9, 0, 7, &C41[4..8]));
    d.push(&tf(9, FLAG_END_HEADERS, 7, &C41[8..]));
    assert_eq!(
        events(drain(&mut d)),
        vec![
            FrameEvent::BlockError {
                stream_id: 1,
                error: BlockError::Interrupted {
                    frame_type: FrameType::Ping,
                    by_stream_id: 0
                }
            },
            FrameEvent::Frame(Frame::Ping {
                ack: false,
                data: [0; 8]
            }),
            FrameEvent::BlockError {
                stream_id: 1,
                error: BlockError::UnexpectedContinuation
            },
            FrameEvent::BlockError {
                stream_id: 3,
                error: BlockError::Interrupted {
                    frame_type: FrameType::Continuation,
                    by_stream_id: 5
                }
            },
            FrameEvent::HeaderBlock(HeaderBlock {
                stream_id: 7,
                fragment: C41.to_vec(),
                end_stream: true,
                priority: None
            }),
        ]
    );
}

#[test]
fn header_block_bound() {
    let mut d = FrameDecoder::with_config(DEFAULT_MAX_FRAME_SIZE, 16).unwrap();
    d.push(&tf(4, 0, 0, &[]));
    d.push(&tf(1, 0, 1, &C31[..10]));
    d.push(&tf(9, 0, 1, &C31[10..]));
    assert!(d.buffered() <= d.max_buffered());
    d.push(&tf(9, FLAG_END_HEADERS, 1, b"more"));
    d.push(&tf(1, FLAG_END_HEADERS, 3, C42));
    let got = events(drain(&mut d));
    assert_eq!(
        got[1],
        FrameEvent::BlockError {
            stream_id: 1,
            error: BlockError::TooLarge {
                size: 20,
                limit: 16
            }
        }
    );
    // The rest of the big block is skipped silently; the next is fine.
    assert_eq!(
        got[2..],
        [FrameEvent::HeaderBlock(HeaderBlock {
            stream_id: 3,
            fragment: C42.to_vec(),
            end_stream: false,
            priority: None
        })]
    );
}

#[test]
fn push_promise_is_reported() {
    let mut d = synced();
    let mut p = vec![0, 0, 0, 2];
    p.extend_from_slice(&C42[..3]);
    d.push(&tf(5, 0, 1, &p));
    d.push(&tf(9, FLAG_END_HEADERS, 1, &C42[3..]));
    assert_eq!(
        events(drain(&mut d)),
        vec![FrameEvent::PushPromise {
            stream_id: 1,
            promised_stream_id: 2,
            fragment: C42.to_vec()
        }]
    );
}

#[test]
fn max_frame_size_is_configurable() {
    let big = vec![7u8; 20_000];
    let frame = tf(0, FLAG_END_STREAM, 1, &big);
    // Default 16384: too long to be a frame (§4.2), so it is skipped.
    let mut d = synced();
    d.push(&frame);
    d.push(&tf(6, 0, 0, &[0; 8]));
    let got = events(drain(&mut d));
    assert_eq!(
        got[0],
        FrameEvent::Resync {
            skipped: frame.len()
        }
    );
    assert!(matches!(got[1], FrameEvent::Frame(Frame::Ping { .. })));
    // After the peer's SETTINGS_MAX_FRAME_SIZE = 2^20 it decodes.
    let mut d = synced();
    assert_eq!(
        d.set_max_frame_size(100),
        Err(FrameConfigError::MaxFrameSize(100))
    );
    assert!(d.set_max_frame_size(MAX_MAX_FRAME_SIZE + 1).is_err());
    d.set_max_frame_size(1 << 20).unwrap();
    assert_eq!(d.max_frame_size(), 1 << 20);
    d.push(&frame);
    assert_eq!(
        d.next(),
        Some(FrameEvent::Frame(Frame::Data {
            stream_id: 1,
            end_stream: true,
            data: big,
            padding: 0
        }))
    );
    // Lowering it below a partial frame held drops that frame.
    d.push(&frame[..18_000]);
    d.set_max_frame_size(DEFAULT_MAX_FRAME_SIZE).unwrap();
    assert!(d.buffered() <= d.max_buffered());
}
/// Input for the never-panic property: random bytes, or the sample
/// with 1 to 8 random bytes overwritten.
fn damaged_input() -> impl Strategy<Value = Vec<u8>> {
    let damage = prop::collection::vec((any::<Index>(), any::<u8>()), 1..=8);
    prop_oneof![
        bytes_below(6000),
        damage.prop_map(|damage| {
            let (mut wire, _) = sample();
            for (at, b) in damage {
                let at = at.index(wire.len());
                wire[at] = b;
            }
            wire
        }),
    ]
}

/// How the never-panic property feeds its input: a push of 1 to 700
/// bytes, then a gap one time in ten, and one time in twenty a new
/// maximum frame size (valid or not) from the peer's SETTINGS.
fn feed_step() -> impl Strategy<Value = (usize, bool, Option<u32>)> {
    (
        1usize..=700,
        prop::bool::weighted(0.1),
        prop::option::weighted(0.05, 0u32..1 << 20),
    )
}

proptest! {
    #![proptest_config(config(400))]

    /// Arbitrary or damaged input, split, with gaps and maximum frame
    /// size changes, never panics; partial state stays within its bound
    /// and no frame ends past the bytes pushed.
    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        big_max in prop::bool::weighted(1.0 / 3.0),
        input in damaged_input(),
        // Used in turn, cycling, until the input is all pushed.
        steps in prop::collection::vec(feed_step(), 1..=64),
    ) {
        let mut d = if big_max {
            FrameDecoder::with_config(MAX_MAX_FRAME_SIZE, 64).unwrap()
        } else {
            FrameDecoder::new()
        };
        let mut pos = 0;
        for &(n, gap, max_frame) in steps.iter().cycle() {
            if pos >= input.len() {
                break;
            }
            let end = (pos + n).min(input.len());
            d.push(&input[pos..end]);
            pos = end;
            if gap {
                d.gap();
            }
            if let Some(m) = max_frame {
                let _ = d.set_max_frame_size(DEFAULT_MAX_FRAME_SIZE + m);
            }
            prop_assert!(d.buffered() <= d.max_buffered());
            for (e, end) in std::iter::from_fn(|| d.next_with_end()) {
                if let Some(end) = end {
                    prop_assert!(end <= input.len() as u64, "{:?}", e);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(2))]

    /// A long run of random bytes (200 pushes of 4 KiB on one decoder)
    /// never panics, and partial state stays within its bound.
    #[test]
    fn long_random_stream_is_bounded(
        chunks in prop::collection::vec(bytes(Just(4096usize)), 200),
    ) {
        let mut d = FrameDecoder::new();
        for chunk in chunks {
            d.push(&chunk);
            prop_assert!(d.buffered() <= d.max_buffered());
            d.by_ref().for_each(drop);
        }
    }
}
