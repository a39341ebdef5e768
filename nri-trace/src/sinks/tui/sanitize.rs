//! Untrusted text (pod names, annotations, plugin names, error messages)
//! made inert before it reaches the terminal.
//!
//! A pod name is whatever the API server accepted and a plugin's error
//! message is whatever the plugin wrote: written raw, an ESC or a C1 CSI
//! would let it move the cursor, retitle the window or hide text, and a
//! bidi override would let it display reversed. Each such character is
//! replaced by a visible one, so the text stays readable and the
//! manipulation shows.

/// Longest text kept from one untrusted string (characters); longer text
/// is cut with an ellipsis, so a huge annotation cannot bloat a row.
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
        // Line and paragraph separators break a row like a newline.
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

/// Whether `s` is already inert (what [`sanitize`] would leave as is,
/// length aside).
pub fn is_inert(s: &str) -> bool {
    s.chars().all(|c| replacement(c).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_become_visible_and_inert() {
        let s = sanitize("web\x1b[31mred\x1b]0;pwned\x07\u{9b}2J");
        assert_eq!(s, "web␛[31mred␛]0;pwned␇\u{fffd}2J");
        assert!(is_inert(&s));
        assert!(!s.chars().any(|c| c.is_control()));
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
}
