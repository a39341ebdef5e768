//! `nri-trace record`: the flight recorder. The runtime traced live as
//! `watch` traces it, with no output: the decoded observations go to
//! bounded, rotated record-file segments in a directory
//! (`store::flight_recorder`), which `explain`, `report` and `replay` read when
//! no file is given.

use std::path::PathBuf;

use anyhow::{bail, Result};
use nri_trace::store::flight_recorder::FlightRecorderConfig;

use super::watch::{self, Show};
use crate::cli::{RecordArgs, WatchArgs};

/// Where the recorder writes when `--dir` is not given.
pub(crate) const DEFAULT_DIR: &str = "/var/lib/nri-trace/recorder";
/// Overrides [`DEFAULT_DIR`] for every command (a DaemonSet's hostPath
/// elsewhere, the tests).
pub(crate) const DIR_ENV: &str = "NRI_TRACE_RECORDER_DIR";
/// Below this a segment (an eighth) would hold a handful of calls.
const MIN_BYTES: u64 = 64 << 10;

/// The recorder's directory: `$NRI_TRACE_RECORDER_DIR`, else [`DEFAULT_DIR`].
pub(crate) fn default_dir() -> PathBuf {
    std::env::var_os(DIR_ENV).map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// The file a replay reads: `file`, else the recorder's directory when it
/// exists.
pub(crate) fn input(file: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(f) = file {
        return Ok(f);
    }
    let dir = default_dir();
    if dir.is_dir() {
        return Ok(dir);
    }
    bail!(
        "no file given, and no flight recorder directory {} (`nri-trace record` writes it; \
         ${DIR_ENV} names another): give the file `watch --save` wrote",
        dir.display()
    )
}

pub(crate) async fn run(a: RecordArgs) -> Result<()> {
    if a.max_size < MIN_BYTES {
        bail!(
            "--max-size {} bytes is below the recorder's minimum of 64KiB: give e.g. 256MiB",
            a.max_size
        );
    }
    let cfg = FlightRecorderConfig {
        dir: a.dir.clone().unwrap_or_else(default_dir),
        max_bytes: a.max_size,
        max_age: a.max_age,
    };
    let w = WatchArgs {
        output: None,
        filter: Default::default(),
        target: a.target,
        wait: a.wait,
        save: None,
        no_redact: a.no_redact,
        save_raw: None,
        duration: a.duration,
        metrics_addr: a.metrics_addr,
        otlp_endpoint: a.otlp_endpoint,
        decode: a.decode,
        export_dir: PathBuf::from("."),
        probe: a.probe,
    };
    watch::live(w, Show::FlightRecorder(cfg)).await
}
