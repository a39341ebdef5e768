//! nri-trace as an observer of lab scenarios: the binary run with
//! `watch -o json --save --save-raw` while the runtime is up, the check
//! that its live output is what its raw capture replays to, and the guards
//! of the live lab tests (root, eBPF object, binaries; mandatory under
//! CI).
#![allow(dead_code)]

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use nri_trace::{
    engine::contract::ContractConfig,
    pipeline::{
        replay::{self, Collect, Collected},
        Pipeline,
    },
    sinks::JsonSink,
    store::ndjson::LineReader,
    store::record_file::RecordLine,
};
use nri_trace_lab::{
    labctl::{self, Lab, Runtime},
    scenario::{self, Bins, Observer},
};
pub(crate) use nri_trace_tests::http_get;
use nri_trace_tests::SharedBuf;

pub(crate) fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// The workspace's binaries (built by `cargo test --workspace`).
pub(crate) use nri_trace_tests::workspace_bin as bin;

/// True when the live lab test `test` can run; under CI a missing
/// requirement fails it, elsewhere it says why it skips.
pub(crate) fn guard(test: &str) -> bool {
    let mut why = None;
    if unsafe { libc::geteuid() } != 0 {
        why = Some("not running as root: the lab runs a private containerd".to_string());
    } else if nri_trace::capture::EbpfBackend::object().is_empty() {
        why = Some("no eBPF object embedded: run `cargo xtask build`".into());
    } else {
        for b in ["nri-trace", "cri-driver", "nri-test-plugin"] {
            if !bin(b).exists() {
                why = Some(format!(
                    "{} not built: run `cargo build --workspace` (or `cargo xtask test`)",
                    bin(b).display()
                ));
            }
        }
    }
    let Some(why) = why else { return true };
    assert!(!ci(), "{test}: {why}");
    eprintln!("skipping {test}: {why}");
    false
}

/// Runs `nri-trace watch -o json` on the lab's runtime (found as on a
/// node) while a scenario runs, saving the decoded calls (`--save`) and
/// the raw capture (`--save-raw`) beside its output, and serving metrics.
#[derive(Default)]
pub(crate) struct TraceProc {
    child: Option<Child>,
    out: PathBuf,
    /// More `watch` arguments (e.g. `--no-cri-state`).
    args: Vec<String>,
    /// Give the lab's sockets (`--cri-socket`, `--nri-socket`) instead of
    /// finding the runtime: for a runtime that is not up yet.
    lab_sockets: bool,
    /// A cgroup's `cgroup.procs` file: nri-trace is started inside that
    /// cgroup (it moves itself there between fork and exec, so every page
    /// it allocates is charged to it).
    cgroup_procs: Option<PathBuf>,
}

impl TraceProc {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn with_args(args: &[&str]) -> Self {
        Self {
            args: args.iter().map(ToString::to_string).collect(),
            ..Self::default()
        }
    }

    /// Started on the lab's sockets, given on its command line.
    pub(crate) fn on_lab_sockets() -> Self {
        Self {
            lab_sockets: true,
            ..Self::default()
        }
    }

    /// Started inside the cgroup whose `cgroup.procs` file is `procs`.
    pub(crate) fn in_cgroup(mut self, procs: &Path) -> Self {
        self.cgroup_procs = Some(procs.to_path_buf());
        self
    }

    /// The running nri-trace's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL it and reap it: nothing of it runs afterwards (no drain, no
    /// clean-up of its own), as after `kill -9` or the OOM killer.
    pub(crate) fn sigkill(&mut self) -> Result<std::process::ExitStatus> {
        let mut c = self.child.take().context("nri-trace is not running")?;
        c.kill().context("SIGKILL nri-trace")?;
        Ok(c.wait()?)
    }

    /// The processes at the other end of nri-trace's own unix socket
    /// connections just before it was stopped, one `comm[pid]` a line (the
    /// runtime's view of who is connected: SO_PEERCRED of each of them).
    pub(crate) fn peers(out: &Path) -> PathBuf {
        out.join("nri-trace.peers.txt")
    }

    /// (stdout, raw capture, stderr) in a scenario's output directory.
    pub(crate) fn paths(out: &Path) -> (PathBuf, PathBuf, PathBuf) {
        (
            out.join("nri-trace.ndjson"),
            out.join("nri-trace.raw.ndjson"),
            out.join("nri-trace.stderr"),
        )
    }

    /// What nri-trace had printed when the scenario was over and the lab
    /// quiet for a second, before it was stopped: its calls must be out by
    /// then (the capture's ticks settle them), not held for the stop.
    pub(crate) fn before_stop(out: &Path) -> PathBuf {
        out.join("nri-trace.before-stop.ndjson")
    }

    /// The record file `--save` wrote.
    pub(crate) fn observations(out: &Path) -> PathBuf {
        out.join("nri-trace.observations.ndjson")
    }
}

impl Observer for TraceProc {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        self.out = out.to_path_buf();
        let (stdout, raw, stderr) = Self::paths(out);
        // No socket flags: the runtime and its sockets are found the way
        // they are on a node (the lab's containerd is the only runtime on a
        // test machine; the replays use the sockets the files name, so a
        // wrong pick fails the live == replay checks). Metrics on a port
        // the kernel picks (printed on stderr). The saved calls are not
        // redacted: the live == replay check wants every byte back, and
        // containerd's own errors can hold `name="value"` text (`plugin
        // type="loopback" failed`, hung-teardown-hook). Redaction is
        // checked on the lab recordings in record_file.rs.
        let mut cmd = Command::new(bin("nri-trace"));
        cmd.args(["watch", "-o", "json", "--metrics-addr", "127.0.0.1:0"]);
        if self.lab_sockets {
            cmd.arg("--cri-socket")
                .arg(lab.cri_socket())
                .arg("--nri-socket")
                .arg(lab.nri_socket());
        }
        if let Some(procs) = &self.cgroup_procs {
            use std::os::unix::{ffi::OsStrExt, process::CommandExt};
            let path = std::ffi::CString::new(procs.as_os_str().as_bytes())?;
            // SAFETY: between fork and exec only async-signal-safe calls
            // (open, write, close) on memory allocated before the fork.
            // Writing "0" moves the writer itself (cgroup_procs_write,
            // kernel/cgroup/cgroup.c).
            unsafe {
                cmd.pre_exec(move || {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    Ok(())
                });
            }
        }
        let child = cmd
            .arg("--no-redact")
            .arg("--save")
            .arg(Self::observations(out))
            .arg("--save-raw")
            .arg(&raw)
            .args(&self.args)
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .stdin(Stdio::null())
            .spawn()
            .context("starting nri-trace")?;
        let child = self.child.insert(child);
        nri_trace_tests::wait_for_lines(
            child,
            &stderr,
            &["nri-trace: ready"],
            Duration::from_secs(30),
            "nri-trace",
        )?;
        Ok(())
    }

    fn detach(&mut self) -> Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        // Let the last calls drain (the drain timer is 2 ms).
        std::thread::sleep(Duration::from_millis(300));
        if let Some(addr) = metrics_addr(&self.out) {
            // The exposition is refreshed every 500 ms.
            std::thread::sleep(Duration::from_millis(700));
            let text = http_get(&addr, "/metrics")
                .with_context(|| format!("scraping http://{addr}/metrics"))?;
            std::fs::write(self.out.join("metrics.txt"), text)?;
        }
        std::fs::copy(Self::paths(&self.out).0, Self::before_stop(&self.out))?;
        std::fs::write(Self::peers(&self.out), peers_of(c.id()))?;
        // nri-trace stops once it has decoded what it captured. A debug
        // build behind a hostile flood on a 2-core machine with a compile
        // beside it (load average 8) was still decoding 20 s after the
        // signal (faults_lab, 3 of 3 runs on 2026-11-28; its raw capture
        // alone takes 47-50 s of CPU to replay in debug): the limit is a
        // guard against a hang, the time is printed.
        let t0 = std::time::Instant::now();
        let st = nri_trace_tests::stop_child(
            &mut c,
            libc::SIGTERM,
            Duration::from_secs(STOP_WITHIN_S),
            "nri-trace",
        )?;
        eprintln!(
            "nri-trace stopped {:.1} s after SIGTERM",
            t0.elapsed().as_secs_f64()
        );
        if !st.success() {
            let mut log = String::new();
            let _ = std::fs::File::open(Self::paths(&self.out).2)?.read_to_string(&mut log);
            bail!("nri-trace exited with {st}:\n{log}");
        }
        Ok(())
    }
}

/// How long nri-trace may take to stop after SIGTERM (see `detach`).
const STOP_WITHIN_S: u64 = 180;

/// `comm[pid]` of the peer of every connected socket `pid` holds, a line
/// each.
fn peers_of(pid: u32) -> String {
    use nri_trace::testing::capture::discovery;
    let mut lines = String::new();
    for (fd, _) in discovery::socket_fds_of(pid).unwrap_or_default() {
        let Some(cred) = discovery::peer_cred(pid, fd) else {
            continue;
        };
        let comm = discovery::process_info(cred.pid).map_or_else(|| "?".into(), |i| i.comm);
        lines.push_str(&format!("{comm}[{}]\n", cred.pid));
    }
    lines
}

/// The metrics address nri-trace printed on its stderr, if any.
pub(crate) fn metrics_addr(out: &Path) -> Option<String> {
    let log = std::fs::read_to_string(TraceProc::paths(out).2).ok()?;
    let rest = log.split("metrics on http://").nth(1)?;
    Some(rest.split('/').next()?.to_string())
}

/// Run `scenario` with `nri-trace watch` attached; returns its output
/// directory (under the test target dir, `<group>/<scenario>`), or `None`
/// when the test is skipped.
pub(crate) fn run_traced(group: &str, scenario: &str) -> Option<PathBuf> {
    run_traced_with(group, scenario, TraceProc::new())
}

/// [`run_traced`] with this observer.
pub(crate) fn run_traced_with(group: &str, scenario: &str, trace: TraceProc) -> Option<PathBuf> {
    run_traced_on(group, scenario, None, trace)
}

/// [`run_traced_with`] on `runtime` (None: NRI_TRACE_LAB_RUNTIME's).
pub(crate) fn run_traced_on(
    group: &str,
    scenario: &str,
    runtime: Option<Runtime>,
    trace: TraceProc,
) -> Option<PathBuf> {
    run_observed_by(group, scenario, runtime, Box::new(trace))
}

/// Run `scenario` on `runtime` (None: NRI_TRACE_LAB_RUNTIME's) with any
/// observer (one wrapping a [`TraceProc`]); see [`run_traced`].
pub(crate) fn run_observed_by(
    group: &str,
    scenario: &str,
    runtime: Option<Runtime>,
    observer: Box<dyn Observer>,
) -> Option<PathBuf> {
    let mut lab = Lab::from_env();
    if let Some(r) = runtime {
        lab.runtime = r;
    }
    run_observed_on(group, scenario, lab, observer)
}

/// [`run_observed_by`] on `lab` as given (its runtime, its tracing).
pub(crate) fn run_observed_on(
    group: &str,
    scenario: &str,
    lab: Lab,
    observer: Box<dyn Observer>,
) -> Option<PathBuf> {
    if !guard(scenario) {
        return None;
    }
    let _lock = labctl::lock().expect("lab lock");
    lab.install().expect("lab install");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(scenario);
    let bins = Bins {
        driver: bin("cri-driver"),
        plugin: bin("nri-test-plugin"),
    };
    scenario::run_observed(scenario, lab.clone(), bins, &out, Some(observer))
        .unwrap_or_else(|e| panic!("scenario {scenario}: {e:#}"));
    // What a truth-only run of the scenario (lab/tests/scenarios.rs) checks
    // besides its `verify`: the runtime asked for configured the plugins,
    // and `down` left nothing behind (still under the lock).
    let problems = scenario::after_run_problems(scenario, &lab, &out.join("truth.ndjson"))
        .unwrap_or_else(|e| panic!("{scenario}: {e:#}"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Some(out)
}

/// The live run's `-o json` output is, byte for byte, what its raw
/// capture gives through the replay pipeline (with the session line the
/// live run wrote), and what `nri-trace replay FILE -o json` prints of
/// its `--save` file (private, valid against the schema, as is every line
/// of the live output); `replay FILE -o text` of that file tells each
/// pod's story within its line budget. The records and tables of the
/// replay.
pub(crate) fn live_equals_replay(scenario: &str, out: &Path) -> Collected {
    let (stdout, raw, _) = TraceProc::paths(out);
    let live = std::fs::read(&stdout).unwrap_or_else(|e| panic!("{}: {e}", stdout.display()));
    let live = without_export_counts(live);
    let session = match LineReader::<_, RecordLine>::new(&live[..]).next() {
        Some(Ok(RecordLine::Session(s))) => s,
        other => panic!("{scenario}: the live output does not start with a session: {other:?}"),
    };
    let events = nri_trace::store::raw_capture::read_file(&raw)
        .unwrap_or_else(|e| panic!("reading {}: {e}", raw.display()));
    let buf = SharedBuf::default();
    let (collect, got) = Collect::new();
    let mut p = Pipeline::new(&session, ContractConfig::default());
    p.add_sink(Box::new(JsonSink::new(buf.clone(), &session).unwrap()));
    p.add_sink(Box::new(collect));
    replay::events(&events, p).unwrap();
    assert_eq!(
        String::from_utf8(live.clone()).unwrap(),
        String::from_utf8(buf.bytes()).unwrap(),
        "{scenario}: live output and replay of its raw capture differ"
    );
    saved_replays_to_live(scenario, out, &live);
    let collected = got.borrow().clone();
    collected
}

/// `-o json` output without the `otlp` counts of its `session_end` (a
/// run with `--otlp-endpoint`): what the export did is the live run's
/// own, a replay without export has none.
fn without_export_counts(live: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(live).expect("utf-8 output");
    let Some(at) = text.rfind(",\"otlp\":{") else {
        return text.into_bytes();
    };
    let end = text[at..].find('}').map_or(text.len(), |e| at + e + 1);
    format!("{}{}", &text[..at], &text[end..]).into_bytes()
}

/// The `-o json` lines of one type from a traced run's live output.
pub(crate) fn json_lines(out: &Path, ty: &str) -> Vec<serde_json::Value> {
    let (stdout, _, _) = TraceProc::paths(out);
    std::fs::read_to_string(&stdout)
        .expect("nri-trace's output")
        .lines()
        .filter(|l| l.contains(&format!(r#""type":"{ty}""#)))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `nri-trace ARGS`, which must succeed: its stdout.
pub(crate) fn nri_trace_stdout<I, S>(what: &str, args: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let o = Command::new(bin("nri-trace"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running nri-trace ({what}): {e}"));
    assert!(
        o.status.success(),
        "nri-trace {what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// See [`live_equals_replay`].
fn saved_replays_to_live(scenario: &str, out: &Path, live: &[u8]) {
    use std::{ffi::OsStr, os::unix::fs::PermissionsExt};
    let obs = TraceProc::observations(out);
    let mode = std::fs::metadata(&obs)
        .expect("the --save file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{scenario}: {} mode", obs.display());
    let v = crate::record_schema::validator();
    let types = crate::record_schema::validate_lines(&v, scenario, &std::fs::read(&obs).unwrap());
    assert!(
        types.contains_key("session") && types.contains_key("session_end"),
        "{types:?}"
    );
    crate::record_schema::validate_lines(&v, &format!("{scenario}: watch -o json"), live);
    let replay = |format: &str| {
        nri_trace_stdout(
            &format!("{scenario}: replay -o {format}"),
            [
                OsStr::new("replay"),
                obs.as_os_str(),
                OsStr::new("-o"),
                OsStr::new(format),
            ],
        )
    };
    assert_eq!(
        String::from_utf8(live.to_vec()).unwrap(),
        String::from_utf8(replay("json")).unwrap(),
        "{scenario}: watch -o json and replay -o json of its --save file differ"
    );
    let text = String::from_utf8(replay("text")).unwrap();
    let (t, c) =
        crate::output_check::check_text(scenario, &text, &crate::output_check::json_lines(live));
    eprintln!(
        "{scenario}: {} text lines for {} CRI calls, {} hooks, {} findings, {} pods, {} table \
         lines, {} outside any call",
        t.lines,
        c.cri,
        c.hooks,
        c.findings,
        c.pods,
        crate::output_check::table_lines(&c),
        t.outside
    );
}

/// The events of a run's raw capture.
pub(crate) fn raw_events(out: &Path) -> Vec<nri_trace::capture::CaptureEvent> {
    let (_, raw, _) = TraceProc::paths(out);
    nri_trace::store::raw_capture::read_file(&raw)
        .unwrap_or_else(|e| panic!("reading {}: {e}", raw.display()))
}

/// Brings the lab down when dropped (a failed test included).
pub(crate) struct LabUp(pub(crate) Lab);

impl Drop for LabUp {
    fn drop(&mut self) {
        if let Err(e) = self.0.down() {
            eprintln!("lab down: {e:#}");
        }
    }
}

/// `cri-driver ARGS` on the lab; its stdout's JSON line.
pub(crate) fn driver(lab: &Lab, truth: &Path, args: &[&str]) -> serde_json::Value {
    let o = Command::new(bin("cri-driver"))
        .arg("--socket")
        .arg(lab.cri_socket())
        .arg("--truth")
        .arg(truth)
        .args(args)
        .output()
        .expect("running cri-driver");
    assert!(
        o.status.success(),
        "cri-driver {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or_else(|| panic!("cri-driver {}: no JSON line", args.join(" ")))
}
