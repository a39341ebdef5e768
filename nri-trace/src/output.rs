//! Printing capture events: human text (with a hex/ASCII dump) or NDJSON.

use std::io::{self, Write};

use crate::{
    basic_types::Direction,
    capture::{CaptureEvent, Origin, ProcessEvent},
    human::{clock, sanitize},
};

/// `xxd`-style dump of at most `max` bytes.
pub fn hexdump(w: &mut impl Write, bytes: &[u8], max: usize) -> io::Result<()> {
    for (i, line) in bytes[..bytes.len().min(max)].chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = line
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(w, "    {:06x}  {:<47}  {}", i * 16, hex.join(" "), ascii)?;
    }
    if bytes.len() > max {
        writeln!(w, "    ... {} more bytes", bytes.len() - max)?;
    }
    Ok(())
}

pub fn text(w: &mut impl Write, ev: &CaptureEvent, dump_max: usize) -> io::Result<()> {
    match ev {
        CaptureEvent::Open(o) => {
            let origin = match &o.origin {
                Origin::Existing => "existing".to_string(),
                Origin::Accept { listen_fd } => format!("accept on fd {listen_fd}"),
                Origin::Connect => "connect".to_string(),
                Origin::Socketpair { other_fd } => format!("socketpair with fd {other_fd}"),
                Origin::Dup { old_fd } => format!("dup of fd {old_fd}"),
            };
            let peer = o
                .peer
                .as_ref()
                .map(|p| format!(" peer {}[{}]", sanitize(p.comm.as_deref().unwrap_or("?")), p.pid))
                .unwrap_or_default();
            let path = o
                .socket_path
                .as_ref()
                .map(|p| format!(" {}", sanitize(&p.display().to_string())))
                .unwrap_or_default();
            writeln!(w, "{} {} open  pid {} fd {} ({origin}){path}{peer}", clock(&o.ts), o.conn, o.tgid, o.fd)
        }
        CaptureEvent::Close(c) => writeln!(w, "{} {} close ({:?})", clock(&c.ts), c.conn, c.reason),
        CaptureEvent::Chunk(c) => {
            let arrow = match c.direction {
                Direction::In => "<-",
                Direction::Out => "->",
            };
            let mut notes = String::new();
            if c.gap_before {
                notes.push_str(" [records lost before]");
            }
            if c.truncated {
                notes.push_str(&format!(" [truncated: {} of {} bytes]", c.bytes.len(), c.syscall_len));
            }
            writeln!(w, "{} {} {arrow} {} {} bytes tid {}{notes}", clock(&c.ts), c.conn, c.syscall.name(), c.bytes.len(), c.tid)?;
            hexdump(w, &c.bytes, dump_max)
        }
        CaptureEvent::Process(ProcessEvent::Fork { ts, parent, child }) => {
            writeln!(w, "{} process {parent} forked {child}", clock(ts))
        }
        CaptureEvent::Process(ProcessEvent::Exit { ts, tgid }) => writeln!(w, "{} process {tgid} exited", clock(ts)),
        CaptureEvent::Process(ProcessEvent::ListenerGone { ts, tgid, path }) => {
            writeln!(w, "{} listener {tgid} of {} exited: looking for its successor", clock(ts), sanitize(&path.display().to_string()))
        }
        CaptureEvent::Process(ProcessEvent::Listening { ts, tgid, path }) => {
            writeln!(w, "{} process {tgid} now listens on {}: traced", clock(ts), sanitize(&path.display().to_string()))
        }
        CaptureEvent::Loss(l) => writeln!(
            w,
            "!! LOST: {} records ({} bytes) dropped by a full ring buffer, {} unreadable chunks, {} fds not tracked (map full), {} malformed, {} sandbox records over the rate limit, {} processes not followed (map full)",
            l.lost_records, l.lost_bytes, l.read_faults, l.fd_map_full, l.malformed, l.sandbox_suppressed, l.pod_map_full
        ),
        CaptureEvent::Sandbox(s) => writeln!(w, "{} ~~ {}", clock(&s.ts), sanitize(&s.describe())),
        CaptureEvent::CriState(s) => writeln!(
            w,
            "{} runtime state (asked over CRI): {} pods, {} containers{}",
            clock(&s.ts),
            s.pods.len(),
            s.containers.len(),
            if s.truncated { ", truncated" } else { "" }
        ),
        // The clock alone: nothing happened to tell.
        CaptureEvent::Tick { .. } => Ok(()),
    }
}

/// Totals for `debug capture -o count`.
#[derive(Debug, Default, serde::Serialize)]
pub struct Counts {
    pub connections_opened: u64,
    pub connections_closed: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub truncated_chunks: u64,
    pub chunks_after_gap: u64,
    pub loss: crate::capture::Loss,
}

impl Counts {
    pub fn add(&mut self, ev: &CaptureEvent) {
        match ev {
            CaptureEvent::Open(_) => self.connections_opened += 1,
            CaptureEvent::Close(_) => self.connections_closed += 1,
            CaptureEvent::Chunk(c) => {
                self.chunks += 1;
                self.bytes += c.bytes.len() as u64;
                self.truncated_chunks += u64::from(c.truncated);
                self.chunks_after_gap += u64::from(c.gap_before);
            }
            CaptureEvent::Loss(l) => self.loss = *l,
            CaptureEvent::Process(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_)
            | CaptureEvent::Tick { .. } => {}
        }
    }
}

/// One NDJSON line: the recording format, so `debug capture -o json`
/// output can be replayed ([`crate::store::raw_capture`]).
pub fn ndjson(w: &mut impl Write, ev: &CaptureEvent) -> io::Result<()> {
    crate::store::raw_capture::write_event(w, ev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdump_format() {
        let mut v = Vec::new();
        hexdump(&mut v, b"hello\x00world, this is long", 20).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.starts_with("    000000  68 65 6c 6c 6f 00 77"), "{s}");
        assert!(s.contains("hello.world, th"), "{s}");
        assert!(s.contains("... 5 more bytes"), "{s}");
    }
}
