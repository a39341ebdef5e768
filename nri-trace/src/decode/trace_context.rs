//! W3C Trace Context: the `traceparent` a caller puts in a call's metadata
//! (kubelet in its CRI gRPC headers when its tracing is on; containerd 2.2+
//! in each NRI ttrpc request's `metadata` through otelttrpc; CRI-O both).
//!
//! Parsed as W3C Trace Context Level 1, section 3.2 ("traceparent Header"):
//!
//! ```text
//! version-format = version "-" trace-id "-" parent-id "-" trace-flags
//! version        = 2HEXDIGLC   ; "ff" is forbidden
//! trace-id       = 32HEXDIGLC  ; all zeros forbidden
//! parent-id      = 16HEXDIGLC  ; all zeros forbidden
//! trace-flags    = 2HEXDIGLC   ; bit 0: sampled
//! ```
//!
//! Version 00 is exactly 55 characters. A later version may be longer, with
//! a `-` after the 55th character, and is read by its first four fields
//! (3.2.4, "Versioning of traceparent"). Anything else is ignored, as the
//! spec asks of a receiver: the bytes are untrusted.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The metadata key, lower case (gRPC metadata and ttrpc keys are).
pub(crate) const TRACEPARENT: &str = "traceparent";

/// A caller's span: the trace it belongs to and its own span id (the
/// parent of whatever the callee does).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The caller's span id (`parent-id` on the wire).
    pub span_id: [u8; 8],
    /// trace-flags bit 0: the caller records this trace.
    pub sampled: bool,
}

impl TraceContext {
    /// Parse a `traceparent` value; `None` when it is not one.
    pub fn parse(value: &[u8]) -> Option<Self> {
        if value.len() < 55 || (value.len() > 55 && value[55] != b'-') {
            return None;
        }
        let version = hex::<1>(&value[0..2])?[0];
        if version == 0xff || (version == 0 && value.len() != 55) {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let trace_id = hex::<16>(&value[3..35])?;
        let span_id = hex::<8>(&value[36..52])?;
        let flags = hex::<1>(&value[53..55])?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }
}

/// `N` bytes from `2N` lower-case hex digits (HEXDIGLC: upper case is not
/// a valid traceparent).
fn hex<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = digit(s[2 * i])? << 4 | digit(s[2 * i + 1])?;
    }
    Some(out)
}

/// The version-00 form, as a `traceparent` header carries it.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.span_id.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", u8::from(self.sampled))
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({self})")
    }
}

/// In JSON as the header's own text (`"00-4bf9...-00f0...-01"`): what a
/// pipeline can hand to any tracing tool.
impl Serialize for TraceContext {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TraceContext {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TraceContext::parse(s.as_bytes())
            .ok_or_else(|| serde::de::Error::custom(format!("not a W3C traceparent: {s:?}")))
    }
}

/// The first valid `traceparent` among metadata key/value pairs (keys
/// compared without case: gRPC and ttrpc send them lower case, HTTP/2
/// requires it, but a ttrpc peer is free to send any).
pub(crate) fn find_traceparent<'a, K, V>(
    pairs: impl IntoIterator<Item = (K, V)>,
) -> Option<TraceContext>
where
    K: AsRef<[u8]> + 'a,
    V: AsRef<[u8]> + 'a,
{
    pairs
        .into_iter()
        .filter(|(k, _)| k.as_ref().eq_ignore_ascii_case(TRACEPARENT.as_bytes()))
        .find_map(|(_, v)| TraceContext::parse(v.as_ref()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    // The example of W3C Trace Context Level 1, section 3.2.2.3
    // ("Examples of HTTP traceparent Headers").
    const SPEC_SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const SPEC_NOT_SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

    #[test]
    fn spec_examples() {
        let t = TraceContext::parse(SPEC_SAMPLED.as_bytes()).unwrap();
        assert_eq!(t.trace_id[..4], [0x4b, 0xf9, 0x2f, 0x35]);
        assert_eq!(t.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(t.sampled);
        assert_eq!(t.to_string(), SPEC_SAMPLED);
        let n = TraceContext::parse(SPEC_NOT_SAMPLED.as_bytes()).unwrap();
        assert!(!n.sampled);
        assert_eq!(n.to_string(), SPEC_NOT_SAMPLED);
    }

    #[test]
    fn invalid_forms_are_ignored() {
        for bad in [
            // version ff
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // all-zero trace id, all-zero parent id
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // upper case
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            // version 00 with more after it
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // separators
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // short
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "",
        ] {
            assert_eq!(TraceContext::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn later_versions_read_by_their_first_fields() {
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later";
        let t = TraceContext::parse(v.as_bytes()).unwrap();
        assert_eq!(t.to_string(), SPEC_SAMPLED);
        let glued = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x";
        assert_eq!(TraceContext::parse(glued.as_bytes()), None);
    }

    #[test]
    fn found_among_metadata_and_round_trips_as_json() {
        let md = [
            ("user-agent", "grpc-go/1.75.0"),
            ("traceparent", "nonsense"),
            ("Traceparent", SPEC_SAMPLED),
        ];
        let t = find_traceparent(md).unwrap();
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{SPEC_SAMPLED}\""));
        assert_eq!(serde_json::from_str::<TraceContext>(&json).unwrap(), t);
        assert!(serde_json::from_str::<TraceContext>("\"00-xyz\"").is_err());
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = TraceContext::parse(&bytes);
        }

        #[test]
        fn what_it_prints_it_reads(
            trace_id in any::<[u8; 16]>(),
            span_id in any::<[u8; 8]>(),
            sampled in any::<bool>(),
        ) {
            prop_assume!(trace_id != [0; 16] && span_id != [0; 8]);
            let t = TraceContext { trace_id, span_id, sampled };
            prop_assert_eq!(TraceContext::parse(t.to_string().as_bytes()), Some(t));
        }
    }
}
