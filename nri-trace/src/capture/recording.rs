//! Recordings: a [`CaptureEvent`] stream written to and read back from NDJSON.
//!
//! The format is the one `nri-trace debug capture -o json` prints (and `watch --save-raw` writes)
//! (docs/capture.md): one JSON object per line, `"v"` the record version
//! ([`SCHEMA_VERSION`]) and `"type"` the event kind; chunk bytes are
//! lowercase hex and syscalls are named ([`Syscall::name`]). Reading a
//! recording gives back exactly the events that were written, so decoders
//! and the engine behave the same live or replayed, and real captures can be
//! committed as test fixtures.
//!
//! There is no header line: every line stands on its own, so a recording can
//! be cut, concatenated or filtered with line tools, and a capture killed
//! mid-write loses at most its last line.
//!
//! A recording is untrusted input (fixtures come from anywhere): lines are
//! capped in size ([`DEFAULT_MAX_LINE_BYTES`]), and a bad line is an error
//! naming its line number, never a panic. The reader keeps going after a bad
//! line, so a caller may choose to skip it.

use std::{
    fmt,
    fs::File,
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    iter::FusedIterator,
    path::{Path, PathBuf},
};

use serde::{de, Deserialize, Deserializer, Serialize};

use super::{CaptureEvent, Syscall};

/// Version of the records this build writes, and the newest it reads. Every
/// line carries it as `"v"`; lines without `"v"` (hand-written fixtures) are
/// read as this version.
pub const SCHEMA_VERSION: u32 = 1;

/// Default cap on one line of a recording. The largest line a capture writes
/// is a chunk of `MAX_SNAP` (4 MiB) bytes, 8 MiB as hex; the cap leaves room
/// for that and for long peer command lines while bounding what a corrupt or
/// hostile file can make us buffer. Parsing may hold a few times the line
/// size (serde buffers internally tagged objects before decoding them).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Line buffers bigger than this are released after use rather than kept for
/// the next line: a legitimate line stays below it (see
/// [`DEFAULT_MAX_LINE_BYTES`]), so only oversized input pays for regrowing.
const RETAINED_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// What went wrong reading (or opening) a recording. Every error about the
/// content names its 1-based line number; blank lines count.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    #[error("cannot open recording {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    /// Reading failed; the reader stops after this error.
    #[error("line {line}: read error: {source}")]
    Io { line: u64, source: io::Error },
    /// The line is longer than the reader's cap; it was skipped unread.
    #[error("line {line}: longer than {max} bytes, skipped")]
    LineTooLong { line: u64, max: usize },
    /// The last line has no newline and ends inside a JSON value: the
    /// recording was cut short (typically a capture killed mid-write).
    #[error("line {line}: recording ends in the middle of an event (cut short?)")]
    Truncated { line: u64 },
    /// The line is written by a newer (or unknown) version of the format.
    #[error("line {line}: record version {version} is not supported (this build reads version {SCHEMA_VERSION})")]
    UnsupportedVersion { line: u64, version: u64 },
    /// The line is not a valid event: bad JSON, missing or mistyped field,
    /// bad hex, unknown syscall or event type.
    #[error("line {line}{}: {message}", column_note(*column))]
    Invalid {
        line: u64,
        /// 1-based byte column where serde_json knows it (syntax errors,
        /// mostly). Errors found inside an event (a missing field, bad hex)
        /// have none: serde decodes tagged events from a buffered copy of
        /// the line, which has no positions.
        column: Option<usize>,
        message: String,
    },
}

fn column_note(column: Option<usize>) -> String {
    column.map(|c| format!(", column {c}")).unwrap_or_default()
}

impl RecordingError {
    /// The 1-based line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Open { .. } => None,
            Self::Io { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::Truncated { line }
            | Self::UnsupportedVersion { line, .. }
            | Self::Invalid { line, .. } => Some(*line),
        }
    }
}

/// Create a recording file readable by its owner only (0600): a raw
/// capture holds everything the runtime read and wrote, container
/// environments and mount secrets included. An existing file is replaced.
pub fn create_private(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Writes a [`CaptureEvent`] stream as a recording, one line per event.
///
/// Output is buffered. Events other than chunks (opens, closes, process
/// events, loss reports) are rare and mark points worth having on disk, so
/// they flush; chunks do not, so a busy connection costs few write syscalls.
/// A caller that may go idle after a chunk should call [`flush`] then (as
/// `nri-trace debug capture` does when its event queue is empty). Dropping the
/// writer flushes but loses the error; [`finish`] reports it.
///
/// [`flush`]: RecordingWriter::flush
/// [`finish`]: RecordingWriter::finish
pub struct RecordingWriter<W: Write> {
    out: BufWriter<W>,
    /// Reused line buffer: an event is serialized whole before any byte of it
    /// is written, so an event that cannot be serialized leaves no partial
    /// line behind to corrupt the next one.
    line: Vec<u8>,
    /// Bytes of the lines written so far (buffered ones included): the
    /// file's size once flushed (the flight recorder's bound).
    bytes: u64,
}

impl<W: Write> RecordingWriter<W> {
    /// A writer appending to `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            out: BufWriter::with_capacity(64 * 1024, inner),
            line: Vec::new(),
            bytes: 0,
        }
    }

    /// Bytes of the lines written so far, buffered ones included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Append one event as one line.
    pub fn write(&mut self, ev: &CaptureEvent) -> io::Result<()> {
        self.write_record(ev, !matches!(ev, CaptureEvent::Chunk(_)))
    }

    /// Append one record of another kind (the same line format: `"v"`
    /// first, then the record's fields), flushing if `flush`.
    pub fn write_record<T: Serialize>(&mut self, r: &T, flush: bool) -> io::Result<()> {
        self.stage_record(r)?;
        self.write_staged(flush)
    }

    /// Serialize one record into the line buffer, writing nothing yet: the
    /// bytes its line will take (the flight recorder makes room for them
    /// before they reach the disk).
    pub fn stage_record<T: Serialize>(&mut self, r: &T) -> io::Result<u64> {
        encode_line(&mut self.line, r)?;
        Ok(self.line.len() as u64)
    }

    /// Write the line [`stage_record`](Self::stage_record) made, flushing if
    /// `flush`.
    pub fn write_staged(&mut self, flush: bool) -> io::Result<()> {
        let res = self.out.write_all(&self.line);
        self.bytes += self.line.len() as u64;
        if self.line.capacity() > RETAINED_BUFFER_BYTES {
            self.line = Vec::new();
        }
        res?;
        if flush {
            self.out.flush()?;
        }
        Ok(())
    }

    /// Push buffered lines to the underlying writer and flush it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer (buffered lines may not have reached it yet).
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// Flush and give back the underlying writer.
    pub fn finish(self) -> io::Result<W> {
        self.out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
    }
}

/// Write one event as one recording line (with its newline) to `w`, in a
/// single `write_all`. This is `nri-trace debug capture -o json`'s output.
pub fn write_event(w: &mut impl Write, ev: &CaptureEvent) -> io::Result<()> {
    let mut line = Vec::new();
    encode_line(&mut line, ev)?;
    w.write_all(&line)
}

/// Serialize `ev` into `line` (cleared first) as `{"v":N,"type":...}\n`.
fn encode_line<T: Serialize>(line: &mut Vec<u8>, ev: &T) -> io::Result<()> {
    line.clear();
    serde_json::to_writer(&mut *line, ev).map_err(io::Error::from)?;
    // Add "v" by splicing it after the opening brace rather than going
    // through serde_json::Value: that would copy every (multi-MiB) hex
    // string once more. The event always serializes to an object starting
    // with its "type" tag, so it is never empty and the comma is right.
    if line.first() != Some(&b'{') || line.get(1) == Some(&b'}') {
        return Err(io::Error::other(
            "record did not serialize to a non-empty JSON object",
        ));
    }
    let prefix = format!("{{\"v\":{SCHEMA_VERSION},");
    line.splice(0..1, prefix.into_bytes());
    line.push(b'\n');
    Ok(())
}

/// Iterator over the events of a recording; see [`read_events`].
///
/// Yields one item per non-blank line: the event, or an error naming the
/// line. After a content error it goes on with the next line; after a read
/// error it ends.
pub struct RecordingReader<R, T = CaptureEvent> {
    inner: R,
    kind: std::marker::PhantomData<fn() -> T>,
    /// 1-based number of the line last read; 0 before the first.
    line: u64,
    buf: Vec<u8>,
    max_line: usize,
    done: bool,
}

/// One physical line, as read into `RecordingReader::buf`.
enum RawLine {
    Eof,
    /// In `buf`, without its newline; `terminated` is false for a last line
    /// without one.
    Line {
        terminated: bool,
    },
    /// Longer than the cap; consumed and dropped.
    TooLong,
}

impl<R: BufRead, T: RecordType> RecordingReader<R, T> {
    /// A reader of `inner` with the default line cap
    /// ([`DEFAULT_MAX_LINE_BYTES`]).
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            kind: std::marker::PhantomData,
            line: 0,
            buf: Vec::new(),
            max_line: DEFAULT_MAX_LINE_BYTES,
            done: false,
        }
    }

    /// Cap lines at `max` bytes (newline excluded) instead of the default;
    /// longer lines give [`RecordingError::LineTooLong`] and are skipped.
    #[must_use]
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line = max;
        self
    }

    /// 1-based number of the line last read (0 before the first).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// Read the next physical line into `self.buf` without ever holding more
    /// than `max_line` bytes of it (`BufRead::read_until` would buffer a
    /// newline-free file whole).
    fn read_raw_line(&mut self) -> io::Result<RawLine> {
        if self.buf.capacity() > RETAINED_BUFFER_BYTES {
            self.buf = Vec::new();
        }
        self.buf.clear();
        let mut any = false;
        let mut too_long = false;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                return Ok(match (any, too_long) {
                    (false, _) => RawLine::Eof,
                    (true, true) => RawLine::TooLong,
                    (true, false) => RawLine::Line { terminated: false },
                });
            }
            any = true;
            let newline = avail.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(avail.len());
            if !too_long {
                if self.buf.len() + take > self.max_line {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&avail[..take]);
                }
            }
            self.inner.consume(take + usize::from(newline.is_some()));
            if newline.is_some() {
                return Ok(if too_long {
                    RawLine::TooLong
                } else {
                    RawLine::Line { terminated: true }
                });
            }
        }
    }
}

impl<R: BufRead, T: RecordType> Iterator for RecordingReader<R, T> {
    type Item = Result<T, RecordingError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let raw = match self.read_raw_line() {
                Ok(raw) => raw,
                Err(source) => {
                    // Retrying a failed read could fail forever; stop.
                    self.done = true;
                    return Some(Err(RecordingError::Io {
                        line: self.line + 1,
                        source,
                    }));
                }
            };
            let terminated = match raw {
                RawLine::Eof => {
                    self.done = true;
                    return None;
                }
                RawLine::TooLong => {
                    self.line += 1;
                    return Some(Err(RecordingError::LineTooLong {
                        line: self.line,
                        max: self.max_line,
                    }));
                }
                RawLine::Line { terminated } => terminated,
            };
            self.line += 1;
            // Tolerate CRLF (a fixture edited or checked out on Windows).
            let text = self.buf.strip_suffix(b"\r").unwrap_or(&self.buf);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(parse_line(text, self.line, terminated));
        }
        None
    }
}

impl<R: BufRead, T: RecordType> FusedIterator for RecordingReader<R, T> {}

/// The events of the recording `r`, one item per non-blank line.
pub fn read_events<R: BufRead>(r: R) -> RecordingReader<R> {
    RecordingReader::new(r)
}

/// A recording file being read (gunzipped if it is gzipped).
pub type FileReader<T> = RecordingReader<BufReader<Box<dyn Read + Send>>, T>;

/// Open the recording at `path` for streaming.
pub fn open(path: impl AsRef<Path>) -> Result<FileReader<CaptureEvent>, RecordingError> {
    open_as(path)
}

/// Open a file of `T` records (the same line format) for streaming.
pub fn open_as<T: RecordType>(path: impl AsRef<Path>) -> Result<FileReader<T>, RecordingError> {
    let path = path.as_ref();
    let open_err = |source| RecordingError::Open {
        path: path.to_path_buf(),
        source,
    };
    let f = File::open(path).map_err(open_err)?;
    reader_as(Box::new(f)).map_err(open_err)
}

/// A reader of the records in `r` (gzipped or not): what [`open_as`] reads
/// a file with. Public for the fuzz targets (fuzz/), which feed it bytes
/// without a file.
#[doc(hidden)]
pub fn reader_as<T: RecordType>(r: Box<dyn Read + Send>) -> io::Result<FileReader<T>> {
    let mut f = BufReader::new(r);
    // gzip (RFC 1952 magic 1f 8b): committed fixtures and archived captures
    // are compressed (hex NDJSON shrinks ~30x).
    let gz = f.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let inner: Box<dyn Read + Send> = if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(RecordingReader::new(BufReader::with_capacity(
        256 * 1024,
        inner,
    )))
}

/// All events of the recording at `path`; the first bad line is an error.
pub fn read_file(path: impl AsRef<Path>) -> Result<Vec<CaptureEvent>, RecordingError> {
    open(path)?.collect()
}

/// Only the record version, read before the event: a line of a newer format
/// might otherwise parse as a wrong event. Other fields are skipped without
/// being stored.
#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    v: Option<u64>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// What a line of a file in this format holds.
pub trait RecordType: Sized {
    /// Parse one line whose `"type"` is `kind`.
    fn parse(kind: Option<&str>, text: &[u8]) -> serde_json::Result<Self>;
}

impl RecordType for CaptureEvent {
    fn parse(_: Option<&str>, text: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(text)
    }
}

fn parse_line<T: RecordType>(
    text: &[u8],
    line: u64,
    terminated: bool,
) -> Result<T, RecordingError> {
    let invalid = |e: serde_json::Error| {
        if !terminated && e.classify() == serde_json::error::Category::Eof {
            return RecordingError::Truncated { line };
        }
        // serde_json appends " at line 1 column N"; each line is parsed on
        // its own, so only the column means something here.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        RecordingError::Invalid {
            line,
            column: (e.column() != 0).then_some(e.column()),
            message,
        }
    };
    // serde also accepts a JSON array for a struct or a tagged enum; a
    // recording line is an object, and saying so beats a confusing message.
    match text.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) if text[i] == b'{' => {}
        i => {
            return Err(RecordingError::Invalid {
                line,
                column: Some(i.unwrap_or(0) + 1),
                message: "not a JSON object".into(),
            })
        }
    }
    let probe: VersionProbe = serde_json::from_slice(text).map_err(invalid)?;
    if let Some(version) = probe.v {
        if version != u64::from(SCHEMA_VERSION) {
            return Err(RecordingError::UnsupportedVersion { line, version });
        }
    }
    T::parse(probe.kind.as_deref(), text).map_err(invalid)
}

/// A bad hex string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    #[error("odd number of hex digits ({0})")]
    OddLength(usize),
    #[error("invalid hex digit {found:?} at offset {offset}")]
    BadDigit { offset: usize, found: char },
}

/// Bytes from hex (the inverse of [`super::hex`]); upper case is accepted
/// too, for hand-written fixtures.
pub fn unhex(s: &str) -> Result<Vec<u8>, HexError> {
    fn digit(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bad = |offset: usize| HexError::BadDigit {
        offset,
        // Every byte before `offset` is an ASCII digit, so it is a char
        // boundary.
        found: s[offset..].chars().next().unwrap_or('\u{FFFD}'),
    };
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 2);
    let mut pairs = b.chunks_exact(2);
    for (i, pair) in pairs.by_ref().enumerate() {
        let hi = digit(pair[0]).ok_or_else(|| bad(2 * i))?;
        let lo = digit(pair[1]).ok_or_else(|| bad(2 * i + 1))?;
        out.push(hi << 4 | lo);
    }
    if let [last] = pairs.remainder() {
        // A bad last digit says more than "odd length".
        digit(*last).ok_or_else(|| bad(b.len() - 1))?;
        return Err(HexError::OddLength(b.len()));
    }
    Ok(out)
}

/// Deserializes `Chunk::bytes` from hex.
pub(super) fn de_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a hex string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<u8>, E> {
            unhex(s).map_err(|e| E::custom(format_args!("chunk bytes: {e}")))
        }
    }
    d.deserialize_str(V)
}

/// Deserializes `Chunk::syscall` from its name.
pub(super) fn de_syscall<'de, D: Deserializer<'de>>(d: D) -> Result<Syscall, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Syscall;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a syscall name")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Syscall, E> {
            Syscall::from_name(s).ok_or_else(|| {
                let known: Vec<&str> = (1..)
                    .map_while(Syscall::from_u16)
                    .map(Syscall::name)
                    .collect();
                E::custom(format_args!(
                    "unknown syscall {s:?} (expected one of {})",
                    known.join(", ")
                ))
            })
        }
    }
    d.deserialize_str(V)
}

#[cfg(test)]
mod tests;
