//! Export of the TUI to NDJSON from a replayed lab recording: the rows of
//! the view as shown, the session's records, new files only, mode 0600.

use std::{fs, os::unix::fs::PermissionsExt, path::PathBuf};

use nri_trace::{
    sinks::tui::{export, replay_state, App, ExportScope, View},
    store::raw_capture,
};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "nri-trace-tui-export-{}-{name}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("temp dir");
    d
}

fn lines(p: &std::path::Path) -> Vec<serde_json::Value> {
    fs::read_to_string(p)
        .expect("export file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn exports_view_rows_and_session_records_privately() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/trace/teardown-error/recording.ndjson.gz");
    let evs = raw_capture::read_file(p).expect("recording fixture");
    let st = replay_state(&evs);
    let out = dir("a");
    let mut app = App::new();

    let (path, n) = export(&app, &st, ExportScope::Screen, &out).expect("export pods");
    assert_eq!(n, st.pods().len());
    let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let rows = lines(&path);
    assert_eq!(rows.len(), n);
    assert!(rows.iter().all(|r| r["view"] == "pods"));
    assert!(
        rows.iter().any(|r| r["pod"] == "nri-trace/tderr-0"),
        "{rows:?}"
    );

    // The same export again gets a new file, never the old one.
    let (again, _) = export(&app, &st, ExportScope::Screen, &out).expect("export again");
    assert_ne!(again, path);

    app.show(View::Findings);
    let (path, n) = export(&app, &st, ExportScope::Screen, &out).expect("export findings");
    assert_eq!(n, 2);
    let rows = lines(&path);
    assert!(rows
        .iter()
        .all(|r| r["rule"] == "teardown-hook-failed" && r["view"] == "findings"));
    assert!(rows
        .iter()
        .all(|r| r["evidence"].as_array().is_some_and(|e| !e.is_empty())));

    let (path, n) = export(&app, &st, ExportScope::Session, &out).expect("export session");
    assert_eq!(n as u64, st.counts().records);
    let rows = lines(&path);
    assert!(rows.iter().any(|r| r["type"] == "cri_span"));
    // The lines of `-o json`: the schema's version on every one.
    assert!(rows.iter().all(|r| r["v"] == 1), "{:?}", rows.first());
    assert_eq!(rows.iter().filter(|r| r["type"] == "violation").count(), 2);

    // A symlink planted where the next file would go is not followed.
    let out2 = dir("b");
    let target = out2.join("target");
    fs::write(&target, "keep").expect("target");
    let name = format!("nri-trace-findings-{}.ndjson", st.now_ns());
    std::os::unix::fs::symlink(&target, out2.join(&name)).expect("symlink");
    let (path, _) = export(&app, &st, ExportScope::Screen, &out2).expect("export past the link");
    assert_ne!(path, out2.join(&name));
    assert_eq!(fs::read_to_string(&target).expect("target"), "keep");
    let _ = fs::remove_dir_all(out);
    let _ = fs::remove_dir_all(out2);
}
