//! What a replay reads, told from the file itself: a record file
//! (`--save`: a `session` line, then the decoded observations;
//! docs/schema.md) goes straight to the engine, a raw capture
//! (`--save-raw`, `debug capture -o json`: capture events) through the
//! decoders first. Both may be gzipped; a record file may come on
//! standard input (`-`); a directory is a flight recorder's (`nri-trace
//! record`): its segments, read in order as one record file.

use std::{
    fs::File,
    io::{self, BufRead, BufReader, Cursor, Read},
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::{
    capture::{
        runtimes::{runtime_from, RuntimeKind},
        CaptureEvent,
    },
    store::ndjson::{self, FileReader, LineError, LineReader},
    store::raw_capture,
    store::{
        flight_recorder,
        record_file::{RecordLine, SessionInfo},
    },
};

/// Why a file cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot open {name}")]
    Open {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("reading {name}")]
    Read {
        name: String,
        #[source]
        source: LineError,
    },
    #[error("{name} is empty: give a file written by `nri-trace watch --save` (or --save-raw)")]
    Empty { name: String },
    #[error(
        "{name} is not an nri-trace file (its first line is {first}): give a file written by \
         `nri-trace watch --save` (or --save-raw, `nri-trace debug capture -o json`)"
    )]
    Unknown { name: String, first: String },
    #[error(
        "{name} holds no recorder segments (segment-N.ndjson): is `nri-trace record` writing \
         there? Give its --dir, or a file `watch --save` wrote"
    )]
    NoSegments { name: String },
    #[error(
        "{name} is a raw capture on standard input: give it as a file (its sockets are read \
         from it before the replay), or replay the record file `watch --save` writes"
    )]
    RawOnStdin { name: String },
}

/// A replay's input, opened.
pub enum Source {
    /// A record file: its session line, and the lines after it.
    Records {
        name: String,
        session: SessionInfo,
        lines: LineReader<Box<dyn BufRead + Send>, RecordLine>,
    },
    /// A raw capture, and the runtime sockets its connections name.
    Capture {
        name: String,
        session: SessionInfo,
        events: FileReader<CaptureEvent>,
    },
}

impl Source {
    /// What the input says of the traced runtime.
    pub fn session(&self) -> &SessionInfo {
        match self {
            Source::Records { session, .. } | Source::Capture { session, .. } => session,
        }
    }

    /// A raw capture holds every byte unredacted; its replay redacts
    /// secrets unless `keep` (`replay --no-redact`). A record file's lines
    /// are replayed as they were saved, redacted or not.
    #[must_use]
    pub fn keep_raw_secrets(mut self, keep: bool) -> Self {
        if let Source::Capture { session, .. } = &mut self {
            session.redacted = !keep;
        }
        self
    }

    /// The file's name as messages give it ("standard input" for `-`).
    pub fn name(&self) -> &str {
        match self {
            Source::Records { name, .. } | Source::Capture { name, .. } => name,
        }
    }
}

/// Only the `type` of a line.
#[derive(Deserialize)]
struct Kind {
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// The types a raw capture's lines have (store/raw_capture.rs). `tick`
/// too: a capture started on a quiet runtime (its connections opened
/// before the start, nothing moving) begins with one (docs/capture.md,
/// "Ticks"), and `replay` refused it as "not an nri-trace file".
const CAPTURE_TYPES: &[&str] = &[
    "open",
    "chunk",
    "close",
    "process",
    "loss",
    "sandbox",
    "cri_state",
    "tick",
];

/// A flight recorder's segments (`store::flight_recorder`) as one stream, oldest
/// first: each up to its last newline, so a segment cut mid-line (a
/// recorder killed, or the one being written now) loses that line only;
/// a segment deleted since the listing (rotated away) is skipped.
fn segments_reader(dir: &Path, name: &str) -> Result<Box<dyn Read + Send>, SourceError> {
    let open_err = |source| SourceError::Open {
        name: name.to_string(),
        source,
    };
    let mut stream: Box<dyn Read + Send> = Box::new(io::empty());
    let mut any = false;
    for seg in flight_recorder::segments(dir).map_err(open_err)? {
        let mut f = match File::open(&seg.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(open_err(e)),
        };
        let whole = whole_lines(&mut f).map_err(open_err)?;
        any = true;
        stream = Box::new(stream.chain(f.take(whole)));
    }
    if !any {
        return Err(SourceError::NoSegments {
            name: name.to_string(),
        });
    }
    Ok(stream)
}

/// The length of `f` up to its last newline (kept), with `f` rewound.
fn whole_lines(f: &mut File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let len = f.metadata()?.len();
    let mut end = len;
    let mut buf = [0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    f.seek(SeekFrom::Start(0))?;
    Ok(end)
}

fn reader(path: &Path) -> Result<(String, Box<dyn BufRead + Send>), SourceError> {
    if path.is_dir() {
        let name = format!("the recorder's {}", path.display());
        let stream = segments_reader(path, &name)?;
        return Ok((name, Box::new(BufReader::with_capacity(256 * 1024, stream))));
    }
    let stdin = path == Path::new("-");
    let name = if stdin {
        "standard input".to_string()
    } else {
        path.display().to_string()
    };
    let raw: Box<dyn Read + Send> = if stdin {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path).map_err(|source| SourceError::Open {
            name: name.clone(),
            source,
        })?)
    };
    let mut buf = BufReader::with_capacity(256 * 1024, raw);
    // gzip (RFC 1952 magic 1f 8b), as ndjson::open reads it.
    let gz = buf
        .fill_buf()
        .map_err(|source| SourceError::Open {
            name: name.clone(),
            source,
        })?
        .starts_with(&[0x1f, 0x8b]);
    let inner: Box<dyn BufRead + Send> = if gz {
        Box::new(BufReader::with_capacity(
            256 * 1024,
            flate2::bufread::MultiGzDecoder::new(buf),
        ))
    } else {
        Box::new(buf)
    };
    Ok((name, inner))
}

/// Open `path` (`-`: standard input) and tell what it holds.
pub fn open_source(path: &Path) -> Result<Source, SourceError> {
    let (name, mut inner) = reader(path)?;
    // The first non-blank line says what the file is; it is read, then
    // put back in front of the rest. Bounded by the readers' line cap.
    let mut first = Vec::new();
    loop {
        first.clear();
        let n = (&mut inner)
            .take(ndjson::DEFAULT_MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut first)
            .map_err(|source| SourceError::Open {
                name: name.clone(),
                source,
            })?;
        if n == 0 {
            return Err(SourceError::Empty { name });
        }
        if first.iter().any(|b| !b.is_ascii_whitespace()) {
            break;
        }
    }
    let kind = serde_json::from_slice::<Kind>(&first)
        .ok()
        .and_then(|k| k.kind);
    let rest: Box<dyn BufRead + Send> = Box::new(Cursor::new(first).chain(inner));
    match kind.as_deref() {
        Some("session") => {
            let mut lines = LineReader::new(rest);
            let session = match lines.next() {
                Some(Ok(RecordLine::Session(s))) => s,
                Some(Err(source)) => return Err(SourceError::Read { name, source }),
                _ => {
                    return Err(SourceError::Unknown {
                        name,
                        first: "a session line that does not parse".into(),
                    })
                }
            };
            Ok(Source::Records {
                name,
                session,
                lines,
            })
        }
        Some(k) if CAPTURE_TYPES.contains(&k) => {
            if path == Path::new("-") {
                return Err(SourceError::RawOnStdin { name });
            }
            let session = capture_session(path, &name)?;
            let events = raw_capture::open(path).map_err(|source| SourceError::Read {
                name: name.clone(),
                source,
            })?;
            Ok(Source::Capture {
                name,
                session,
                events,
            })
        }
        other => Err(SourceError::Unknown {
            name,
            first: other.map_or_else(
                || "not an nri-trace line".into(),
                |k| format!("of type {k:?}"),
            ),
        }),
    }
}

/// The runtime a raw capture traced, from its file (see
/// [`session_of_events`]).
fn capture_session(path: &Path, name: &str) -> Result<SessionInfo, SourceError> {
    let events = raw_capture::open(path).map_err(|source| SourceError::Read {
        name: name.to_string(),
        source,
    })?;
    // A bad line is reported by the replay itself.
    let mut session = session_of_events(events.filter_map(Result::ok));
    // What a raw capture's replay shows is redacted unless asked not to
    // ([`Source::keep_raw_secrets`]), as a live `watch` is.
    session.redacted = true;
    Ok(session)
}

/// The runtime a raw capture traced: its CRI and NRI sockets as the
/// connections' opens name them (CRI-O when a `crio.sock` is among them,
/// else containerd; `capture::runtimes`), started at its first open.
pub fn session_of_events<I, E>(events: I) -> SessionInfo
where
    I: IntoIterator<Item = E>,
    E: std::borrow::Borrow<CaptureEvent>,
{
    let mut paths = std::collections::BTreeSet::new();
    let mut started = None;
    for ev in events {
        if let CaptureEvent::Open(o) = ev.borrow() {
            started.get_or_insert(o.ts.wall_ns);
            if let Some(p) = &o.socket_path {
                paths.insert(p.to_string_lossy().into_owned());
            }
        }
    }
    let paths: Vec<String> = paths.into_iter().collect();
    let kind = if paths.iter().any(|p| p.ends_with("/crio.sock")) {
        RuntimeKind::CriO
    } else {
        RuntimeKind::Containerd
    };
    let r = runtime_from(0, kind, &paths);
    let path_of = |p: Option<PathBuf>| p.map(|p| p.display().to_string()).unwrap_or_default();
    SessionInfo {
        tool: crate::TOOL.into(),
        runtime: Some(super::target::runtime_name(kind).into()),
        runtime_pid: None,
        cri_socket: path_of(r.cri_socket),
        nri_socket: path_of(r.nri_socket),
        started_unix_ns: started.unwrap_or(0),
        redacted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::{open_source, Source};

    /// A raw capture whose first line is a tick (the runtime was quiet
    /// when the capture started) is a raw capture.
    #[test]
    fn a_raw_capture_may_start_with_a_tick() {
        let path = std::env::temp_dir().join(format!("source-tick-{}.ndjson", std::process::id()));
        std::fs::write(
            &path,
            concat!(
                r#"{"v":1,"type":"tick","ts":{"mono_ns":1000,"wall_ns":2000}}"#,
                "\n",
                r#"{"v":1,"type":"tick","ts":{"mono_ns":2000,"wall_ns":3000}}"#,
                "\n"
            ),
        )
        .unwrap();
        let source = open_source(&path);
        let _ = std::fs::remove_file(&path);
        match source {
            Ok(Source::Capture { events, .. }) => assert_eq!(events.count(), 2),
            Ok(Source::Records { .. }) => panic!("a raw capture read as a record file"),
            Err(e) => panic!("{e}"),
        }
    }
}
