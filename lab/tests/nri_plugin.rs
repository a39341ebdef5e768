//! The NRI test plugins against the lab's real containerd (root only).
//!
//! Each test takes the machine-wide lab lock (/run/nri-trace-lab.lock, one
//! lab per machine), brings the lab up with the settings it needs
//! (`lab.sh down` + `up`), and leaves it down with nothing of its own in
//! the plugin directories. Pods are driven with the lab's CRI driver
//! (`cri-driver lifecycle`): NRI pod events need CRI.
//!
//! Not root: panics when CI is "true" or "1", else prints "skipping ..."
//! and passes.

use std::{
    fs::{self, File},
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use nri_trace_lab::{
    labctl,
    truth::{self, Action, NriPod, Outcome, PluginEvent, Truth},
};

const PLUGIN: &str = env!("CARGO_BIN_EXE_nri-test-plugin");
const DRIVER: &str = env!("CARGO_BIN_EXE_cri-driver");

fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// True when the test must not run (and has said so).
fn skip(name: &str) -> bool {
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    let reason = "needs root (runs a private containerd)";
    assert!(!ci(), "{name}: {reason}");
    eprintln!("skipping {name}: {reason}");
    true
}

fn lab_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("NRI_TRACE_LAB_DIR").unwrap_or_else(|_| "/var/lib/nri-trace-lab".into()),
    )
}

fn lab_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.sh")
}

fn lab(args: &[&str], timeout: &str) {
    let out = Command::new("bash")
        .arg(lab_sh())
        .args(args)
        .env("NRI_TRACE_LAB_REQUEST_TIMEOUT", timeout)
        .output()
        .expect("running lab.sh");
    assert!(
        out.status.success(),
        "lab.sh {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The lab, held for one test: lock, install, down, our pre-launched
/// plugins, up. Dropping it removes those plugins and takes the lab down.
struct Lab {
    _lock: labctl::LabLock,
    installed: Vec<PathBuf>,
}

impl Lab {
    /// `prelaunched`: (file name under nri/plugins, script, optional conf.d text).
    fn up(request_timeout: &str, prelaunched: &[(&str, String, Option<String>)]) -> Lab {
        let lock = labctl::lock().expect("lab lock");
        let mut lab_ = Lab {
            _lock: lock,
            installed: vec![],
        };
        lab(&["install"], request_timeout);
        lab(&["down"], request_timeout);
        let dir = lab_dir();
        for (file, script, conf) in prelaunched {
            let p = dir.join("nri/plugins").join(file);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, script).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            lab_.installed.push(p);
            if let Some(conf) = conf {
                let c = dir.join("nri/conf.d").join(format!("{file}.conf"));
                fs::create_dir_all(c.parent().unwrap()).unwrap();
                fs::write(&c, conf).unwrap();
                lab_.installed.push(c);
            }
        }
        lab(&["up"], request_timeout);
        lab_
    }

    fn down(&mut self) {
        for p in self.installed.drain(..) {
            let _ = fs::remove_file(p);
        }
        lab(&["down"], "2s");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Never leave a plugin behind: every later `up` would launch it.
        for p in self.installed.drain(..) {
            let _ = fs::remove_file(p);
        }
        // Best effort; a failure here must not hide the test's own panic.
        let _ = Command::new("bash")
            .arg(lab_sh())
            .arg("down")
            .env("NRI_TRACE_LAB_REQUEST_TIMEOUT", "2s")
            .output();
    }
}

/// A plugin process, killed if still running when dropped.
struct Proc(Child);

impl Proc {
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Some(st) = self.0.try_wait().unwrap() {
                return Some(st);
            }
            sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nri-plugin-test-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn external(dir: &Path, name: &str, idx: &str, extra: &[&str]) -> Proc {
    let log = File::create(dir.join(format!("{idx}-{name}.log"))).unwrap();
    let child = Command::new(PLUGIN)
        .args(["--name", name, "--idx", idx])
        .arg("--truth")
        .arg(dir.join(format!("{idx}-{name}.ndjson")))
        .arg("--socket")
        .arg(lab_dir().join("run/nri.sock"))
        .args(extra)
        .env_remove("NRI_PLUGIN_SOCKET")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting nri-test-plugin");
    Proc(child)
}

fn records(path: &Path) -> Vec<Truth> {
    if !path.exists() {
        return vec![];
    }
    truth::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn lifecycle_events(path: &Path) -> Vec<PluginEvent> {
    records(path)
        .into_iter()
        .filter_map(|t| match t {
            Truth::Plugin { what, .. } => Some(what),
            _ => None,
        })
        .collect()
}

fn wait_for(path: &Path, what: &str, timeout: Duration, pred: impl Fn(&PluginEvent) -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if lifecycle_events(path).iter().any(&pred) {
            return;
        }
        sleep(Duration::from_millis(20));
    }
    panic!(
        "{}: no {what} within {timeout:?}; got {:#?}",
        path.display(),
        records(path)
    );
}

/// An NRI request as recorded.
#[derive(Debug, Clone)]
struct Rec {
    method: String,
    event: Option<String>,
    pod: Option<NriPod>,
    recv: u64,
    reply: Option<u64>,
    action: Action,
    outcome: Outcome,
}

fn nri_records(path: &Path) -> Vec<Rec> {
    let mut v: Vec<Rec> = records(path)
        .into_iter()
        .filter_map(|t| match t {
            Truth::Nri {
                method,
                event,
                pod,
                recv_mono_ns,
                reply_mono_ns,
                action,
                outcome,
                ..
            } => Some(Rec {
                method,
                event,
                pod,
                recv: recv_mono_ns,
                reply: reply_mono_ns,
                action,
                outcome,
            }),
            _ => None,
        })
        .collect();
    v.sort_by_key(|r| r.recv);
    v
}

fn drive_lifecycle(dir: &Path, prefix: &str) -> String {
    let cri_truth = dir.join("cri.ndjson");
    let out = Command::new(DRIVER)
        .arg("--socket")
        .arg(lab_dir().join("run/containerd.sock"))
        .arg("--truth")
        .arg(&cri_truth)
        .args([
            "lifecycle",
            "--pods",
            "1",
            "--containers",
            "1",
            "--prefix",
            prefix,
        ])
        .output()
        .expect("running cri-driver");
    assert!(
        out.status.success(),
        "cri-driver lifecycle failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    records(&cri_truth)
        .into_iter()
        .find_map(|t| match t {
            Truth::Cri {
                method,
                pod: Some(p),
                ..
            } if method == "RunPodSandbox" => Some(p.name),
            _ => None,
        })
        .expect("the driver recorded no RunPodSandbox")
}

const POD_EVENTS: [&str; 3] = ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"];
const CONTAINER_EVENTS: [&str; 6] = [
    "CREATE_CONTAINER",
    "POST_CREATE_CONTAINER",
    "START_CONTAINER",
    "POST_START_CONTAINER",
    "STOP_CONTAINER",
    "REMOVE_CONTAINER",
];

#[test]
fn plugins_see_a_pod_lifecycle() {
    if skip("plugins_see_a_pod_lifecycle") {
        return;
    }
    let dir = tmpdir("lifecycle");
    let pre_truth = dir.join("30-prelaunched.ndjson");
    let script = format!(
        "#!/bin/sh\nexec '{PLUGIN}' --truth '{}' 2>>'{}'\n",
        pre_truth.display(),
        dir.join("30-prelaunched.log").display()
    );
    // Its actions come from the config string containerd sends in Configure.
    let conf = r#"{"on":{"RUN_POD_SANDBOX":"delay:50"}}"#.to_string();
    let mut lab_ = Lab::up("2s", &[("30-prelaunched", script, Some(conf))]);

    let mut slow = external(&dir, "slow", "10", &["--on", "RUN_POD_SANDBOX=delay:200"]);
    let mut plain = external(&dir, "plain", "20", &[]);
    let truths = [
        (dir.join("10-slow.ndjson"), true),
        (dir.join("20-plain.ndjson"), true),
        (pre_truth.clone(), false),
    ];
    for (t, external) in &truths {
        let want_sync = *external;
        wait_for(t, "registration", Duration::from_secs(10), |e| {
            if want_sync {
                matches!(e, PluginEvent::Synchronized { .. })
            } else {
                matches!(e, PluginEvent::Configured { .. })
            }
        });
    }

    let pod = drive_lifecycle(&dir, "nriplug");

    // Down closes every plugin connection: the plugins record it and exit.
    lab_.down();
    for (p, name) in [(&mut slow, "slow"), (&mut plain, "plain")] {
        let st = p
            .wait_exit(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("{name} did not exit"));
        assert!(st.success(), "{name} exited with {st}");
    }
    // The pre-launched plugin is containerd's child: wait for its pid.
    let pre_pid = lifecycle_events(&pre_truth).iter().find_map(|e| match e {
        PluginEvent::Connected {
            prelaunched: true,
            pid,
        } => Some(*pid),
        _ => None,
    });
    let pre_pid =
        pre_pid.expect("the pre-launched plugin recorded no Connected{prelaunched: true}");
    let t0 = Instant::now();
    // A zombie has exited (PID 1 of these VMs reaps orphans only slowly).
    let alive = |pid: u32| {
        fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    while alive(pre_pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "pre-launched plugin {pre_pid} still running"
        );
        sleep(Duration::from_millis(20));
    }

    let mut run_times = vec![];
    for (t, external) in &truths {
        let life = lifecycle_events(t);
        let has = |f: fn(&PluginEvent) -> bool| life.iter().any(f);
        assert!(
            has(|e| matches!(e, PluginEvent::Connected { .. })),
            "{}: {life:?}",
            t.display()
        );
        assert!(
            has(|e| matches!(e, PluginEvent::Registered)),
            "{}: {life:?}",
            t.display()
        );
        let configured = life.iter().find_map(|e| match e {
            PluginEvent::Configured {
                runtime,
                events_mask,
                ..
            } => Some((runtime.clone(), *events_mask)),
            _ => None,
        });
        let (runtime, mask) =
            configured.unwrap_or_else(|| panic!("{}: not configured: {life:?}", t.display()));
        assert!(runtime.contains("containerd"), "runtime name {runtime:?}");
        assert_eq!(mask, 0x7ff);
        // containerd 1.7 (NRI v0.6.1) synchronizes external plugins only:
        // pre-launched ones are started before the runtime has any state.
        if *external {
            assert!(
                has(|e| matches!(e, PluginEvent::Synchronized { .. })),
                "{}: {life:?}",
                t.display()
            );
        }
        assert!(
            matches!(life.last(), Some(PluginEvent::Disconnected { .. })),
            "{}: last lifecycle event is not Disconnected: {life:?}",
            t.display()
        );

        let recs: Vec<Rec> = nri_records(t)
            .into_iter()
            .filter(|r| r.pod.as_ref().is_some_and(|p| p.name == pod))
            .collect();
        let events: Vec<&str> = recs.iter().filter_map(|r| r.event.as_deref()).collect();
        let pod_events: Vec<&str> = events
            .iter()
            .copied()
            .filter(|e| POD_EVENTS.contains(e))
            .collect();
        assert_eq!(
            pod_events,
            POD_EVENTS,
            "{}: pod events of {pod}: {events:?}",
            t.display()
        );
        let pos = |e: &str| events.iter().position(|x| *x == e).unwrap();
        for e in CONTAINER_EVENTS {
            assert!(
                events.contains(&e),
                "{}: no {e} for {pod}: {events:?}",
                t.display()
            );
            assert!(
                pos("RUN_POD_SANDBOX") < pos(e) && pos(e) < pos("REMOVE_POD_SANDBOX"),
                "{events:?}"
            );
        }
        assert!(
            pos("CREATE_CONTAINER") < pos("START_CONTAINER"),
            "{events:?}"
        );
        assert!(pos("START_CONTAINER") < pos("STOP_CONTAINER"), "{events:?}");
        for r in &recs {
            assert!(r.reply.is_some(), "{}: unanswered {r:?}", t.display());
            assert_eq!(r.outcome, Outcome::Ok, "{}: {r:?}", t.display());
        }
        let run = recs
            .iter()
            .find(|r| r.event.as_deref() == Some("RUN_POD_SANDBOX"))
            .unwrap();
        // NRI 0.12 (containerd 2.3) calls a method per event; the older
        // runtimes send pod events as StateChange.
        let runtime = labctl::Runtime::from_env().expect("lab runtime");
        let want = if runtime == labctl::Runtime::Containerd23 {
            "RunPodSandbox"
        } else {
            "StateChange"
        };
        assert_eq!(
            run.method,
            want,
            "{} sends RUN_POD_SANDBOX as {want}",
            runtime.name()
        );
        run_times.push((run.recv, run.reply.unwrap(), run.action.clone()));
    }

    // The delay plugin's handler took at least 200 ms.
    let (recv, reply, action) = &run_times[0];
    assert_eq!(*action, Action::Delay { ms: 200 });
    let ms = (reply - recv) as f64 / 1e6;
    assert!(
        ms >= 200.0,
        "slow plugin answered RUN_POD_SANDBOX after {ms:.1} ms"
    );
    // The pre-launched plugin got its action from conf.d via Configure.
    assert_eq!(run_times[2].2, Action::Delay { ms: 50 });
    // The runtime calls plugins one after another in index order:
    // 10 answers before 20 receives, 20 before 30.
    assert!(run_times[0].1 <= run_times[1].0, "{run_times:?}");
    assert!(run_times[1].1 <= run_times[2].0, "{run_times:?}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn hanging_plugin_is_disconnected() {
    if skip("hanging_plugin_is_disconnected") {
        return;
    }
    let dir = tmpdir("hang");
    let mut lab_ = Lab::up("1s", &[]);
    let truth_path = dir.join("40-hang.ndjson");
    let mut hang = external(&dir, "hang", "40", &["--on", "RUN_POD_SANDBOX=hang"]);
    wait_for(&truth_path, "Synchronized", Duration::from_secs(10), |e| {
        matches!(e, PluginEvent::Synchronized { .. })
    });

    // containerd 1.7 drops the plugin after the 1 s timeout and goes on, so
    // the lifecycle itself succeeds.
    let pod = drive_lifecycle(&dir, "nrihang");
    let st = hang
        .wait_exit(Duration::from_secs(10))
        .expect("the hanging plugin did not exit after its disconnect");
    assert!(st.success(), "exit status {st}");
    lab_.down();

    let all = records(&truth_path);
    let run = nri_records(&truth_path)
        .into_iter()
        .find(|r| {
            r.event.as_deref() == Some("RUN_POD_SANDBOX")
                && r.pod.as_ref().is_some_and(|p| p.name == pod)
        })
        .unwrap_or_else(|| panic!("no RUN_POD_SANDBOX for {pod}: {all:#?}"));
    assert_eq!(run.action, Action::Hang);
    assert_eq!(run.reply, None, "a hang must never be answered: {run:?}");
    let disconnected = all.iter().find_map(|t| match t {
        Truth::Plugin {
            what: PluginEvent::Disconnected { reason },
            mono_ns,
            ..
        } => Some((*mono_ns, reason.clone())),
        _ => None,
    });
    let (at, reason) = disconnected.unwrap_or_else(|| panic!("no Disconnected: {all:#?}"));
    let waited = (at - run.recv) as f64 / 1e6;
    assert!(
        (900.0..5000.0).contains(&waited),
        "disconnected {waited:.0} ms after the hung request ({reason}); the timeout is 1 s"
    );
    // Nothing after the hang was delivered to this plugin.
    assert!(
        !nri_records(&truth_path).iter().any(|r| r.recv > run.recv),
        "requests after the hang: {all:#?}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn binary_rejects_bad_options() {
    // No lab needed.
    let out = Command::new(PLUGIN)
        .args(["--name", "x", "--idx", "1", "--print-config"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "one-digit index accepted");
    let out = Command::new(PLUGIN)
        .args([
            "--name",
            "x",
            "--idx",
            "10",
            "--on",
            "RUN_POD_SANDBOX=sleep:1",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "bad action accepted");
    let out = Command::new(PLUGIN)
        .args([
            "--name",
            "x",
            "--idx",
            "10",
            "--events",
            "pod",
            "--on",
            "run-pod-sandbox=delay:5",
            "--print-config",
        ])
        .env_remove("NRI_PLUGIN_SOCKET")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["events_mask"], "0x7");
    assert_eq!(v["config"]["on"]["run-pod-sandbox"], "delay:5");
    let _ = std::io::stdout().flush();
}
