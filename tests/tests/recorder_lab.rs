//! The flight recorder (`nri-trace record`, docs/recorder.md) as real
//! processes on the lab (issue 20: "bounded size under the load scenario,
//! rotation, explain on a pod from before a restart of nri-trace").
//!
//! - `recorder_bounded_under_load`: `nri-trace record --max-size 256KiB`
//!   on the lab's sockets while the `load` scenario runs (100 pod
//!   lifecycles through 3 plugins); the directory is sampled every 50 ms:
//!   never over the bound, segments rotate (numbers seen early are gone
//!   later), every segment 0600 in a 0700 directory; at the end the kept
//!   segments are consecutive whole record files holding the run's last
//!   call and not its first.
//! - `recorder_explains_a_pod_across_its_restart`: a pod made while
//!   recorder run 1 runs and torn down while run 2 (same directory) runs;
//!   `nri-trace explain POD -o json` with no file reads the recorder and
//!   explains it from both runs.
//!
//! Needs root, the eBPF object, the lab and its binaries (mandatory under
//! CI=true; elsewhere skipped with the reason).

mod lab_trace;
mod output_check;
mod record_schema;

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use lab_trace::{bin, driver, guard, LabUp};
use nri_trace::store::flight_recorder::SEGMENT_PREFIX;
use nri_trace_lab::{
    labctl::{self, Lab},
    scenario::{self, Bins, Observer},
    truth::{self, Truth},
};
use serde_json::Value;

/// The bound of the load test: 8 segments of 32 KiB (an eighth each,
/// store/flight_recorder.rs `SEGMENTS`); `load` writes several times that.
const MAX_SIZE: &str = "256KiB";
const MAX_BYTES: u64 = 256 << 10;
/// How often the directory is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

fn out_dir(name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("recorder-lab")
        .join(name);
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).unwrap();
    out
}

// ------------------------------------------------ the recorder process

/// A running `nri-trace record` on the lab's sockets.
struct RecorderProc {
    child: Option<Child>,
    stderr: PathBuf,
}

impl RecorderProc {
    /// Start `nri-trace record --dir DIR ARGS` on the lab's CRI and NRI
    /// sockets (given, so that it traces the lab whatever else runs here)
    /// and wait until it says it records (after `ready`: the probes are
    /// attached and the directory open).
    fn start(lab: &Lab, dir: &Path, args: &[&str], stderr: &Path) -> Result<Self> {
        let child = Command::new(bin("nri-trace"))
            .arg("record")
            .arg("--dir")
            .arg(dir)
            .args(args)
            .arg("--cri-socket")
            .arg(lab.cri_socket())
            .arg("--nri-socket")
            .arg(lab.nri_socket())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(stderr)?)
            .spawn()
            .context("starting nri-trace record")?;
        let mut r = Self {
            child: Some(child),
            stderr: stderr.to_path_buf(),
        };
        nri_trace_tests::wait_for_lines(
            r.child.as_mut().expect("started"),
            stderr,
            &["nri-trace: ready", "nri-trace: recording to"],
            Duration::from_secs(30),
            "nri-trace record",
        )?;
        Ok(r)
    }

    /// Stop it as a user at its terminal would (SIGINT, Ctrl-C); it must
    /// exit successfully (its open segment closed with `session_end`).
    fn stop(&mut self) -> Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        // Let the last calls drain (the drain timer is 2 ms).
        std::thread::sleep(Duration::from_millis(300));
        let st = nri_trace_tests::stop_child(
            &mut c,
            libc::SIGINT,
            Duration::from_secs(20),
            "nri-trace record",
        )?;
        let log = fs::read_to_string(&self.stderr).unwrap_or_default();
        if !st.success() {
            bail!("nri-trace record exited with {st}:\n{log}");
        }
        Ok(())
    }
}

impl Drop for RecorderProc {
    /// A test that failed midway leaves no recorder behind.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ------------------------------------------------ the directory sampled

/// One segment as seen on disk.
#[derive(Debug, Clone)]
struct SegmentSeen {
    seq: u64,
    bytes: u64,
    mode: u32,
}

/// The recorder's directory at one moment.
#[derive(Debug, Clone, Default)]
struct DirSample {
    dir_mode: u32,
    /// Oldest first.
    segments: Vec<SegmentSeen>,
    /// Entries that are not segments.
    others: Vec<String>,
}

impl DirSample {
    fn total(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }
}

fn seq_of(name: &str) -> Option<u64> {
    name.strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(".ndjson")?
        .parse()
        .ok()
}

/// The directory now, `None` when it does not exist (yet). The segments
/// are measured newest first: only the newest can grow (the others are
/// closed, and only ever deleted), so the sum is at most what the
/// directory held when the newest was measured: a sum over the bound is
/// a moment the directory really was over it.
fn sample_dir(dir: &Path) -> Option<DirSample> {
    let dir_mode = fs::metadata(dir).ok()?.permissions().mode() & 0o7777;
    let mut names: Vec<(u64, PathBuf)> = vec![];
    let mut others = vec![];
    for e in fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        match seq_of(&name) {
            Some(seq) => names.push((seq, e.path())),
            None => others.push(name),
        }
    }
    names.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    let mut segments: Vec<SegmentSeen> = names
        .into_iter()
        .filter_map(|(seq, path)| {
            // Deleted since the listing: no longer there.
            let m = fs::metadata(&path).ok()?;
            Some(SegmentSeen {
                seq,
                bytes: m.len(),
                mode: m.permissions().mode() & 0o7777,
            })
        })
        .collect();
    segments.reverse();
    Some(DirSample {
        dir_mode,
        segments,
        others,
    })
}

/// What the sampling saw over a run.
#[derive(Debug, Default)]
struct Sampled {
    samples: usize,
    /// The largest total, and the sample it was in.
    peak: DirSample,
    max_segments: usize,
    /// Every segment number seen.
    seqs: BTreeSet<u64>,
    /// The largest size each segment was seen at (seq, bytes).
    largest: std::collections::BTreeMap<u64, u64>,
    /// A segment or the directory with other rights than 0600 / 0700,
    /// another file: what and when (sample number).
    wrong: Vec<String>,
}

impl Sampled {
    fn add(&mut self, s: DirSample) {
        self.samples += 1;
        if s.dir_mode != 0o700 {
            self.wrong.push(format!(
                "sample {}: directory {:o}",
                self.samples, s.dir_mode
            ));
        }
        for seg in &s.segments {
            if seg.mode != 0o600 {
                self.wrong.push(format!(
                    "sample {}: segment {} {:o}",
                    self.samples, seg.seq, seg.mode
                ));
            }
            self.seqs.insert(seg.seq);
            let l = self.largest.entry(seg.seq).or_default();
            *l = (*l).max(seg.bytes);
        }
        if !s.others.is_empty() {
            self.wrong.push(format!(
                "sample {}: other files {:?}",
                self.samples, s.others
            ));
        }
        self.max_segments = self.max_segments.max(s.segments.len());
        if s.total() > self.peak.total() {
            self.peak = s;
        }
    }
}

/// Samples a directory every [`SAMPLE_EVERY`] until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Sampled>,
}

impl Sampler {
    fn start(dir: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut seen = Sampled::default();
            while !stopped.load(Ordering::Relaxed) {
                if let Some(s) = sample_dir(&dir) {
                    seen.add(s);
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            seen
        });
        Self { stop, thread }
    }

    fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread")
    }
}

/// `nri-trace record` with a sampler of its directory, attached to a lab
/// scenario (started once the runtime is up, stopped with SIGINT after
/// the scenario's last call, before the runtime goes down).
struct SampledRecorder {
    dir: PathBuf,
    proc: Option<RecorderProc>,
    sampler: Option<Sampler>,
    /// What the sampler saw, for the test once the scenario ran.
    result: Arc<Mutex<Option<Sampled>>>,
}

impl Observer for SampledRecorder {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        let stderr = out.join("recorder.stderr");
        self.proc = Some(RecorderProc::start(
            lab,
            &self.dir,
            &["--max-size", MAX_SIZE],
            &stderr,
        )?);
        self.sampler = Some(Sampler::start(self.dir.clone()));
        Ok(())
    }

    fn detach(&mut self) -> Result<()> {
        let stopped = self.proc.as_mut().map_or(Ok(()), RecorderProc::stop);
        if let Some(s) = self.sampler.take() {
            let mut seen = s.finish();
            // The directory as the stopped recorder left it, too.
            if let Some(last) = sample_dir(&self.dir) {
                seen.add(last);
            }
            *self.result.lock().unwrap() = Some(seen);
        }
        stopped
    }
}

// ------------------------------------------------ the segments' contents

/// The JSON lines of a segment.
fn lines_of(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// The segments in `dir`, oldest first: (seq, path).
fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    nri_trace::store::flight_recorder::segments(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .into_iter()
        .map(|s| (s.seq, s.path))
        .collect()
}

/// The `cri_call` lines of these segments.
fn cri_calls(segs: &[PathBuf]) -> Vec<Value> {
    segs.iter()
        .flat_map(|p| lines_of(p))
        .filter(|v| v["type"] == "cri_call")
        .collect()
}

// ------------------------------------------------ the tests

/// Issue 20: bounded size under the load scenario, and rotation, with the
/// real `nri-trace record` process.
#[test]
fn recorder_bounded_under_load() {
    let test = "recorder_bounded_under_load";
    if !guard(test) {
        return;
    }
    let _lock = labctl::lock().expect("lab lock");
    let lab = Lab::from_env();
    lab.install().expect("lab install");
    let out = out_dir("load");
    let dir = out.join("recorder");
    let result = Arc::new(Mutex::new(None));
    let observer = SampledRecorder {
        dir: dir.clone(),
        proc: None,
        sampler: None,
        result: Arc::clone(&result),
    };
    let bins = Bins {
        driver: bin("cri-driver"),
        plugin: bin("nri-test-plugin"),
    };
    scenario::run_observed("load", lab, bins, &out, Some(Box::new(observer)))
        .unwrap_or_else(|e| panic!("scenario load with nri-trace record: {e:#}"));
    let seen = result
        .lock()
        .unwrap()
        .take()
        .expect("the recorder was attached and detached");

    let kept = segments(&dir);
    let made = kept.last().expect("segments kept").0 + 1;
    let written: u64 = seen.largest.values().sum();
    eprintln!(
        "{test}: --max-size {MAX_SIZE}: {} samples every {SAMPLE_EVERY:?}; peak {} bytes in {} \
         segments ({:?}); at most {} segments at once; {made} segments made, {} seen, about {} \
         bytes written in all; {} kept at the end (numbers {}..={}, {} bytes)",
        seen.samples,
        seen.peak.total(),
        seen.peak.segments.len(),
        seen.peak
            .segments
            .iter()
            .map(|s| (s.seq, s.bytes))
            .collect::<Vec<_>>(),
        seen.max_segments,
        seen.seqs.len(),
        written,
        kept.len(),
        kept[0].0,
        made - 1,
        sample_dir(&dir).map_or(0, |s| s.total()),
    );

    // The bound, at every moment looked at.
    assert!(
        seen.peak.total() <= MAX_BYTES,
        "over --max-size {MAX_SIZE}: {:?}",
        seen.peak
    );
    // 0600 segments, a 0700 directory, nothing else in it.
    assert!(seen.wrong.is_empty(), "{:?}", seen.wrong);
    // Rotation: segments seen while the run went on were deleted, newer
    // ones kept; far more was written than the bound holds.
    let first_kept = kept[0].0;
    let gone = seen.seqs.range(..first_kept).count();
    assert!(
        gone > 0,
        "no segment seen during the run was deleted: {:?}",
        seen.seqs
    );
    assert!(
        written > 2 * MAX_BYTES,
        "load wrote {written} bytes: not several times the bound"
    );
    // Kept: consecutive, each a whole record file (the recorder stopped
    // cleanly: every one closed), and the total within the bound.
    let seqs: Vec<u64> = kept.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        seqs,
        (first_kept..made).collect::<Vec<_>>(),
        "kept segments not consecutive"
    );
    for (seq, path) in &kept {
        let lines = lines_of(path);
        assert_eq!(lines.first().map(|l| &l["type"]), Some(&"session".into()));
        assert_eq!(
            lines.last().map(|l| &l["type"]),
            Some(&"session_end".into()),
            "segment {seq} not closed"
        );
    }
    // What is kept is the newest stretch: the run's last RemovePodSandbox
    // (the driver's truth) is in it, its first RunPodSandbox is not.
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let cri = |m: &str| -> Vec<(u64, truth::PodRef)> {
        truth
            .iter()
            .filter_map(|t| match t {
                Truth::Cri {
                    method,
                    pod: Some(p),
                    end_mono_ns,
                    ..
                } if method == m => Some((*end_mono_ns, p.clone())),
                _ => None,
            })
            .collect()
    };
    let last_remove = cri("RemovePodSandbox")
        .into_iter()
        .max_by_key(|(end, _)| *end)
        .expect("a RemovePodSandbox in the truth")
        .1;
    let first_run = cri("RunPodSandbox")
        .into_iter()
        .min_by_key(|(end, _)| *end)
        .expect("a RunPodSandbox in the truth")
        .1;
    let calls = cri_calls(&kept.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>());
    let last_id = last_remove.sandbox_id.clone().expect("its sandbox id");
    assert!(
        calls
            .iter()
            .any(|c| c["method"] == "RemovePodSandbox" && c["sandbox_id"] == last_id.as_str()),
        "the last RemovePodSandbox ({}) is not kept",
        last_remove.name
    );
    assert!(
        !calls
            .iter()
            .any(|c| c["method"] == "RunPodSandbox" && c["pod"]["name"] == first_run.name.as_str()),
        "the first RunPodSandbox ({}) is still kept",
        first_run.name
    );
    // The directory reads as one record file.
    let report = Command::new(bin("nri-trace"))
        .args(["replay", "-o", "json"])
        .env("NRI_TRACE_RECORDER_DIR", &dir)
        .output()
        .expect("running nri-trace replay");
    assert!(
        report.status.success(),
        "replay of the recorder: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    record_schema::validate_lines(
        &record_schema::validator(),
        "replay of the recorder -o json",
        &report.stdout,
    );
    eprintln!(
        "{test}: the last RemovePodSandbox ({}) kept, the first RunPodSandbox ({}) gone; \
         {} CRI calls kept",
        last_remove.name,
        first_run.name,
        calls.len()
    );
}

/// Issue 20: explain on a pod from before a restart of nri-trace. Pod P
/// is made while recorder run 1 runs; run 1 is stopped (SIGINT) and run 2
/// started on the same directory; P is torn down; run 2 is stopped. Then
/// `nri-trace explain nri-trace/P -o json`, with no file, reads the
/// recorder and explains P: made in run 1's segments, torn down in run
/// 2's, gone.
#[test]
fn recorder_explains_a_pod_across_its_restart() {
    let test = "recorder_explains_a_pod_across_its_restart";
    if !guard(test) {
        return;
    }
    let _lock = labctl::lock().expect("lab lock");
    let lab = Lab::from_env();
    lab.install().expect("lab install");
    let out = out_dir("restart");
    let dir = out.join("recorder");
    let truth = out.join("truth.ndjson");
    let pod = "rec-restart";
    lab.clear_plugins().expect("clearing pre-launched plugins");
    lab.up("2s").expect("lab up");
    let up = LabUp(lab.clone());

    let mut run1 = RecorderProc::start(&lab, &dir, &[], &out.join("run1.stderr")).unwrap();
    let made = driver(&lab, &truth, &["up", "--name", pod]);
    let sandbox_id = made["sandbox_id"].as_str().expect("sandbox id").to_string();
    let uid = made["pod"]["uid"].as_str().expect("pod uid").to_string();
    let container_id = made["container_id"]
        .as_str()
        .expect("container id")
        .to_string();
    run1.stop().unwrap();
    let run1_segments: Vec<PathBuf> = segments(&dir).into_iter().map(|(_, p)| p).collect();

    let mut run2 = RecorderProc::start(&lab, &dir, &[], &out.join("run2.stderr")).unwrap();
    driver(&lab, &truth, &["down", "--sandbox-id", &sandbox_id]);
    run2.stop().unwrap();
    drop(up);
    let run2_segments: Vec<PathBuf> = segments(&dir)
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| !run1_segments.contains(p))
        .collect();
    assert!(!run2_segments.is_empty(), "run 2 wrote no segment");
    assert!(
        run1_segments.iter().all(|p| p.exists()),
        "run 2 deleted run 1's segments"
    );

    // What each run recorded of P: its making in run 1, its teardown in
    // run 2.
    let run1_calls = cri_calls(&run1_segments);
    let run2_calls = cri_calls(&run2_segments);
    let methods = |calls: &[Value]| -> Vec<String> {
        calls
            .iter()
            .filter(|c| {
                c["sandbox_id"] == sandbox_id.as_str()
                    || c["pod"]["uid"] == uid.as_str()
                    || c["container_id"] == container_id.as_str()
            })
            .filter_map(|c| c["method"].as_str().map(String::from))
            .collect()
    };
    let (m1, m2) = (methods(&run1_calls), methods(&run2_calls));
    eprintln!("{test}: run 1 saw {m1:?} of {pod}; run 2 saw {m2:?}");
    assert!(m1.iter().any(|m| m == "RunPodSandbox"), "run 1: {m1:?}");
    assert!(!m1.iter().any(|m| m == "StopPodSandbox"), "run 1: {m1:?}");
    assert!(!m2.iter().any(|m| m == "RunPodSandbox"), "run 2: {m2:?}");
    assert!(m2.iter().any(|m| m == "RemovePodSandbox"), "run 2: {m2:?}");
    let run2_start = lines_of(&run2_segments[0])[0]["started_unix_ns"]
        .as_u64()
        .expect("run 2's session start");

    // explain with no file: the recorder's directory, both runs.
    let o = Command::new(bin("nri-trace"))
        .args(["explain", &format!("nri-trace/{pod}"), "-o", "json"])
        .env("NRI_TRACE_RECORDER_DIR", &dir)
        .output()
        .expect("running nri-trace explain");
    assert!(
        o.status.success(),
        "explain: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    record_schema::validate_lines(&record_schema::validator(), "explain -o json", &o.stdout);
    let v: Value = serde_json::from_slice(&o.stdout).expect("explain -o json: one JSON line");
    eprintln!(
        "{test}: explain: {} (uid {}, {} steps)",
        v["sentence"],
        v["uid"],
        v["steps"].as_array().map_or(0, Vec::len)
    );
    assert_eq!(v["type"], "explanation", "{v}");
    assert_eq!(v["pod"], format!("nri-trace/{pod}"), "{v}");
    assert_eq!(v["sandbox_id"], sandbox_id.as_str(), "{v}");
    assert_eq!(v["uid"], uid.as_str(), "{v}");
    assert_eq!(v["verdict"], "gone", "{v}");
    let steps = v["steps"].as_array().expect("steps");
    let step_methods: Vec<&str> = steps.iter().filter_map(|s| s["method"].as_str()).collect();
    for m in [
        "StopContainer",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ] {
        assert!(step_methods.contains(&m), "{m} not a step: {v}");
    }
    for s in steps {
        assert_eq!(s["outcome"]["kind"], "ok", "{s}");
        // Run 2's calls.
        let start = s["start"]["wall_ns"].as_u64().expect("step start");
        assert!(start >= run2_start, "a step before run 2 started: {s}");
    }
    // The container by its name (`up`'s default), not only its id.
    assert!(
        steps
            .iter()
            .any(|s| s["method"] == "StopContainer" && s["container"] == "main"),
        "{v}"
    );
}
