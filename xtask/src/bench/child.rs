//! Child processes: their output lines collected, killed when dropped;
//! the idle listener the probe part attaches to, and `nri-trace debug
//! capture` started and stopped.

use std::{
    env, fs,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::{
    criterion::{Ctx, HELPER_CPU},
    json::json_number,
};

// ------------------------------------------------------ child processes

/// A child process whose output lines are collected. Dropping it kills it:
/// no probe stays attached when a step fails half-way.
pub(super) struct Proc {
    name: String,
    child: Child,
    /// Each line with when it was read from the pipe.
    lines: mpsc::Receiver<(Instant, String)>,
    pub(super) seen: Vec<String>,
    /// When each line of `seen` was read.
    seen_at: Vec<Instant>,
}

impl Proc {
    pub(super) fn spawn(name: &str, cmd: &mut Command) -> Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        let (tx, rx) = mpsc::channel();
        forward_lines(child.stdout.take().expect("piped"), tx.clone());
        forward_lines(child.stderr.take().expect("piped"), tx);
        Ok(Proc {
            name: name.into(),
            child,
            lines: rx,
            seen: Vec::new(),
            seen_at: Vec::new(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for a line containing `needle`; fail if the process ends first.
    pub(super) fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.wait_for_line(needle, |l| l.contains(needle), timeout)
            .map(|(_, l)| l)
    }

    /// Wait for a line that `hit` accepts (`what` names it in errors), and
    /// when it was read from the pipe; fail if the process ends first.
    pub(super) fn wait_for_line(
        &mut self,
        what: &str,
        hit: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<(Instant, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "{}: no line containing {what:?} within {timeout:?}{}",
                    self.name,
                    self.tail()
                );
            }
            match self.lines.recv_timeout(left) {
                Ok((at, l)) => {
                    let hit = hit(&l);
                    self.seen.push(l.clone());
                    self.seen_at.push(at);
                    if hit {
                        return Ok((at, l));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let st = self.child.wait()?;
                    bail!(
                        "{} exited ({st}) before printing {what:?}{}",
                        self.name,
                        self.tail()
                    );
                }
            }
        }
    }

    /// Wait for the process to end by itself, collecting its output.
    pub(super) fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "{} still running after {timeout:?}{}",
                    self.name,
                    self.tail()
                );
            }
            match self.lines.recv_timeout(left) {
                Ok((at, l)) => {
                    self.seen.push(l);
                    self.seen_at.push(at);
                }
                Err(RecvTimeoutError::Timeout) => {}
                // Both pipes closed: the process is ending.
                Err(RecvTimeoutError::Disconnected) => return Ok(self.child.wait()?),
            }
        }
    }

    /// Like `wait_exit`, and fail unless it exited with status 0.
    pub(super) fn wait_success(&mut self, timeout: Duration) -> Result<()> {
        let st = self.wait_exit(timeout)?;
        if !st.success() {
            bail!("{} failed ({st}){}", self.name, self.tail());
        }
        Ok(())
    }

    /// Fail if the process has already ended: a probe that died during a
    /// measurement makes that measurement one of "nothing attached".
    pub(super) fn check_alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            let _ = self.wait_exit(Duration::from_secs(1));
            bail!(
                "{} ended during the measurement ({st}){}",
                self.name,
                self.tail()
            );
        }
        Ok(())
    }

    /// SIGTERM (nri-trace prints its summary, bpftrace detaches), then wait;
    /// SIGKILL if it does not end within 20 s.
    pub(super) fn stop(&mut self) -> Result<ExitStatus> {
        if self.child.try_wait()?.is_none() {
            signal(self.pid(), "TERM");
        }
        match self.wait_exit(Duration::from_secs(20)) {
            Ok(st) => Ok(st),
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(e)
            }
        }
    }

    fn output(&self) -> String {
        self.seen.join("\n")
    }

    /// The first line seen that `hit` accepts, and when it was read.
    pub(super) fn seen_line(&self, hit: impl Fn(&str) -> bool) -> Option<(Instant, &str)> {
        let i = self.seen.iter().position(|l| hit(l))?;
        Some((self.seen_at[i], &self.seen[i]))
    }

    pub(super) fn tail(&self) -> String {
        let start = self.seen.len().saturating_sub(20);
        let lines = &self.seen[start..];
        if lines.is_empty() {
            String::new()
        } else {
            format!("; its last output:\n  {}", lines.join("\n  "))
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn forward_lines(r: impl Read + Send + 'static, tx: mpsc::Sender<(Instant, String)>) {
    thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send((Instant::now(), l)).is_err() {
                break;
            }
        }
    });
}

/// `kill -SIG PID` (xtask has no libc dependency).
pub(super) fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Wait this long after an attachment reports itself ready: bpftrace prints
/// "Attaching" just before it attaches.
pub(super) const SETTLE: Duration = Duration::from_millis(500);

/// A process that holds a listening unix socket and does nothing: the
/// target of the attachments in the probe part, so that the benchmark
/// process is NOT the one they track.
pub(super) fn idle_listener(work: &Path) -> Result<(Proc, PathBuf)> {
    let sock = work.join("idle.sock");
    let _ = fs::remove_file(&sock);
    let script = "import socket,sys,time\n\
                  s=socket.socket(socket.AF_UNIX)\n\
                  s.bind(sys.argv[1]); s.listen()\n\
                  print('listening', flush=True)\n\
                  time.sleep(86400)";
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", HELPER_CPU, "python3", "-c", script])
        .arg(&sock);
    let mut p = Proc::spawn("idle listener (python3)", &mut cmd)?;
    p.wait_for("listening", Duration::from_secs(20))?;
    Ok((p, sock))
}

/// Start `nri-trace debug capture` on `sock` and wait until it is attached.
pub(super) fn start_capture(ctx: &Ctx, sock: &Path) -> Result<Proc> {
    let sock = sock.to_str().context("socket path is not UTF-8")?;
    let mut cmd = ctx.nri_trace_cmd(&["debug", "capture", "--socket", sock, "-o", "count"]);
    // Probe options to compare (e.g. "--ring-bytes 4194304"), by hand.
    if let Ok(extra) = env::var("NRI_TRACE_BENCH_CAPTURE_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    let mut p = Proc::spawn("nri-trace capture", &mut cmd)?;
    p.wait_for("nri-trace: capturing", Duration::from_secs(30))?;
    Ok(p)
}

/// The `--format count` summary of a stopped capture.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Summary {
    pub(super) connections: u64,
    pub(super) chunks: u64,
    pub(super) bytes: u64,
    pub(super) lost_records: u64,
    pub(super) lost_bytes: u64,
}

/// SIGTERM the capture and parse the summary line it prints.
pub(super) fn stop_capture(mut p: Proc) -> Result<Summary> {
    let st = p.stop()?;
    if !st.success() {
        bail!("nri-trace capture failed ({st}){}", p.tail());
    }
    let out = p.output();
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("\"chunks\":"))
        .with_context(|| format!("no count summary from nri-trace capture{}", p.tail()))?;
    let n = |key: &str| json_number(line, &[key]).map(|v| v as u64);
    Ok(Summary {
        connections: n("\"connections_opened\":").context("connections_opened")?,
        chunks: n("\"chunks\":").context("chunks")?,
        bytes: n("\"bytes\":").context("bytes")?,
        lost_records: n("\"lost_records\":").context("lost_records")?,
        lost_bytes: n("\"lost_bytes\":").unwrap_or(0),
    })
}
