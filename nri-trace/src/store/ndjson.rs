//! The line format of every file and stream nri-trace writes as JSON
//! (docs/schema.md): NDJSON, one object per line, `"v"` (the schema
//! version, [`SCHEMA_VERSION`]) first and a `"type"`. [`LineWriter`]
//! writes any such line; [`LineReader`] reads lines of one [`LineType`]
//! (a raw capture's `CaptureEvent`s, `store::raw_capture`; a record
//! file's `RecordLine`s, `store::record_file`), gunzipping a gzipped file.
//!
//! There is no header line in the format itself: every line stands on its
//! own, so a file can be cut, concatenated or filtered with line tools,
//! and a capture killed mid-write loses at most its last line.
//!
//! A file is untrusted input (fixtures come from anywhere): lines are
//! capped in size ([`DEFAULT_MAX_LINE_BYTES`]), and a bad line is an error
//! naming its line number, never a panic. The reader keeps going after a
//! bad line, so a caller may choose to skip it.

use std::{
    fs::File,
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    iter::FusedIterator,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::capture::CaptureEvent;

/// Version of the records this build writes, and the newest it reads. Every
/// line carries it as `"v"`; lines without `"v"` (hand-written fixtures) are
/// read as this version.
pub const SCHEMA_VERSION: u32 = 1;

/// Default cap on one line of a file. The largest line a capture writes
/// is a chunk of `MAX_SNAP` (4 MiB) bytes, 8 MiB as hex; the cap leaves room
/// for that and for long peer command lines while bounding what a corrupt or
/// hostile file can make us buffer. Parsing may hold a few times the line
/// size (serde buffers internally tagged objects before decoding them).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Line buffers bigger than this are released after use rather than kept for
/// the next line: a legitimate line stays below it (see
/// [`DEFAULT_MAX_LINE_BYTES`]), so only oversized input pays for regrowing.
const RETAINED_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// What went wrong reading (or opening) a file of lines. Every error about the
/// content names its 1-based line number; blank lines count.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    /// Reading failed; the reader stops after this error.
    #[error("line {line}: read error: {source}")]
    Io { line: u64, source: io::Error },
    /// The line is longer than the reader's cap; it was skipped unread.
    #[error("line {line}: longer than {max} bytes, skipped")]
    LineTooLong { line: u64, max: usize },
    /// The last line has no newline and ends inside a JSON value: the
    /// file was cut short (typically a capture killed mid-write).
    #[error("line {line}: the file ends in the middle of a line (cut short?)")]
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

impl LineError {
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

/// Create a file readable by its owner only (0600): a raw capture
/// holds everything the runtime read and wrote, container
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

/// Writes lines: a [`CaptureEvent`] stream (a raw capture) or records of
/// any other [`Serialize`] type, one line each.
///
/// Output is buffered. Events other than chunks (opens, closes, process
/// events, loss reports) are rare and mark points worth having on disk, so
/// they flush; chunks do not, so a busy connection costs few write syscalls.
/// A caller that may go idle after a chunk should call [`flush`] then (as
/// `nri-trace debug capture` does when its event queue is empty). Dropping the
/// writer flushes but loses the error; [`finish`] reports it.
///
/// [`flush`]: LineWriter::flush
/// [`finish`]: LineWriter::finish
pub struct LineWriter<W: Write> {
    out: BufWriter<W>,
    /// Reused line buffer: an event is serialized whole before any byte of it
    /// is written, so an event that cannot be serialized leaves no partial
    /// line behind to corrupt the next one.
    line: Vec<u8>,
    /// Bytes of the lines written so far (buffered ones included): the
    /// file's size once flushed (the flight recorder's bound).
    bytes: u64,
}

impl<W: Write> LineWriter<W> {
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

/// Serialize `ev` into `line` (cleared first) as `{"v":N,"type":...}\n`.
pub(super) fn encode_line<T: Serialize>(line: &mut Vec<u8>, ev: &T) -> io::Result<()> {
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

/// Iterator over the lines of a file, each parsed as a `T`.
///
/// Yields one item per non-blank line: the event, or an error naming the
/// line. After a content error it goes on with the next line; after a read
/// error it ends.
pub struct LineReader<R, T = CaptureEvent> {
    inner: R,
    kind: std::marker::PhantomData<fn() -> T>,
    /// 1-based number of the line last read; 0 before the first.
    line: u64,
    buf: Vec<u8>,
    max_line: usize,
    done: bool,
}

/// One physical line, as read into `LineReader::buf`.
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

impl<R: BufRead, T: LineType> LineReader<R, T> {
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
    /// longer lines give [`LineError::LineTooLong`] and are skipped.
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

impl<R: BufRead, T: LineType> Iterator for LineReader<R, T> {
    type Item = Result<T, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let raw = match self.read_raw_line() {
                Ok(raw) => raw,
                Err(source) => {
                    // Retrying a failed read could fail forever; stop.
                    self.done = true;
                    return Some(Err(LineError::Io {
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
                    return Some(Err(LineError::LineTooLong {
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

impl<R: BufRead, T: LineType> FusedIterator for LineReader<R, T> {}

/// A file being read (gunzipped if it is gzipped).
pub(crate) type FileReader<T> = LineReader<BufReader<Box<dyn Read + Send>>, T>;

/// Open a file of `T` records (the same line format) for streaming.
pub(crate) fn open_as<T: LineType>(path: impl AsRef<Path>) -> Result<FileReader<T>, LineError> {
    let path = path.as_ref();
    let open_err = |source| LineError::Open {
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
pub fn reader_as<T: LineType>(r: Box<dyn Read + Send>) -> io::Result<FileReader<T>> {
    let mut f = BufReader::new(r);
    // gzip (RFC 1952 magic 1f 8b): committed fixtures and archived captures
    // are compressed (hex NDJSON shrinks ~30x).
    let gz = f.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let inner: Box<dyn Read + Send> = if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(LineReader::new(BufReader::with_capacity(256 * 1024, inner)))
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
pub trait LineType: Sized {
    /// Parse one line whose `"type"` is `kind`.
    fn parse(kind: Option<&str>, text: &[u8]) -> serde_json::Result<Self>;
}

fn parse_line<T: LineType>(text: &[u8], line: u64, terminated: bool) -> Result<T, LineError> {
    let invalid = |e: serde_json::Error| {
        if !terminated && e.classify() == serde_json::error::Category::Eof {
            return LineError::Truncated { line };
        }
        // serde_json appends " at line 1 column N"; each line is parsed on
        // its own, so only the column means something here.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        LineError::Invalid {
            line,
            column: (e.column() != 0).then_some(e.column()),
            message,
        }
    };
    // serde also accepts a JSON array for a struct or a tagged enum; a
    // line is an object, and saying so beats a confusing message.
    match text.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) if text[i] == b'{' => {}
        i => {
            return Err(LineError::Invalid {
                line,
                column: Some(i.unwrap_or(0) + 1),
                message: "not a JSON object".into(),
            })
        }
    }
    let probe: VersionProbe = serde_json::from_slice(text).map_err(invalid)?;
    if let Some(version) = probe.v {
        if version != u64::from(SCHEMA_VERSION) {
            return Err(LineError::UnsupportedVersion { line, version });
        }
    }
    T::parse(probe.kind.as_deref(), text).map_err(invalid)
}

#[cfg(test)]
mod tests;
