//! The flight recorder (`nri-trace record`): the last observations on
//! disk, bounded, in a directory of record-file segments.
//!
//! Each segment is a whole record file ([`RecordWriter`], the writer
//! `watch --save` uses: a `session` line, observations, a `session_end`
//! line once closed), created 0600 in a 0700 directory. Segments are named
//! by a sequence number that sorts ([`SEGMENT_PREFIX`]`00000042.ndjson`),
//! continued across runs, so the directory read in name order is one
//! stream in capture order (`pipeline::source` reads it so; the replay
//! loop carries on across a segment's `session` line).
//!
//! The bound: the segments together never hold more than `max_bytes`
//! (closed ones by their size, the open one by the bytes written to it,
//! buffered included), not even between two writes: each line is
//! serialized first, and the oldest segments are deleted to make room for
//! it (and for the `session_end` and `session` lines, when it fills its
//! segment) before it is written. A segment is closed once it reaches
//! `max_bytes / SEGMENTS`, so the bound keeps about the last
//! `(SEGMENTS - 1) / SEGMENTS` of it. With `max_age`, a closed segment
//! whose last write is older goes too (looked at when a segment closes and
//! at most every [`AGE_CHECK`] while idle).

use std::{
    collections::VecDeque,
    fs, io,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use super::{
    ndjson,
    record_file::{header_bytes_at_most, RecordWriter, SessionInfo},
};
use crate::model::observation::Observation;

/// Segment file names: this, the sequence number (8 digits or more), `.ndjson`.
pub const SEGMENT_PREFIX: &str = "segment-";
const SEGMENT_SUFFIX: &str = ".ndjson";
/// Segments per bound: a segment is closed at `max_bytes / SEGMENTS`.
pub const SEGMENTS: u64 = 8;
/// How often `max_age` is looked at while idle.
pub(crate) const AGE_CHECK: Duration = Duration::from_secs(1);

/// What the recorder keeps.
#[derive(Debug, Clone)]
pub struct FlightRecorderConfig {
    pub dir: PathBuf,
    /// The segments together hold at most this many bytes.
    pub max_bytes: u64,
    /// Closed segments last written longer ago than this are deleted.
    pub max_age: Option<Duration>,
}

/// One segment on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub path: PathBuf,
    pub seq: u64,
}

/// The sequence number of a segment's file name.
fn seq_of(name: &str) -> Option<u64> {
    name.strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?
        .parse()
        .ok()
}

/// The segments in `dir`, oldest first (other files are not the
/// recorder's and are left alone).
pub fn segments(dir: &Path) -> io::Result<Vec<Segment>> {
    let mut v: Vec<Segment> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let seq = seq_of(name.to_str()?)?;
            Some(Segment {
                path: e.path(),
                seq,
            })
        })
        .collect();
    v.sort_by_key(|s| s.seq);
    Ok(v)
}

/// A closed segment the recorder accounts for.
struct Closed {
    path: PathBuf,
    bytes: u64,
    last_write: SystemTime,
}

/// Writes observations to the recorder's directory (see the module doc).
pub struct FlightRecorder {
    cfg: FlightRecorderConfig,
    info: SessionInfo,
    segment_bytes: u64,
    closed: VecDeque<Closed>,
    closed_bytes: u64,
    open: Option<(PathBuf, RecordWriter<fs::File>)>,
    /// The most a segment change writes: a `session_end` line and the next
    /// segment's `session` line.
    change_bytes: u64,
    next_seq: u64,
    last_age_check: Instant,
}

impl FlightRecorder {
    /// Open the recorder's directory (made 0700 if missing), account for
    /// the segments an earlier run left (deleting what is over the bounds
    /// now), and start a segment with `info`'s session line.
    pub fn open(cfg: FlightRecorderConfig, info: &SessionInfo) -> io::Result<Self> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cfg.dir)?;
        // Made by someone else with wider rights: the segments hold the
        // node's calls.
        fs::set_permissions(&cfg.dir, fs::Permissions::from_mode(0o700))?;
        let mut closed = VecDeque::new();
        let mut closed_bytes = 0;
        let mut next_seq = 0;
        for s in segments(&cfg.dir)? {
            let m = fs::metadata(&s.path)?;
            closed_bytes += m.len();
            closed.push_back(Closed {
                path: s.path,
                bytes: m.len(),
                last_write: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
            next_seq = s.seq + 1;
        }
        let mut r = FlightRecorder {
            segment_bytes: (cfg.max_bytes / SEGMENTS).max(1),
            cfg,
            info: info.clone(),
            closed,
            closed_bytes,
            open: None,
            change_bytes: header_bytes_at_most(info)?,
            next_seq,
            last_age_check: Instant::now(),
        };
        r.expire_old(SystemTime::now())?;
        r.make_room(r.change_bytes)?;
        r.start_segment()?;
        Ok(r)
    }

    fn start_segment(&mut self) -> io::Result<()> {
        let path = self.cfg.dir.join(format!(
            "{SEGMENT_PREFIX}{:08}{SEGMENT_SUFFIX}",
            self.next_seq
        ));
        self.next_seq += 1;
        let f = ndjson::create_private(&path)?;
        let mut info = self.info.clone();
        info.started_unix_ns = unix_ns(SystemTime::now());
        let w = RecordWriter::new(f, &info)?;
        self.open = Some((path, w));
        Ok(())
    }

    /// Close the open segment (its `session_end` line) and account for it.
    fn close_segment(&mut self) -> io::Result<()> {
        if let Some((path, w)) = self.open.take() {
            let written = w.bytes();
            w.finish()?;
            let bytes = fs::metadata(&path).map_or(written, |m| m.len());
            self.closed_bytes += bytes;
            self.closed.push_back(Closed {
                path,
                bytes,
                last_write: SystemTime::now(),
            });
        }
        Ok(())
    }

    /// Bytes the open segment holds so far.
    fn open_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |(_, w)| w.bytes())
    }

    /// Every segment's bytes together (the bound's measure).
    pub fn total_bytes(&self) -> u64 {
        self.closed_bytes + self.open_bytes()
    }

    /// Delete the oldest closed segments until `incoming` more bytes fit
    /// in the bound (or none is left: a line longer than the whole bound
    /// is still written).
    fn make_room(&mut self, incoming: u64) -> io::Result<()> {
        while self.total_bytes() + incoming > self.cfg.max_bytes {
            let Some(old) = self.closed.pop_front() else {
                break;
            };
            self.delete(old)?;
        }
        Ok(())
    }

    fn delete(&mut self, old: Closed) -> io::Result<()> {
        self.closed_bytes -= old.bytes;
        match fs::remove_file(&old.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Delete the closed segments last written before `now - max_age`.
    fn expire_old(&mut self, now: SystemTime) -> io::Result<()> {
        self.last_age_check = Instant::now();
        let Some(max_age) = self.cfg.max_age else {
            return Ok(());
        };
        while let Some(old) = self.closed.front() {
            let age = now.duration_since(old.last_write).unwrap_or_default();
            if age <= max_age {
                break;
            }
            let old = self.closed.pop_front().expect("front exists");
            self.delete(old)?;
        }
        Ok(())
    }

    /// Append one observation (redacted already, as for `--save`), closing
    /// the segment when full and deleting the oldest to stay in bounds.
    pub fn write(&mut self, o: &Observation) -> io::Result<()> {
        if self.open.is_none() {
            self.make_room(self.change_bytes)?;
            self.start_segment()?;
        }
        let Some((_, w)) = self.open.as_mut() else {
            return Ok(());
        };
        let line = w.stage(o)?;
        let fills = self.open_bytes() + line >= self.segment_bytes;
        self.make_room(line + if fills { self.change_bytes } else { 0 })?;
        if let Some((_, w)) = self.open.as_mut() {
            w.write_staged(o)?;
        }
        if fills {
            self.close_segment()?;
            self.expire_old(SystemTime::now())?;
            self.start_segment()?;
        }
        Ok(())
    }

    /// Nothing more is queued for now: lines to disk, and old segments out.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some((_, w)) = self.open.as_mut() {
            w.flush()?;
        }
        if self.last_age_check.elapsed() >= AGE_CHECK {
            self.expire_old(SystemTime::now())?;
        }
        Ok(())
    }

    /// The run ended: the open segment gets its `session_end` line.
    pub fn finish(mut self) -> io::Result<()> {
        self.make_room(self.change_bytes)?;
        self.close_segment()
    }
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// "256MiB" -> (256.0, "MiB"): the number and the unit after it.
fn number_and_unit(s: &str) -> Result<(f64, &str), std::num::ParseFloatError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Ok((num.parse()?, unit))
}

/// A size as the command line gives it: `256MiB`, `64KiB`, `1GiB`,
/// `1000000` (bytes), also `MB`/`KB`/`GB` (powers of 1000).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = number_and_unit(s)
        .map_err(|e| format!("{s:?}: {e}; give a size, e.g. 256MiB, 64KiB or 1GiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => return Err(format!("{s:?}: unknown unit {u:?}; use KiB, MiB or GiB")),
    };
    let bytes = (n * mult as f64) as u64;
    if bytes == 0 {
        return Err(format!("{s:?}: the recorder needs more than 0 bytes"));
    }
    Ok(bytes)
}

/// A duration as the command line gives it: `90s`, `30m`, `12h`, `2d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = number_and_unit(s)
        .map_err(|e| format!("{s:?}: {e}; give a duration, e.g. 90s, 30m, 12h or 2d"))?;
    let secs = match unit.trim() {
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        u => return Err(format!("{s:?}: unknown unit {u:?}; use s, m, h or d")),
    };
    Duration::try_from_secs_f64(n * secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_mins(30)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_hours(48)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn segment_names_sort_and_others_are_ignored() {
        assert_eq!(seq_of("segment-00000042.ndjson"), Some(42));
        assert_eq!(seq_of("segment-123456789.ndjson"), Some(123_456_789));
        assert_eq!(seq_of("notes.txt"), None);
        assert_eq!(seq_of("segment-x.ndjson"), None);
    }
}
