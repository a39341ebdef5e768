//! nri-trace as an observer of lab scenarios: the binary run with
//! `--format ndjson --record` while the runtime is up, and the guards of
//! the live lab tests (root, eBPF object, binaries; mandatory under CI).
#![allow(dead_code)]

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use nri_trace_lab::{
    labctl::{self, Lab},
    scenario::{self, Bins, Observer},
};

pub fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// The workspace's binaries (built by `cargo test --workspace`).
pub use nri_trace_tests::workspace_bin as bin;

/// True when the live lab test `test` can run; under CI a missing
/// requirement fails it, elsewhere it says why it skips.
pub fn guard(test: &str) -> bool {
    let mut why = None;
    if unsafe { libc::geteuid() } != 0 {
        why = Some("not running as root: the lab runs a private containerd".to_string());
    } else if nri_trace::capture::ebpf::EbpfBackend::object().is_empty() {
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
    if ci() {
        panic!("{test}: {why}");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// Which nri-trace command observes, and on which lab socket.
#[derive(Clone, Copy, Debug)]
pub enum Traced {
    Nri,
    Cri,
    /// `trace`: both sockets, found from the running runtime.
    Both,
}

/// Runs `nri-trace nri|cri --format ndjson --record` while the runtime is up.
pub struct TraceProc {
    what: Traced,
    child: Option<Child>,
    out: PathBuf,
}

impl TraceProc {
    pub fn new(what: Traced) -> Self {
        TraceProc {
            what,
            child: None,
            out: PathBuf::new(),
        }
    }

    /// (stdout, recording, stderr) in a scenario's output directory.
    pub fn paths(out: &Path) -> (PathBuf, PathBuf, PathBuf) {
        (
            out.join("nri-trace.ndjson"),
            out.join("nri-trace.recording.ndjson"),
            out.join("nri-trace.stderr"),
        )
    }

    /// The observations `trace --observations` wrote (the `record` format).
    pub fn observations(out: &Path) -> PathBuf {
        out.join("nri-trace.observations.ndjson")
    }
}

impl Observer for TraceProc {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        self.out = out.to_path_buf();
        let (stdout, rec, stderr) = Self::paths(out);
        let mut cmd = Command::new(bin("nri-trace"));
        match self.what {
            Traced::Nri => cmd.arg("nri").arg("--socket").arg(lab.nri_socket()),
            Traced::Cri => cmd.arg("cri").arg("--socket").arg(lab.cri_socket()),
            // No socket flags: the runtime and its sockets are found the way
            // they are on a node (the lab's containerd is the only runtime
            // on a test machine; the replay below uses the lab's paths, so
            // a wrong pick fails the live == replay check).
            // Metrics on a port the kernel picks (printed on stderr).
            // The observations as `record` writes them, for the replay check;
            // not redacted, since the check wants the live output back byte
            // for byte and containerd's own errors can hold `name="value"`
            // text (`plugin type="loopback" failed`, hung-teardown-hook).
            // Redaction is checked on the lab recordings in record_file.rs.
            Traced::Both => cmd
                .args([
                    "trace",
                    "--metrics-addr",
                    "127.0.0.1:0",
                    "--no-redact",
                    "--observations",
                ])
                .arg(Self::observations(out)),
        };
        let child = cmd
            .args(["--format", "ndjson", "--record"])
            .arg(&rec)
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .stdin(Stdio::null())
            .spawn()
            .context("starting nri-trace")?;
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            let log = std::fs::read_to_string(&stderr).unwrap_or_default();
            if log.contains("nri-trace: ready") {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("nri-trace exited ({st}) before it was ready:\n{log}");
                }
            }
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("nri-trace not ready after 30 s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = c.try_wait()? {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = c.kill();
                bail!("nri-trace did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !st.success() {
            let mut log = String::new();
            let _ = std::fs::File::open(Self::paths(&self.out).2)?.read_to_string(&mut log);
            bail!("nri-trace exited with {st}:\n{log}");
        }
        Ok(())
    }
}

/// The metrics address nri-trace printed on its stderr, if any.
fn metrics_addr(out: &Path) -> Option<String> {
    let log = std::fs::read_to_string(TraceProc::paths(out).2).ok()?;
    let rest = log.split("metrics on http://").nth(1)?;
    Some(rest.split('/').next()?.to_string())
}

/// A plain HTTP/1.0 GET; the body.
pub fn http_get(addr: &str, path: &str) -> Result<String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    // One write: a server may answer as soon as it has the head.
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").context("no HTTP header end")?;
    anyhow::ensure!(head.starts_with("HTTP/1.0 200"), "{head}");
    Ok(body.to_string())
}

/// Run `scenario` with `nri-trace <what>` attached; returns its output
/// directory (under the test target dir, `<group>/<scenario>`), or `None`
/// when the test is skipped.
pub fn run_traced(group: &str, scenario: &str, what: Traced) -> Option<PathBuf> {
    if !guard(scenario) {
        return None;
    }
    let _lock = labctl::lock().expect("lab lock");
    let lab = Lab::from_env();
    lab.install().expect("lab install");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(scenario);
    let bins = Bins {
        driver: bin("cri-driver"),
        plugin: bin("nri-test-plugin"),
    };
    scenario::run_observed(
        scenario,
        lab,
        bins,
        &out,
        Some(Box::new(TraceProc::new(what))),
    )
    .unwrap_or_else(|e| panic!("scenario {scenario}: {e:#}"));
    Some(out)
}

/// The live run's stdout equals what its recording replays to.
pub fn assert_live_equals_replay(scenario: &str, out: &Path, replayed: Vec<u8>) {
    let live = std::fs::read_to_string(TraceProc::paths(out).0).unwrap();
    assert_eq!(
        live,
        String::from_utf8(replayed).unwrap(),
        "{scenario}: live output and replay of its recording differ"
    );
}
