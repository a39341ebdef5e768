//! What people read: the one duration format, the one clock format, and
//! the one sanitizer every text sink (text lines, the TUI, the report,
//! `explain`) puts untrusted text through.
//!
//! A pod name is whatever the API server accepted and a plugin's error
//! message is whatever the plugin wrote: written raw, an ESC or a C1 CSI
//! would let it move the cursor, retitle the window or hide text, and a
//! bidi override would let it display reversed. [`sanitize`] replaces each
//! such character by a visible one, so the text stays readable and the
//! manipulation shows.

use crate::basic_types::Timestamp;

/// Longest text kept from one untrusted string (characters); longer text
/// is cut with an ellipsis, so a huge annotation cannot bloat a line.
pub const MAX_CHARS: usize = 512;

/// The visible stand-in of `c`, or `None` when `c` is harmless.
fn replacement(c: char) -> Option<char> {
    match c {
        // C0 controls (ESC included) as their Unicode control pictures
        // (U+2400..): one column wide and they say which byte it was.
        '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32),
        '\u{7f}' => Some('\u{2421}'),
        // C1 controls: 0x9B is a one-byte CSI on terminals that honour it.
        '\u{80}'..='\u{9f}' => Some('\u{fffd}'),
        // Bidi embeddings, overrides, isolates and marks: they reorder
        // what follows on the line.
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}' => {
            Some('\u{fffd}')
        }
        // Line and paragraph separators break a line like a newline.
        '\u{2028}' | '\u{2029}' => Some('\u{fffd}'),
        _ => None,
    }
}

/// `s` with every control character, C1 control and bidi control replaced
/// by a visible character, cut at [`MAX_CHARS`].
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_CHARS * 4));
    for (i, c) in s.chars().enumerate() {
        if i == MAX_CHARS {
            out.push('…');
            break;
        }
        out.push(replacement(c).unwrap_or(c));
    }
    out
}

/// Characters of an id's short form, as `docker ps` shows a container id.
const SHORT_ID_CHARS: usize = 12;

/// The short form of a sandbox or container id: its first 12 characters,
/// cut on a character boundary (a garbled id from the capture may hold
/// multi-byte characters). Not sanitized: a sink showing it to a person
/// sanitizes it.
pub fn short_id(id: &str) -> &str {
    id.char_indices()
        .nth(SHORT_ID_CHARS)
        .map_or(id, |(at, _)| &id[..at])
}

/// Whether `s` is already inert (what [`sanitize`] would leave as is,
/// length aside).
pub fn is_inert(s: &str) -> bool {
    s.chars().all(|c| replacement(c).is_none())
}

/// A duration, short: "812µs", "12.3ms", "502ms", "1.50s", "2m03s".
pub fn duration(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}µs", ns / 1_000)
    } else if ns < 100_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else if ns < 1_000_000_000 {
        format!("{}ms", ns / 1_000_000)
    } else if ns < 60_000_000_000 {
        format!("{:.2}s", ns as f64 / 1e9)
    } else {
        let s = ns / 1_000_000_000;
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// An optional duration, "-" when missing.
pub fn duration_opt(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), duration)
}

/// HH:MM:SS.micros of a wall-clock time (UTC).
pub fn clock(ts: &Timestamp) -> String {
    let secs = ts.wall_ns / 1_000_000_000;
    let micros = (ts.wall_ns % 1_000_000_000) / 1000;
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        day / 3600,
        day / 60 % 60,
        day % 60,
        micros
    )
}

/// HH:MM:SS.mmm of a wall-clock time (UTC).
pub fn clock_ms(ts: &Timestamp) -> String {
    let mut s = clock(ts);
    s.truncate(12);
    s
}

/// An error and its causes on one line: "a: b: c" (a cause whose text
/// the message already holds is not repeated).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id from the capture may be garbled: cutting it never panics,
    /// whatever its bytes.
    #[test]
    fn short_ids_cut_on_characters() {
        let hex = "0123456789abcdef0123";
        assert_eq!(short_id(hex), "0123456789ab");
        assert_eq!(short_id("c1"), "c1");
        // 11 ASCII bytes then a 3-byte character: byte 12 is inside it.
        let garbled = "0123456789a\u{2028}bcdef";
        assert_eq!(short_id(garbled), "0123456789a\u{2028}");
        assert_eq!(short_id("ééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn escape_sequences_become_visible_and_inert() {
        let s = sanitize("web\x1b[31mred\x1b]0;pwned\x07\u{9b}2J");
        assert_eq!(s, "web␛[31mred␛]0;pwned␇\u{fffd}2J");
        assert!(is_inert(&s));
        assert!(!s.chars().any(char::is_control));
    }

    #[test]
    fn bidi_overrides_and_newlines_are_replaced() {
        let s = sanitize("a\u{202e}gnp.exe\u{2066}b\nc\r\u{2028}");
        assert!(!s.contains('\u{202e}') && !s.contains('\u{2066}'));
        assert!(!s.contains('\n') && !s.contains('\r') && !s.contains('\u{2028}'));
        assert_eq!(
            s.chars().count(),
            "a\u{202e}gnp.exe\u{2066}b\nc\r\u{2028}".chars().count()
        );
    }

    #[test]
    fn ordinary_text_is_kept_and_long_text_cut() {
        assert_eq!(
            sanitize("kube-system/coredns-7db6d8ff4d-x9z2k"),
            "kube-system/coredns-7db6d8ff4d-x9z2k"
        );
        assert_eq!(sanitize("µs 名前"), "µs 名前");
        let long = "x".repeat(MAX_CHARS + 10);
        let s = sanitize(&long);
        assert_eq!(s.chars().count(), MAX_CHARS + 1);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn durations() {
        assert_eq!(duration(950), "950ns");
        assert_eq!(duration(412_000), "412µs");
        assert_eq!(duration(1_234_000), "1.2ms");
        assert_eq!(duration(502_517_000), "502ms");
        assert_eq!(duration(2_001_000_000), "2.00s");
        assert_eq!(duration(123_000_000_000), "2m03s");
        assert_eq!(duration_opt(None), "-");
    }

    #[test]
    fn error_chains() {
        let io = std::io::Error::other("disk full");
        let e = crate::pipeline::PipelineError::Sink(io);
        assert_eq!(error_chain(&e), "writing the output: disk full");
    }

    #[test]
    fn clocks() {
        let ts = Timestamp {
            mono_ns: 0,
            wall_ns: 1_700_000_000_123_456_789,
        };
        assert_eq!(clock(&ts), "22:13:20.123456");
        assert_eq!(clock_ms(&ts), "22:13:20.123");
    }
}
