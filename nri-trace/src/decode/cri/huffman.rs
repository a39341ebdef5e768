//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B).
//!
//! The code of Appendix B is *canonical*: within one code length, codes
//! are consecutive and assigned in symbol order, and each length starts
//! right after the last code of the previous length (the unit test
//! `table_is_canonical` checks this against the transcribed table). A
//! canonical code decodes with three small per-length arrays instead of a
//! 257-leaf tree or a generated state machine: after reading `len` bits
//! into `code`, the code is complete iff
//! `FIRST[len] <= code < FIRST[len] + COUNT[len]`, and its symbol is
//! `SORTED[OFFSET[len] + code - FIRST[len]]`.
//!
//! Decoding is bit by bit; header strings are short and this is a tracer,
//! not a proxy.

/// Shortest and longest code lengths in Appendix B.
const MIN_LEN: usize = 5;
const MAX_LEN: usize = 30;

/// The end-of-string symbol (§5.2): its code (30 one-bits) must never be
/// decoded, and its prefix is the only permitted padding.
pub(crate) const EOS: u16 = 256;

/// RFC 7541 Appendix B: `(code, length in bits)` for symbols 0..=255 and
/// EOS (256). Codes are right-aligned (the value of the `length` bits).
pub(crate) const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// Canonical-decoding tables derived from [`CODES`] at compile time.
struct Canonical {
    /// First code of each length (index = length).
    first: [u32; MAX_LEN + 1],
    /// Number of codes of each length.
    count: [u32; MAX_LEN + 1],
    /// Index into `sorted` of the first symbol of each length.
    offset: [u16; MAX_LEN + 1],
    /// Symbols sorted by (length, symbol).
    sorted: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut count = [0u32; MAX_LEN + 1];
    let mut i = 0;
    while i < 257 {
        count[CODES[i].1 as usize] += 1;
        i += 1;
    }
    let mut offset = [0u16; MAX_LEN + 1];
    let mut first = [0u32; MAX_LEN + 1];
    let mut code = 0u32;
    let mut off = 0u16;
    let mut len = 1;
    while len <= MAX_LEN {
        first[len] = code;
        offset[len] = off;
        code = (code + count[len]) << 1;
        off += count[len] as u16;
        len += 1;
    }
    let mut sorted = [0u16; 257];
    let mut fill = offset;
    let mut s = 0;
    while s < 257 {
        let l = CODES[s].1 as usize;
        sorted[fill[l] as usize] = s as u16;
        fill[l] += 1;
        s += 1;
    }
    Canonical {
        first,
        count,
        offset,
        sorted,
    }
}

static TABLES: Canonical = canonical();

/// Why a Huffman-coded string is invalid (RFC 7541 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HuffmanError {
    /// The EOS symbol was decoded: "a Huffman-encoded string literal
    /// containing the EOS symbol MUST be treated as a decoding error".
    #[error("huffman: EOS symbol inside a string")]
    Eos,
    /// More than 7 bits of padding, or padding that is not the most
    /// significant bits of EOS (all ones).
    #[error("huffman: invalid padding")]
    Padding,
}

/// Decodes a Huffman-coded string literal, appending to `out`.
///
/// `out` grows by at most `8 * input.len() / 5` bytes (shortest code: 5
/// bits), so the caller's bound on `input` bounds the allocation.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let t = &TABLES;
    out.reserve(input.len() * 8 / MIN_LEN);
    let mut code: u32 = 0;
    let mut len: usize = 0;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len < MIN_LEN {
                continue;
            }
            // `len` never exceeds MAX_LEN: every 30-bit string is either a
            // complete code or has a complete code as a prefix (the code
            // is complete: Kraft sum 1), so a code completes by 30 bits.
            let first = t.first[len];
            if code >= first && code - first < t.count[len] {
                let sym = t.sorted[usize::from(t.offset[len]) + (code - first) as usize];
                if sym == EOS {
                    return Err(HuffmanError::Eos);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len >= MAX_LEN {
                // Unreachable for a complete code; kept so that a wrong
                // table can never make `len` index out of bounds.
                return Err(HuffmanError::Eos);
            }
        }
    }
    // §5.2: leftover bits are padding: at most 7, all ones (the EOS
    // prefix). A partial code of >7 bits means a truncated symbol.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// Huffman-encodes `input` (tests only: the tracer never encodes).
#[cfg(test)]
pub(crate) fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in input {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        // Pad with the most significant bits of EOS (ones).
        out.push(((acc << (8 - bits)) | ((1u64 << (8 - bits)) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(input: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut out = Vec::new();
        decode(input, &mut out).map(|()| out)
    }

    /// The transcription of Appendix B is a complete canonical code: codes
    /// follow from lengths alone and the Kraft sum is exactly 1.
    #[test]
    fn table_is_canonical() {
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut code = 0u64;
        let mut prev = CODES[order[0]].1;
        for (i, &s) in order.iter().enumerate() {
            let len = CODES[s].1;
            if i > 0 {
                code = (code + 1) << (len - prev);
                prev = len;
            }
            assert_eq!(u64::from(CODES[s].0), code, "symbol {s}");
        }
        let kraft: u64 = CODES
            .iter()
            .map(|&(_, l)| 1u64 << (MAX_LEN - l as usize))
            .sum();
        assert_eq!(kraft, 1u64 << MAX_LEN);
        assert_eq!(CODES[EOS as usize], (0x3fff_ffff, 30));
        // Spot checks against Appendix B rows.
        assert_eq!(CODES[b'0' as usize], (0x0, 5));
        assert_eq!(CODES[b'a' as usize], (0x3, 5));
        assert_eq!(CODES[b' ' as usize], (0x14, 6));
        assert_eq!(CODES[b'~' as usize], (0x1ffd, 13));
        assert_eq!(CODES[255], (0x3ffffee, 26));
    }

    /// Strings from RFC 7541 Appendix C.4 / C.6.
    #[test]
    fn rfc_appendix_c_strings() {
        let cases: &[(&str, &[u8])] = &[
            (
                "www.example.com",
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
            ),
            ("no-cache", &[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]),
            (
                "custom-key",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f],
            ),
            (
                "custom-value",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
            ),
            ("302", &[0x64, 0x02]),
            ("private", &[0xae, 0xc3, 0x77, 0x1a, 0x4b]),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                &[
                    0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04,
                    0x0b, 0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff,
                ],
            ),
            (
                "https://www.example.com",
                &[
                    0x9d, 0x29, 0xad, 0x17, 0x18, 0x63, 0xc7, 0x8f, 0x0b, 0x97, 0xc8, 0xe9, 0xae,
                    0x82, 0xae, 0x43, 0xd3,
                ],
            ),
            (
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                &[
                    0x94, 0xe7, 0x82, 0x1d, 0xd7, 0xf2, 0xe6, 0xc7, 0xb3, 0x35, 0xdf, 0xdf, 0xcd,
                    0x5b, 0x39, 0x60, 0xd5, 0xaf, 0x27, 0x08, 0x7f, 0x36, 0x72, 0xc1, 0xab, 0x27,
                    0x0f, 0xb5, 0x29, 0x1f, 0x95, 0x87, 0x31, 0x60, 0x65, 0xc0, 0x03, 0xed, 0x4e,
                    0xe5, 0xb1, 0x06, 0x3d, 0x50, 0x07,
                ],
            ),
        ];
        for (text, coded) in cases {
            assert_eq!(dec(coded).unwrap(), text.as_bytes(), "{text}");
            assert_eq!(&encode(text.as_bytes()), coded, "{text}");
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(dec(&encode(&all)).unwrap(), all);
        assert_eq!(dec(&[]).unwrap(), b"");
    }

    #[test]
    fn padding_and_eos_errors() {
        // EOS (30 ones) padded with ones: 32 one-bits.
        assert_eq!(dec(&[0xff; 4]), Err(HuffmanError::Eos));
        // A full byte of padding (8 ones) after nothing: > 7 bits.
        assert_eq!(dec(&[0xff]), Err(HuffmanError::Padding));
        // 'a' = 00011 then padding 000: padding not all ones.
        assert_eq!(dec(&[0b0001_1000]), Err(HuffmanError::Padding));
        // 'a' then 111 padding: valid.
        assert_eq!(dec(&[0b0001_1111]).unwrap(), b"a");
        // A partial 8-bit code (11111110 is no code): more than 7 bits left.
        assert_eq!(dec(&[0xfe]), Err(HuffmanError::Padding));
    }
}
