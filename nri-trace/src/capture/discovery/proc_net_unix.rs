//! The table of unix sockets in /proc/net/unix: parsed by hand (why: its
//! `parse_proc_net_unix`), every column checked.

use std::fs;
use std::path::PathBuf;

use super::{io_error, DiscoveryError};

/// `__SO_ACCEPTCON` (include/linux/net.h): the Flags column of /proc/net/unix for listeners.
const SO_ACCEPTCON: u32 = 1 << 16;

/// One line of /proc/net/unix (net/unix/af_unix.c, `unix_seq_show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnixSocketEntry {
    /// Socket inode, as in the `socket:[N]` link of an fd holding it.
    pub inode: u64,
    /// Bound path; `None` for unnamed sockets, `"@name"` for abstract ones (kernel prints '@').
    pub path: Option<String>,
    /// Flags has `__SO_ACCEPTCON`, i.e. the socket is in `listen()`.
    pub listening: bool,
    /// St column: 1 SS_UNCONNECTED, 2 SS_CONNECTING, 3 SS_CONNECTED, 4 SS_DISCONNECTING.
    pub state: u8,
    /// Type column: 1 SOCK_STREAM, 2 SOCK_DGRAM, 5 SOCK_SEQPACKET.
    pub sock_type: u16,
}

/// Parses the text of /proc/net/unix; the header, garbage and truncated lines are skipped.
///
/// Hand-written, not procfs's `net::unix()`/`Process::unix()`: those skip the Flags column (so
/// a listener cannot be told from an unconnected socket), end the path at the first whitespace
/// (a path with a space is cut), and fail the whole table on one non-UTF-8 path or odd line.
pub(crate) fn parse_proc_net_unix(text: &str) -> Vec<UnixSocketEntry> {
    text.lines().filter_map(parse_proc_net_unix_line).collect()
}

/// Parses one entry line, `None` for the header or anything that is not an entry.
///
/// The kernel prints `"%pK: %08X %08X %08X %04X %02X %5lu"`, then, only for bound sockets,
/// one space and the raw path up to the end of the line (af_unix.c `unix_seq_show`), so the
/// path is everything after the single separator and may contain spaces.
fn parse_proc_net_unix_line(line: &str) -> Option<UnixSocketEntry> {
    let mut rest = line;
    let mut fields = [""; 7];
    for field in &mut fields {
        let trimmed = rest.trim_start_matches([' ', '\t']);
        let end = trimmed.find([' ', '\t']).unwrap_or(trimmed.len());
        let (token, tail) = trimmed.split_at(end);
        if token.is_empty() {
            return None;
        }
        *field = token;
        rest = tail;
    }
    let [num, refcount, protocol, flags, sock_type, state, inode] = fields;
    // "Num" is a (possibly hashed or zeroed, see kptr_restrict) pointer followed by ':'.
    if !is_hex(num.strip_suffix(':')?) || !is_hex(refcount) || !is_hex(protocol) {
        return None;
    }
    let flags = parse_hex_u32(flags)?;
    let sock_type = u16::try_from(parse_hex_u32(sock_type)?).ok()?;
    let state = u8::try_from(parse_hex_u32(state)?).ok()?;
    let inode = parse_dec_u64(inode)?;
    // `rest` is empty or starts with the one ASCII separator the kernel put before the path.
    let path = rest.get(1..).filter(|p| !p.is_empty()).map(str::to_owned);
    Some(UnixSocketEntry {
        inode,
        path,
        listening: flags & SO_ACCEPTCON != 0,
        state,
        sock_type,
    })
}

/// True if `s` is a non-empty run of hex digits (from_str_radix alone would accept a '+').
fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses a hex column strictly (digits only, no sign, no overflow).
fn parse_hex_u32(s: &str) -> Option<u32> {
    if !is_hex(s) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// Parses a decimal number strictly (digits only, no sign, no overflow).
pub(super) fn parse_dec_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Reads `/proc/<pid>/net/unix` (the netns of `pid`) or, for `None`, /proc/self/net/unix.
pub(crate) fn read_proc_net_unix(pid: Option<u32>) -> Result<Vec<UnixSocketEntry>, DiscoveryError> {
    let path = match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/net/unix")),
        None => PathBuf::from("/proc/self/net/unix"),
    };
    let bytes = fs::read(&path).map_err(|e| io_error(&path, pid, e))?;
    Ok(parse_proc_net_unix(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header line as printed by af_unix.c.
    const HEADER: &str = "Num       RefCount Protocol Flags    Type St Inode Path";

    /// Good lines: listener, accepted connection, unnamed, seqpacket.
    #[test]
    fn parse_good_lines() {
        let text = format!(
            "{HEADER}\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 23456 /run/containerd/containerd.sock\n\
             0000000000000000: 00000003 00000000 00000000 0001 03 23460 /run/containerd/containerd.sock\n\
             000000003ab19994: 00000003 00000000 00000000 0001 03  6524\n\
             ffff8f0a12345678: 00000002 00000000 00010000 0005 01 99999999999 /var/run/nri/nri.sock\n\
             0000000000000000: 00000002 00000000 00000000 0002 01   123 /run/systemd/notify\n"
        );
        let e = parse_proc_net_unix(&text);
        assert_eq!(e.len(), 5);
        assert_eq!(
            e[0],
            UnixSocketEntry {
                inode: 23456,
                path: Some("/run/containerd/containerd.sock".into()),
                listening: true,
                state: 1,
                sock_type: 1,
            }
        );
        assert!(!e[1].listening);
        assert_eq!(e[1].state, 3);
        assert_eq!(e[1].inode, 23460);
        assert_eq!(e[2].path, None);
        assert_eq!(e[2].inode, 6524);
        assert_eq!(e[3].sock_type, 5);
        assert!(e[3].listening);
        assert_eq!(e[3].inode, 99_999_999_999);
        assert_eq!(e[3].path.as_deref(), Some("/var/run/nri/nri.sock"));
        assert_eq!(e[4].sock_type, 2);
        assert_eq!(e[4].inode, 123);
    }

    /// Abstract sockets keep the kernel's leading '@' (and '@' for embedded NULs).
    #[test]
    fn parse_abstract() {
        let text =
            "0000000000000000: 00000002 00000000 00010000 0001 01 777 @/containerd-shim/abc.sock\n\
                    0000000000000000: 00000002 00000000 00000000 0002 01 778 @0001f\n\
                    0000000000000000: 00000002 00000000 00000000 0002 01 779 @a@b\n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path.as_deref(), Some("@/containerd-shim/abc.sock"));
        assert_eq!(e[1].path.as_deref(), Some("@0001f"));
        assert_eq!(e[2].path.as_deref(), Some("@a@b"));
    }

    /// Paths are the rest of the line: inner, leading and trailing spaces are kept.
    #[test]
    fn parse_spaces_in_path() {
        let text = "0000000000000000: 00000002 00000000 00010000 0001 01 1 /run/my dir/a b.sock\n\
                    0000000000000000: 00000002 00000000 00010000 0001 01 2  lead\n\
                    0000000000000000: 00000002 00000000 00010000 0001 01 3 /trail \n\
                    0000000000000000: 00000002 00000000 00010000 0001 01     4 /x\r\n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 4);
        assert_eq!(e[0].path.as_deref(), Some("/run/my dir/a b.sock"));
        assert_eq!(e[1].path.as_deref(), Some(" lead"));
        assert_eq!(e[2].path.as_deref(), Some("/trail "));
        assert_eq!(e[3].path.as_deref(), Some("/x"));
        assert_eq!(e[3].inode, 4);
    }

    /// Missing path (unnamed socket) with and without a trailing separator.
    #[test]
    fn parse_missing_path() {
        let text = "0000000000000000: 00000003 00000000 00000000 0001 03 42\n\
                    0000000000000000: 00000003 00000000 00000000 0001 03 43 \n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].path, None);
        assert_eq!(e[1].path, None);
    }

    /// Garbage, truncated and malformed lines are skipped, good ones around them kept.
    #[test]
    fn parse_garbage() {
        let bad = [
            "",
            "   ",
            HEADER,
            "hello world",
            "0000000000000000: 00000002 00000000 00010000 0001 01",
            "0000000000000000 00000002 00000000 00010000 0001 01 5 /no/colon",
            "zzzz: 00000002 00000000 00010000 0001 01 5 /bad/num",
            "0000000000000000: 0000000g 00000000 00010000 0001 01 5 /bad/ref",
            "0000000000000000: 00000002 00000000 0001000x 0001 01 5 /bad/flags",
            "0000000000000000: 00000002 00000000 100000000 0001 01 5 /flags/overflow",
            "0000000000000000: 00000002 00000000 00010000 10001 01 5 /type/overflow",
            "0000000000000000: 00000002 00000000 00010000 0001 100 5 /state/overflow",
            "0000000000000000: 00000002 00000000 00010000 0001 01 abc /bad/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 +5 /signed/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 -5 /neg/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 99999999999999999999999 /big",
            "0000000000000000: +0000002 00000000 00010000 0001 01 5 /plus",
            "\u{fffd}\u{fffd}: 00000002 00000000 00010000 0001 01 5 /utf8",
        ];
        for line in bad {
            assert_eq!(parse_proc_net_unix(line), vec![], "line {line:?}");
        }
        let mut text = bad.join("\n");
        text.push_str("\n0000000000000000: 00000002 00000000 00010000 0001 01 9 /ok\nnot a line");
        let e = parse_proc_net_unix(&text);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].inode, 9);
        // Arbitrary bytes must not panic.
        let noise: String = (0u32..2000)
            .filter_map(|i| char::from_u32((i * 7919) % 0x2fff))
            .collect();
        let _ = parse_proc_net_unix(&noise);
    }
}
