//! The files nri-trace writes and reads back, all NDJSON in one line
//! format (docs/schema.md):
//!
//! - [`ndjson`]: the line format itself: `"v"` first, a `"type"`, a size
//!   cap, errors that name their line, gzip read transparently.
//! - [`raw_capture`]: capture's [`CaptureEvent`](crate::capture::CaptureEvent)
//!   stream (`watch --save-raw`, `debug capture -o json`): every byte the
//!   runtime read and wrote.
//! - [`record_file`]: the model's observations with a `session` line
//!   first (`watch --save`): what `replay`, `report` and `explain` read;
//!   and their redaction.
//! - [`flight_recorder`]: `nri-trace record`: record-file segments in a
//!   directory, rotated and bounded in size and age.
//!
//! This stage sits after the model (it writes its observations) and
//! before the pipeline, which reads and writes these files; the sinks
//! write their JSON lines with [`ndjson::LineWriter`].

pub mod flight_recorder;
pub mod ndjson;
pub mod raw_capture;
pub mod record_file;
