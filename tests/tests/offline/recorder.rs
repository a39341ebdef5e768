//! The flight recorder (`nri-trace record`, store/flight_recorder.rs) on the
//! committed lab recordings (no root): under a load of observations with
//! a small bound the segments stay within it, the oldest go, each closed
//! segment is a whole record file (0600, in a 0700 directory), and the
//! rest replays; `explain` (with no file: the recorder's directory) reads
//! a pod whose calls span a restart of the recorder as it reads one file.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use nri_trace::{
    capture::CaptureEvent,
    engine::contract::ContractConfig,
    model::Observation,
    pipeline::{
        open_source,
        replay::{self, Collect},
        Pipeline,
    },
    store::ndjson,
    store::raw_capture,
    store::{
        flight_recorder::{self, FlightRecorder, FlightRecorderConfig},
        record_file::{RecordLine, RecordWriter, SessionInfo},
    },
};
use nri_trace_tests::SharedBuf;

const CRI: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
const NRI: &str = "/var/lib/nri-trace-lab/run/nri.sock";

fn session() -> SessionInfo {
    SessionInfo {
        tool: "nri-trace test".into(),
        runtime: Some("containerd".into()),
        runtime_pid: Some(1),
        cri_socket: CRI.into(),
        nri_socket: NRI.into(),
        started_unix_ns: 1,
        redacted: true,
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/trace")
        .join(name)
        .join("recording.ndjson.gz")
}

/// The observations a lab recording decodes to (what `watch --save`
/// writes of it, redacted).
fn observations_of(name: &str) -> Vec<Observation> {
    let events: Vec<CaptureEvent> = raw_capture::open(fixture(name))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let buf = SharedBuf::default();
    let info = session();
    let mut p = Pipeline::new(&info, ContractConfig::default());
    let w = RecordWriter::<Box<dyn std::io::Write>>::new(Box::new(buf.clone()), &info).unwrap();
    p.save_to("the record file".into(), w);
    replay::events(&events, p).unwrap();
    lines(&buf.bytes())
        .into_iter()
        .filter_map(|l| match l {
            RecordLine::Observation(o) => Some(o),
            _ => None,
        })
        .collect()
}

fn lines(bytes: &[u8]) -> Vec<RecordLine> {
    ndjson::LineReader::<_, RecordLine>::new(bytes)
        .map(|l| l.expect("a valid line"))
        .collect()
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn disk_bytes(dir: &Path) -> u64 {
    flight_recorder::segments(dir)
        .unwrap()
        .iter()
        .map(|s| std::fs::metadata(&s.path).unwrap().len())
        .sum()
}

#[test]
fn bounded_under_load_oldest_go_and_the_rest_replays() {
    let dir = fresh_dir("recorder-bounded");
    let max = 64 * 1024;
    let obs = observations_of("happy");
    let mut r = FlightRecorder::open(
        FlightRecorderConfig {
            dir: dir.clone(),
            max_bytes: max,
            max_age: None,
        },
        &session(),
    )
    .unwrap();
    // The happy run 20 times over: far more than the bound.
    let mut written = Vec::new();
    for round in 0..20 {
        for (i, o) in obs.iter().enumerate() {
            r.write(o).unwrap();
            written.push(o.clone());
            assert!(
                r.total_bytes() <= max,
                "{} bytes after write {i} of round {round}",
                r.total_bytes()
            );
            r.flush().unwrap();
            assert!(disk_bytes(&dir) <= max, "{} on disk", disk_bytes(&dir));
        }
    }
    let fed: u64 = written
        .iter()
        .map(|o| serde_json::to_vec(o).unwrap().len() as u64)
        .sum();
    r.finish().unwrap();
    let on_disk = disk_bytes(&dir);
    assert!(on_disk <= max, "{on_disk} bytes on disk, bound {max}");
    assert!(
        fed > 10 * max,
        "the load ({fed} bytes) is well over the bound"
    );

    let segs = flight_recorder::segments(&dir).unwrap();
    eprintln!(
        "{} observations ({fed} bytes) into a {max}-byte recorder: {} segments kept \
         ({on_disk} bytes), seq {}..={}",
        written.len(),
        segs.len(),
        segs[0].seq,
        segs.last().unwrap().seq
    );
    assert!(segs[0].seq > 0, "the oldest segments were deleted");
    assert!(
        segs.len() >= flight_recorder::SEGMENTS as usize - 2,
        "{segs:?}"
    );
    // Rotation: consecutive numbers, each a whole record file.
    for w in segs.windows(2) {
        assert_eq!(w[1].seq, w[0].seq + 1, "{segs:?}");
    }
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut kept = Vec::new();
    for s in &segs {
        let mode = std::fs::metadata(&s.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", s.path.display());
        let l = lines(&std::fs::read(&s.path).unwrap());
        assert!(
            matches!(l.first(), Some(RecordLine::Session(i)) if i.redacted),
            "{}",
            s.path.display()
        );
        assert!(
            matches!(l.last(), Some(RecordLine::SessionEnd(_))),
            "{} closed",
            s.path.display()
        );
        kept.extend(l.into_iter().filter_map(|l| match l {
            RecordLine::Observation(o) => Some(o),
            _ => None,
        }));
    }
    // What is kept is the newest stretch of what was written, in order.
    assert!(!kept.is_empty());
    assert_eq!(kept[..], written[written.len() - kept.len()..]);

    // The directory replays as one stream, every kept observation.
    let src = open_source(&dir).unwrap();
    let mut p = Pipeline::new(src.session(), ContractConfig::default());
    let (sink, got) = Collect::new();
    p.add_sink(Box::new(sink));
    let replayed = replay::run(src, p).unwrap();
    assert!(replayed.truncated.is_none());
    assert!(replayed.ended);
    assert_eq!(replayed.end.observations, kept.len() as u64);
    assert!(!got.borrow().records.is_empty());
}

#[test]
fn max_age_deletes_old_segments() {
    let dir = fresh_dir("recorder-age");
    let obs = observations_of("teardown-error");
    let cfg = FlightRecorderConfig {
        dir: dir.clone(),
        max_bytes: 64 * 1024,
        max_age: Some(std::time::Duration::from_hours(1)),
    };
    let mut r = FlightRecorder::open(cfg.clone(), &session()).unwrap();
    for o in &obs {
        r.write(o).unwrap();
    }
    r.finish().unwrap();
    let before = flight_recorder::segments(&dir).unwrap();
    assert!(!before.is_empty());
    // Written an hour and a minute ago: too old for the next run.
    let old = std::time::SystemTime::now()
        .checked_sub(std::time::Duration::from_mins(61))
        .unwrap();
    for s in &before {
        std::fs::File::options()
            .write(true)
            .open(&s.path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let r = FlightRecorder::open(cfg, &session()).unwrap();
    r.finish().unwrap();
    let after = flight_recorder::segments(&dir).unwrap();
    assert_eq!(after.len(), 1, "only the new run's segment: {after:?}");
    assert!(after[0].seq > before.last().unwrap().seq);
}

/// A pod whose RunPodSandbox the first recorder run saw, stopped before
/// its teardown, which the second run saw: `explain` with no file reads
/// the recorder's directory (both runs) and says what it says of one
/// file holding the whole run.
#[test]
fn explain_reads_a_pod_across_a_recorder_restart() {
    let dir = fresh_dir("recorder-restart");
    let obs = observations_of("teardown-error");
    let pod = "tderr-0";
    let split = obs
        .iter()
        .position(
            |o| matches!(o, Observation::CriCall(c) if c.method_name() == Some("StopPodSandbox")),
        )
        .expect("a StopPodSandbox");
    assert!(
        obs[..split].iter().any(
            |o| matches!(o, Observation::CriCall(c) if c.method_name() == Some("RunPodSandbox"))
        ),
        "the pod's RunPodSandbox is in run 1"
    );
    let cfg = FlightRecorderConfig {
        dir: dir.clone(),
        max_bytes: 256 << 20,
        max_age: None,
    };
    for part in [&obs[..split], &obs[split..]] {
        let mut p = Pipeline::new(&session(), ContractConfig::default());
        p.record_to(
            dir.display().to_string(),
            FlightRecorder::open(cfg.clone(), &session()).unwrap(),
        );
        replay::observations(part.iter().cloned(), p).unwrap();
    }
    assert_eq!(
        flight_recorder::segments(&dir).unwrap().len(),
        2,
        "one per run"
    );

    let whole = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recorder-restart-whole.ndjson");
    {
        let f = ndjson::create_private(&whole).unwrap();
        let mut w = RecordWriter::new(f, &session()).unwrap();
        for o in &obs {
            w.write(o).unwrap();
        }
        w.finish().unwrap();
    }
    let explain = |file: Option<&Path>| {
        let mut c = Command::new(nri_trace_tests::workspace_bin("nri-trace"));
        c.args(["explain", pod]);
        if let Some(f) = file {
            c.arg(f);
        }
        let o = c
            .args(["-o", "json", "--no-proc"])
            .env("NRI_TRACE_RECORDER_DIR", &dir)
            .output()
            .expect("running nri-trace explain");
        assert!(
            o.status.success(),
            "explain: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("explain -o json")
    };
    let from_recorder = explain(None);
    let from_dir = explain(Some(&dir));
    let from_file = explain(Some(&whole));
    assert_eq!(from_recorder, from_file);
    assert_eq!(from_dir, from_file);
    assert!(from_recorder["verdict"].is_string(), "{from_recorder}");
    eprintln!(
        "explain {pod} across the restart: {}",
        from_recorder["sentence"]
    );
    // Without a recorder directory, the file is asked for.
    let o = Command::new(nri_trace_tests::workspace_bin("nri-trace"))
        .args(["report"])
        .env("NRI_TRACE_RECORDER_DIR", dir.join("none"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nri-trace record"), "{err}");
}
