//! The raw capture (`watch --save-raw FILE`, `debug capture -o json`):
//! the [`CaptureEvent`] stream as NDJSON lines (docs/capture.md), one event
//! per line, chunk bytes as hex and syscalls by name (`capture`'s
//! `event_json`). Reading a raw capture gives back exactly the events
//! that were written, so decoders and the engine behave the same live or
//! replayed, and real captures are committed as test fixtures.

use std::{
    io::{self, BufRead, Write},
    path::Path,
};

use super::ndjson::{encode_line, open_as, FileReader, LineError, LineReader, LineType};
use crate::capture::CaptureEvent;

/// Write one event as one raw-capture line (with its newline) to `w`, in a
/// single `write_all`. This is `nri-trace debug capture -o json`'s output.
pub fn write_event(w: &mut impl Write, ev: &CaptureEvent) -> io::Result<()> {
    let mut line = Vec::new();
    encode_line(&mut line, ev)?;
    w.write_all(&line)
}

/// The events of the raw capture `r`, one item per non-blank line.
pub fn read_events<R: BufRead>(r: R) -> LineReader<R> {
    LineReader::new(r)
}

/// Open the raw capture at `path` for streaming.
pub fn open(path: impl AsRef<Path>) -> Result<FileReader<CaptureEvent>, LineError> {
    open_as(path)
}

/// All events of the raw capture at `path`; the first bad line is an error.
pub fn read_file(path: impl AsRef<Path>) -> Result<Vec<CaptureEvent>, LineError> {
    open(path)?.collect()
}

impl LineType for CaptureEvent {
    fn parse(_: Option<&str>, text: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(text)
    }
}
