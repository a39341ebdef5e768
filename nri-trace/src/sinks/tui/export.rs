//! Export to NDJSON: the rows of the current view (after its filter), or
//! every record kept this session (the records `watch -o json` prints).
//! Files are created new, mode 0600: they name pods, containers and error
//! messages of the node.

use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
};

use serde::Serialize;
use serde_json::{json, Value};

use super::{
    app::{App, ExportScope, View},
    state::TuiState,
    views::{calls, findings, pods, timeline},
};
use crate::{sinks::json::RecordLine, store::ndjson::LineWriter};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("creating {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("no free file name for {0} in its directory")]
    NoName(PathBuf),
}

fn value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn tagged(view: &str, v: impl Serialize) -> Value {
    let mut v = value(v);
    if let Value::Object(m) = &mut v {
        m.insert("view".into(), Value::String(view.into()));
    }
    v
}

/// The rows of `app`'s current view, as shown (filter and sort applied).
pub(crate) fn screen_rows(app: &App, st: &TuiState) -> Vec<Value> {
    match app.view {
        View::Pods => pods::rows(app, st)
            .into_iter()
            .map(|p| tagged("pods", pods::export_row(st, p)))
            .collect(),
        View::Timeline => {
            let Some(pod) = app
                .timeline_key(st)
                .and_then(|k| timeline::find_pod(st, &k))
            else {
                return Vec::new();
            };
            let label = pod.label();
            pod.timeline
                .iter()
                .map(|e| {
                    let detail = e
                        .start
                        .and_then(|s| st.span(s.mono_ns, &e.method))
                        .map(|d| value(&d.hooks));
                    let mut v = tagged("timeline", e);
                    if let Value::Object(m) = &mut v {
                        m.insert("pod".into(), Value::String(label.clone()));
                        m.insert("hook_bars".into(), detail.unwrap_or(Value::Null));
                    }
                    v
                })
                .collect()
        }
        View::Plugins => st
            .hook_summaries()
            .iter()
            .map(|h| tagged("plugins", json!({"type": "hook_summary", "summary": h})))
            .chain(
                st.method_summaries()
                    .iter()
                    .map(|m| tagged("plugins", json!({"type": "method_summary", "summary": m}))),
            )
            .collect(),
        View::Findings => findings::rows(app, st)
            .into_iter()
            .map(|f| tagged("findings", f))
            .collect(),
        View::Calls => calls::rows(app, st)
            .into_iter()
            .map(|c| tagged("calls", c))
            .collect(),
    }
}

/// Every record kept this session, oldest first.
pub(crate) fn session_rows(st: &TuiState) -> Vec<Value> {
    st.session()
        .iter()
        .map(|r| value(RecordLine::of(r)))
        .collect()
}

/// Create `path`, new (never through a symlink or over a file), 0600.
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Write `rows` to a new file at `path`, one JSON object per line, each
/// with `"v"` first as every line nri-trace writes (docs/schema.md).
pub(crate) fn write_ndjson(path: &Path, rows: &[Value]) -> Result<(), ExportError> {
    let f = create_private(path).map_err(|source| ExportError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    let werr = |source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut w = LineWriter::new(f);
    for r in rows {
        w.write_record(r, false).map_err(werr)?;
    }
    let f = w.finish().map_err(werr)?;
    f.sync_all().map_err(werr)?;
    Ok(())
}

/// Export `scope` into a new file in `dir`, named after the view (or
/// "session") and the capture time; returns its path and the row count.
pub fn export(
    app: &App,
    st: &TuiState,
    scope: ExportScope,
    dir: &Path,
) -> Result<(PathBuf, usize), ExportError> {
    let (name, rows) = match scope {
        ExportScope::Screen => (app.view.title().to_lowercase(), screen_rows(app, st)),
        ExportScope::Session => ("session".to_string(), session_rows(st)),
    };
    let stem = format!("nri-trace-{name}-{}", st.now_ns());
    for i in 0..100 {
        let file = if i == 0 {
            format!("{stem}.ndjson")
        } else {
            format!("{stem}-{i}.ndjson")
        };
        let path = dir.join(file);
        match write_ndjson(&path, &rows) {
            Err(ExportError::Create { source, .. })
                if source.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
            Ok(()) => return Ok((path, rows.len())),
        }
    }
    Err(ExportError::NoName(dir.join(stem)))
}
