//! The frame module's test encodings: a one-frame encoder, a SETTINGS
//! payload encoder and the HPACK blocks the test frames carry.

use super::header::HEADER_LEN;

// ---- Test encodings (tests only). Frames are laid out by hand from
// RFC 9113 §4.1 and §6; header blocks are the published HPACK blocks of
// RFC 7541 Appendix C. They are not captures of a real peer: CRI
// fixtures from containerd / kubelet captures come later. ----

/// RFC 7541 C.3.1 (no Huffman): GET http / www.example.com.
pub(super) const C31: &[u8] = &[
    0x82, 0x86, 0x84, 0x41, 0x0f, 0x77, 0x77, 0x77, 0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65,
    0x2e, 0x63, 0x6f, 0x6d,
];
/// RFC 7541 C.4.1 (Huffman): the same request.
pub(super) const C41: &[u8] = &[
    0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4,
    0xff,
];
/// RFC 7541 C.4.2 (Huffman): adds cache-control: no-cache.
pub(super) const C42: &[u8] = &[
    0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
];

/// Test encoder: one frame (§4.1).
pub(super) fn tf(ty: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    v.push(ty);
    v.push(flags);
    v.extend_from_slice(&stream_id.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

pub(super) fn settings_payload(s: &[(u16, u32)]) -> Vec<u8> {
    s.iter()
        .flat_map(|(i, v)| i.to_be_bytes().into_iter().chain(v.to_be_bytes()))
        .collect()
}
