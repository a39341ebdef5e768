//! cri-driver against the real lab: `lab.sh install` + `up`, the lifecycle
//! scenario (2 pods x 1 container) with host network and with own netns,
//! every CRI call Ok and in kubelet's order per pod in the truth file, then
//! `lab.sh down` (which must leave nothing behind).
//!
//! Needs root (the lab runs a private containerd). Without root it prints
//! "skipping ..." and passes, except under CI (CI=true or 1), where it
//! fails. The lab is one per machine: the test holds an exclusive flock on
//! /run/nri-trace-lab.lock while it uses it.

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use nri_trace_lab::{
    labctl,
    truth::{self, Outcome, Truth},
};

/// Skip (or, under CI, fail) unless we are root.
fn require_root(name: &str) -> bool {
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let ci = std::env::var("CI").unwrap_or_default();
    assert!(
        !(ci == "true" || ci == "1"),
        "{name}: needs root (the lab runs a private containerd), and CI={ci}"
    );
    println!("skipping {name}: needs root (the lab runs a private containerd)");
    false
}

fn lab_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.sh")
}

struct Output {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run `cmd`, killing it after `within`; panics on a timeout.
fn run(what: &str, cmd: &mut Command, within: Duration) -> Output {
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err_t.join().unwrap_or_default();
            panic!("{what}: no exit within {within:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    };
    eprintln!(
        "{what}: {} in {:.2} s",
        o.status,
        t0.elapsed().as_secs_f64()
    );
    o
}

fn lab(cmd: &str, within: Duration) -> Output {
    run(
        &format!("lab.sh {cmd}"),
        Command::new("bash").arg(lab_sh()).arg(cmd),
        within,
    )
}

/// `lab.sh down` when dropped, so a failed assertion does not leave a
/// containerd running.
struct LabUp;

impl Drop for LabUp {
    fn drop(&mut self) {
        let o = lab("down", Duration::from_mins(2));
        if !o.status.success() {
            eprintln!("lab.sh down failed:\n{}{}", o.stdout, o.stderr);
        }
    }
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "cri-driver-test-{}-{}",
        std::process::id(),
        truth::mono_ns()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// kubelet's order of one pod's lifecycle with one container, with the
/// ContainerStatus polls collapsed into one step.
const EXPECTED: &[&str] = &[
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "StopContainer",
    "StopPodSandbox",
    "RemoveContainer",
    "RemovePodSandbox",
];

/// Run the lifecycle scenario and check its truth file.
fn lifecycle(dir: &Path, prefix: &str, netns: bool) {
    let truth_path = dir.join(format!("{prefix}.ndjson"));
    let grace = 1;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cri-driver"));
    cmd.arg("--truth")
        .arg(&truth_path)
        .args([
            "lifecycle",
            "--pods",
            "2",
            "--containers",
            "1",
            "--prefix",
            prefix,
        ])
        .args(["--grace-secs", &grace.to_string()]);
    if netns {
        cmd.arg("--netns");
    }
    let o = run(
        &format!("cri-driver lifecycle {prefix}"),
        &mut cmd,
        Duration::from_mins(3),
    );
    assert!(
        o.status.success(),
        "cri-driver lifecycle failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        o.stdout,
        o.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(o.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON line ({e}): {}", o.stdout));
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["failures"], 0, "{summary}");
    assert_eq!(summary["host_network"], !netns, "{summary}");

    let records = truth::read(&truth_path).expect("read truth file");
    let cri: Vec<&Truth> = records
        .iter()
        .filter(|t| matches!(t, Truth::Cri { .. }))
        .collect();
    assert_eq!(
        summary["calls"].as_u64(),
        Some(cri.len() as u64),
        "one truth record per call"
    );

    let mut per_pod: BTreeMap<String, Vec<&Truth>> = BTreeMap::new();
    for t in &cri {
        let Truth::Cri {
            method,
            pod,
            outcome,
            retry,
            start_mono_ns,
            end_mono_ns,
            ..
        } = t
        else {
            unreachable!()
        };
        assert_eq!(*outcome, Outcome::Ok, "{method} not Ok: {t:?}");
        assert_eq!(*retry, 0, "{method}: no retry expected: {t:?}");
        assert!(start_mono_ns <= end_mono_ns, "{t:?}");
        match pod {
            Some(p) => per_pod.entry(p.name.clone()).or_default().push(t),
            None => assert_eq!(method, "Version", "only Version has no pod: {t:?}"),
        }
    }
    let names: Vec<&String> = per_pod.keys().collect();
    assert_eq!(
        names,
        [&format!("{prefix}-0"), &format!("{prefix}-1")],
        "pods"
    );

    for (name, calls) in &per_pod {
        // Order: kubelet's, with the ContainerStatus polls collapsed.
        let mut methods: Vec<&str> = vec![];
        for t in calls {
            let Truth::Cri { method, .. } = t else {
                unreachable!()
            };
            if methods.last() != Some(&method.as_str()) {
                methods.push(method);
            }
        }
        assert_eq!(methods, EXPECTED, "pod {name}: call order");

        // One pod's calls are sequential: each starts after the previous ended.
        let mut prev_end = 0;
        let mut sandbox = None;
        let mut container = None;
        for t in calls {
            let Truth::Cri {
                method,
                pod,
                container: c,
                start_mono_ns,
                end_mono_ns,
                start_wall_ns,
                deadline_ms,
                ..
            } = t
            else {
                unreachable!()
            };
            assert!(
                *start_mono_ns >= prev_end,
                "pod {name}: {method} overlaps the call before it"
            );
            prev_end = *end_mono_ns;
            assert!(
                *start_wall_ns > 1_600_000_000_000_000_000,
                "wall clock: {t:?}"
            );
            let p = pod.as_ref().unwrap();
            assert_eq!(p.namespace, "nri-trace");
            assert_eq!(p.attempt, 0);
            assert!(!p.uid.is_empty());
            let expected_deadline = match method.as_str() {
                "RunPodSandbox" => 240_000,
                "StopContainer" => 120_000 + grace * 1000,
                _ => 120_000,
            };
            assert_eq!(
                *deadline_ms,
                Some(expected_deadline),
                "pod {name}: {method} deadline"
            );
            // Ids: the sandbox id from RunPodSandbox on every later call,
            // the container id from CreateContainer on every container call.
            match (&sandbox, &p.sandbox_id) {
                (None, Some(id)) if method == "RunPodSandbox" => sandbox = Some(id.clone()),
                (Some(s), Some(id)) => assert_eq!(s, id, "pod {name}: {method} sandbox id"),
                _ => panic!("pod {name}: {method} without sandbox id: {t:?}"),
            }
            match method.as_str() {
                "RunPodSandbox" | "StopPodSandbox" | "RemovePodSandbox" => {
                    assert!(c.is_none(), "{t:?}")
                }
                _ => {
                    let c = c
                        .as_ref()
                        .unwrap_or_else(|| panic!("{method} without container"));
                    assert_eq!((c.name.as_str(), c.attempt), ("c0", 0));
                    let id =
                        c.id.clone()
                            .unwrap_or_else(|| panic!("{method} without container id"));
                    assert_eq!(id.len(), 64, "container id {id}");
                    match &container {
                        None => {
                            assert_eq!(method, "CreateContainer");
                            container = Some(id);
                        }
                        Some(cid) => assert_eq!(cid, &id, "pod {name}: {method} container id"),
                    }
                }
            }
        }
        assert_eq!(sandbox.map(|s| s.len()), Some(64), "pod {name}: sandbox id");
    }
    // The summary's pods agree with the truth file.
    for p in summary["pods"].as_array().expect("pods") {
        assert_eq!(p["ok"], true, "{p}");
        let name = p["name"].as_str().unwrap();
        let Some(Truth::Cri { pod, .. }) = per_pod[name].first() else {
            unreachable!()
        };
        assert_eq!(
            p["sandbox_id"].as_str(),
            pod.as_ref().unwrap().sandbox_id.as_deref()
        );
    }
}

#[test]
fn lifecycle_host_network_and_netns() {
    let name = "lifecycle_host_network_and_netns";
    if !require_root(name) {
        return;
    }
    let _lock = labctl::lock_within(Duration::from_mins(10)).expect("lab lock");
    let o = lab("install", Duration::from_mins(10));
    assert!(
        o.status.success(),
        "lab.sh install failed:\n{}{}",
        o.stdout,
        o.stderr
    );
    let o = lab("up", Duration::from_mins(2));
    let up = LabUp;
    assert!(
        o.status.success(),
        "lab.sh up failed:\n{}{}",
        o.stdout,
        o.stderr
    );

    let dir = temp_dir();
    lifecycle(&dir, "it-host", false);
    lifecycle(&dir, "it-netns", true);

    drop(up);
    // down must have left nothing: a second down finds nothing to do and
    // reports nothing left.
    let o = lab("down", Duration::from_mins(2));
    assert!(
        o.status.success(),
        "lab.sh down failed:\n{}{}",
        o.stdout,
        o.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
