//! Shared helpers of the root/eBPF integration tests: the skip-or-fail guard,
//! the traced helper process (`unix-peer`), event collection, and per
//! (connection, direction) stream reassembly.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{mpsc as std_mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use nri_trace::capture::{
    start_session, CaptureEvent, Chunk, ConnClose, ConnId, ConnOpen, Direction, EbpfBackend,
    EbpfOptions, ProgramSet, Session, SessionConfig, Syscall,
};
use tokio::task::JoinHandle;

/// The helper binary of this package.
pub(crate) const PEER_BIN: &str = env!("CARGO_BIN_EXE_unix-peer");

/// Generous bound for anything a test waits on.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

// ------------------------------------------------ guard

/// Why these tests cannot run here, if they cannot.
pub(crate) fn skip_reason() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some(format!(
            "not running as root (euid {}): loading eBPF programs and reading other \
             processes' /proc entries needs root",
            unsafe { libc::geteuid() }
        ));
    }
    if EbpfBackend::object().is_empty() {
        return Some(
            "no eBPF object is embedded in nri-trace: run `cargo xtask build` \
             (or set NRI_TRACE_EBPF_OBJ) and rebuild"
                .into(),
        );
    }
    None
}

/// True when the test may run. Otherwise it prints why and returns false,
/// except in CI (CI=true or CI=1), where these tests must run: it panics.
pub(crate) fn guard(test: &str) -> bool {
    skip_unless_ci(test, skip_reason())
}

/// [`guard`] for the tests that run the `nri-trace` binary itself.
pub(crate) fn guard_cli(test: &str) -> bool {
    let bin = nri_trace_tests::workspace_bin("nri-trace");
    let reason = skip_reason().or_else(|| {
        (!bin.exists()).then(|| {
            format!(
                "{} not built: run `cargo build --workspace` (or `cargo xtask test`)",
                bin.display()
            )
        })
    });
    skip_unless_ci(test, reason)
}

fn skip_unless_ci(test: &str, reason: Option<String>) -> bool {
    let Some(reason) = reason else {
        return true;
    };
    // "1" too, as `cargo xtask test` treats it.
    if matches!(std::env::var("CI").as_deref(), Ok("true" | "1")) {
        panic!("{test}: cannot run the root/eBPF tests in CI: {reason}");
    }
    eprintln!("skipping {test}: {reason}");
    false
}

pub(crate) use nri_trace_tests::{fnv1a, pattern, pattern_byte, FNV_OFFSET};

// ------------------------------------------------ scripts

/// One data step of a unix-peer script, located in its direction's stream.
#[derive(Clone, Debug)]
pub(crate) struct StepRange {
    pub index: usize,
    pub syscall: Syscall,
    pub direction: Direction,
    /// Byte range of the step in the traced process's stream of `direction`.
    pub start: usize,
    pub end: usize,
}

fn syscall_of(name: &str) -> Syscall {
    match name {
        "read" => Syscall::Read,
        "readv" => Syscall::Readv,
        "recvfrom" => Syscall::Recvfrom,
        "recvmsg" => Syscall::Recvmsg,
        "write" => Syscall::Write,
        "writev" => Syscall::Writev,
        "sendto" => Syscall::Sendto,
        "sendmsg" => Syscall::Sendmsg,
        _ => panic!("unknown script syscall {name:?}"),
    }
}

/// What a unix-peer connection running `script` does.
#[derive(Clone, Debug)]
pub(crate) struct Expected {
    pub steps: Vec<StepRange>,
    /// Bytes the server reads (the client must send exactly these).
    pub in_len: usize,
    /// Bytes the server writes, given what the client sent.
    pub out: Vec<u8>,
}

/// The data steps of a unix-peer script (`wait`s skipped, repeats expanded).
pub(crate) fn parse_script(script: &str) -> Vec<(Syscall, usize)> {
    let mut steps = Vec::new();
    for item in script.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if item == "wait" {
            continue;
        }
        let (op, n) = item.split_once(':').expect("OP:N");
        let (n, repeat) = match n.split_once('*') {
            Some((n, r)) => (n, r.parse::<usize>().expect("repeat count")),
            None => (n, 1),
        };
        let n: usize = n.parse().expect("byte count");
        steps.extend(std::iter::repeat_n((syscall_of(op), n), repeat));
    }
    steps
}

/// Bytes a connection running `script` reads from its client.
pub(crate) fn script_in_len(script: &str) -> usize {
    parse_script(script)
        .iter()
        .filter(|(s, _)| s.is_inbound())
        .map(|(_, n)| n)
        .sum()
}

/// Replays `script` as the server will, given the bytes the client sends
/// (`client_sends`, exactly as long as the script reads).
pub(crate) fn expect_script(script: &str, client_sends: &[u8]) -> Expected {
    let mut steps = Vec::new();
    let (mut in_off, mut out) = (0usize, Vec::new());
    let mut key = FNV_OFFSET;
    for (index, (syscall, n)) in parse_script(script).into_iter().enumerate() {
        if syscall.is_inbound() {
            key = fnv1a(key, &client_sends[in_off..in_off + n]);
            steps.push(StepRange {
                index,
                syscall,
                direction: Direction::In,
                start: in_off,
                end: in_off + n,
            });
            in_off += n;
        } else {
            let base = out.len() as u64;
            out.extend((0..n as u64).map(|j| pattern_byte(key, base + j)));
            steps.push(StepRange {
                index,
                syscall,
                direction: Direction::Out,
                start: base as usize,
                end: out.len(),
            });
        }
    }
    assert_eq!(
        in_off,
        client_sends.len(),
        "the client must send exactly what the script reads"
    );
    Expected {
        steps,
        in_len: in_off,
        out,
    }
}

/// Check that every chunk of (conn, dir) lies inside one script step and
/// carries that step's syscall; returns the chunks per step index.
#[track_caller]
pub(crate) fn assert_chunks_follow_steps(
    what: &str,
    evs: &[CaptureEvent],
    conn: ConnId,
    dir: Direction,
    steps: &[StepRange],
) -> std::collections::BTreeMap<usize, usize> {
    let mut per_step = std::collections::BTreeMap::new();
    let mut pos = 0usize;
    for c in chunks(evs, conn, dir) {
        let end = pos + c.bytes.len();
        let step = steps
            .iter()
            .filter(|s| s.direction == dir)
            .find(|s| s.start <= pos && end <= s.end)
            .unwrap_or_else(|| {
                panic!(
                    "{what}: {dir:?} chunk at bytes {pos}..{end} ({}) spans script steps",
                    c.syscall.name()
                )
            });
        assert_eq!(
            c.syscall,
            step.syscall,
            "{what}: {dir:?} bytes {pos}..{end} came from step {} ({}), captured as {}",
            step.index,
            step.syscall.name(),
            c.syscall.name()
        );
        *per_step.entry(step.index).or_insert(0) += 1;
        pos = end;
    }
    per_step
}

// ------------------------------------------------ the traced peer

/// A running unix-peer. Killed and reaped on drop.
pub(crate) struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std_mpsc::Receiver<String>,
    pub name: String,
}

impl Peer {
    pub(crate) fn spawn(name: &str, args: &[&str]) -> Peer {
        let mut child = Command::new(PEER_BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {PEER_BIN}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std_mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            name: name.to_string(),
        }
    }

    /// A serving peer: started, and listening on `path` (`ready` seen).
    pub(crate) fn serve(name: &str, path: &Path, script: &str, extra: &[&str]) -> Peer {
        let _ = std::fs::remove_file(path);
        let mut args = vec!["serve", path.to_str().expect("utf-8 path"), script];
        args.extend_from_slice(extra);
        let peer = Peer::spawn(name, &args);
        peer.expect_line("ready");
        peer
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line, which must start with `prefix`.
    pub(crate) fn expect_line(&self, prefix: &str) -> String {
        let r = tokio::task::block_in_place(|| self.lines.recv_timeout(TIMEOUT));
        match r {
            Ok(l) if l.starts_with(prefix) => l,
            Ok(l) => panic!("{}: unix-peer said {l:?}, expected {prefix:?}", self.name),
            Err(e) => panic!(
                "{}: no {prefix:?} line from unix-peer ({e}); it may have failed, see stderr",
                self.name
            ),
        }
    }

    /// SIGKILL it (and reap it).
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("kill unix-peer");
        self.child.wait().expect("reap unix-peer");
    }

    pub(crate) fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .expect("write to unix-peer stdin");
    }

    /// Wait for the peer to exit (it must succeed).
    pub(crate) async fn wait_success(&mut self) {
        let what = format!("{}: unix-peer (pid {})", self.name, self.pid());
        let status = wait_exit(&mut self.child, &what).await;
        assert!(
            status.success(),
            "{}: unix-peer failed: {status}",
            self.name
        );
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        kill_if_running(&mut self.child);
    }
}

/// Poll `done` every 5 ms until it holds; after `timeout`, panic with
/// `fail()`.
pub(crate) async fn poll_until(
    timeout: Duration,
    mut done: impl FnMut() -> bool,
    fail: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{}", fail());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Wait for `child` (`what`, for the panic) to exit, at most TIMEOUT.
async fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let mut status = None;
    poll_until(
        TIMEOUT,
        || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        },
        || format!("{what} did not exit within {TIMEOUT:?}"),
    )
    .await;
    status.expect("exited")
}

/// Kill and reap `child` if it still runs (for drops: errors ignored).
fn kill_if_running(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A per-test socket path under the temp dir (unique per test and process).
pub(crate) fn socket_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nri-trace-it-{test}-{}.sock", std::process::id()))
}

/// Removes the socket file when the test ends, however it ends.
pub(crate) struct RmOnDrop(pub PathBuf);
impl Drop for RmOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ------------------------------------------------ capture

pub(crate) fn ebpf_options() -> EbpfOptions {
    EbpfOptions {
        programs: ProgramSet::Capture,
        ..EbpfOptions::default()
    }
}

pub(crate) fn session_config() -> SessionConfig {
    SessionConfig {
        sockets: vec![],
        pids: vec![],
        connect_paths: vec![],
        drain_interval: Duration::from_millis(2),
        channel: 65536,
        queue_bytes: nri_trace::capture::DEFAULT_QUEUE_BYTES,
        peer_env: vec![],
        existing_socketpair_env: None,
        follow_peer_ends: false,
        no_follow_sockets: vec![],
        sandbox: false,
        ignore_peer_pids: vec![],
        cri_state: None,
        wait_for_listeners: false,
    }
}

/// A unix-peer serving `script` (with `extra` arguments) on a fresh socket
/// for test `name`, and a session config that captures that socket. `rm`
/// removes the socket file when the test ends; fields drop in order, so
/// the peer is gone before it.
pub(crate) struct Served {
    pub path: PathBuf,
    pub peer: Peer,
    pub cfg: SessionConfig,
    pub rm: RmOnDrop,
}

pub(crate) fn serve_captured(name: &str, script: &str, extra: &[&str]) -> Served {
    let path = socket_path(name);
    let rm = RmOnDrop(path.clone());
    let peer = Peer::serve(name, &path, script, extra);
    let mut cfg = session_config();
    cfg.sockets = vec![path.clone()];
    Served {
        path,
        peer,
        cfg,
        rm,
    }
}

/// A capture session whose events are collected in the background.
pub(crate) struct Capture {
    session: Session,
    events: Arc<Mutex<Vec<CaptureEvent>>>,
    task: Option<JoinHandle<()>>,
    name: String,
}

impl Capture {
    pub(crate) async fn start(name: &str, cfg: SessionConfig, opts: EbpfOptions) -> Capture {
        let backend = EbpfBackend::load(&opts)
            .unwrap_or_else(|e| panic!("{name}: loading the eBPF backend: {e}"));
        let mut session = start_session(cfg, Box::new(backend))
            .await
            .unwrap_or_else(|e| panic!("{name}: starting the session: {e}"));
        let mut rx = std::mem::replace(&mut session.events, tokio::sync::mpsc::channel(1).1);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let task = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                sink.lock().unwrap().push(ev);
            }
        });
        Capture {
            session,
            events,
            task: Some(task),
            name: name.to_string(),
        }
    }

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    pub(crate) fn snapshot(&self) -> Vec<CaptureEvent> {
        self.events.lock().unwrap().clone()
    }

    /// A handle for blocking client threads to look at the events so far.
    pub(crate) fn shared(&self) -> Arc<Mutex<Vec<CaptureEvent>>> {
        Arc::clone(&self.events)
    }

    /// Wait until `pred` holds for the events so far; fail after `timeout`.
    pub(crate) async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[CaptureEvent]) -> bool,
    ) {
        poll_until(
            timeout,
            || pred(&self.events.lock().unwrap()),
            || {
                format!(
                    "{}: timed out after {timeout:?} waiting for {what}; events so far:\n{}",
                    self.name,
                    describe(&self.snapshot())
                )
            },
        )
        .await;
    }

    /// Stop the session (it flushes and closes the stream) and return every
    /// event it produced.
    pub(crate) async fn finish(mut self) -> Vec<CaptureEvent> {
        tokio::time::timeout(TIMEOUT, self.session.stop())
            .await
            .unwrap_or_else(|_| panic!("{}: the session did not stop", self.name));
        let task = self.task.take().expect("collector");
        tokio::time::timeout(TIMEOUT, task)
            .await
            .unwrap_or_else(|_| panic!("{}: the event stream did not end", self.name))
            .expect("collector task");
        let evs = self.events.lock().unwrap().clone();
        if std::env::var_os("NRI_TRACE_TEST_EVENTS").is_some() {
            eprintln!("{}: events:\n{}", self.name, describe(&evs));
        }
        evs
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.session.stop_signal();
    }
}

// ------------------------------------------------ the capture command

/// `nri-trace debug capture ARGS` running as its own process, its stdout and
/// stderr going to files in the temp dir (removed on drop).
pub(crate) struct CaptureCmd {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    name: String,
}

impl CaptureCmd {
    /// Start it and wait for its `nri-trace: ready` line on stderr.
    pub(crate) async fn start(name: &str, args: &[&str]) -> CaptureCmd {
        let bin = nri_trace_tests::workspace_bin("nri-trace");
        let file = |ext: &str| {
            std::env::temp_dir().join(format!("nri-trace-it-{name}-{}.{ext}", std::process::id()))
        };
        let (stdout, stderr) = (file("stdout"), file("stderr"));
        let create = |p: &Path| {
            std::fs::File::create(p).unwrap_or_else(|e| panic!("{name}: {}: {e}", p.display()))
        };
        let child = Command::new(&bin)
            .args(["debug", "capture"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(create(&stdout))
            .stderr(create(&stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {}: {e}", bin.display()));
        let mut cmd = CaptureCmd {
            child,
            stdout,
            stderr,
            name: name.to_string(),
        };
        let (child, err) = (&mut cmd.child, &cmd.stderr);
        poll_until(
            TIMEOUT,
            || {
                if let Some(st) = child.try_wait().expect("try_wait") {
                    panic!(
                        "{name}: nri-trace debug capture exited ({st}) before it was ready:\n{}",
                        read_or_empty(err)
                    );
                }
                read_or_empty(err).contains("nri-trace: ready")
            },
            || {
                format!(
                    "{name}: nri-trace debug capture not ready after {TIMEOUT:?}:\n{}",
                    read_or_empty(err)
                )
            },
        )
        .await;
        cmd
    }

    pub(crate) fn stderr_text(&self) -> String {
        read_or_empty(&self.stderr)
    }

    /// What it printed so far, up to its last complete line.
    pub(crate) fn stdout_lines(&self) -> String {
        let mut out = read_or_empty(&self.stdout);
        out.truncate(out.rfind('\n').map_or(0, |i| i + 1));
        out
    }

    /// Wait until `pred` holds for its stdout so far; fail after TIMEOUT.
    pub(crate) async fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) {
        poll_until(
            TIMEOUT,
            || pred(&self.stdout_lines()),
            || {
                format!(
                    "{}: timed out waiting for {what} in nri-trace debug capture's output:\n{}\nstderr:\n{}",
                    self.name,
                    self.stdout_lines(),
                    self.stderr_text()
                )
            },
        )
        .await;
    }

    /// SIGTERM it, as an operator would, and return its whole stdout once it
    /// has exited successfully.
    pub(crate) async fn stop(mut self) -> String {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let what = format!("{}: nri-trace debug capture, sent SIGTERM,", self.name);
        let status = wait_exit(&mut self.child, &what).await;
        assert!(
            status.success(),
            "{}: nri-trace debug capture failed ({status}):\n{}",
            self.name,
            self.stderr_text()
        );
        std::fs::read_to_string(&self.stdout).expect("capture stdout")
    }
}

/// A file's text so far ("" while it does not exist yet).
fn read_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Drop for CaptureCmd {
    fn drop(&mut self) {
        kill_if_running(&mut self.child);
        let _ = std::fs::remove_file(&self.stdout);
        let _ = std::fs::remove_file(&self.stderr);
    }
}

/// Run blocking client code off the async workers, with a deadline.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    match tokio::time::timeout(TIMEOUT, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
        Err(tokio::time::error::Elapsed { .. }) => {
            panic!("{what}: client did not finish within {TIMEOUT:?}")
        }
    }
}

// ------------------------------------------------ event views

pub(crate) fn opens(evs: &[CaptureEvent]) -> Vec<&ConnOpen> {
    evs.iter()
        .filter_map(|e| match e {
            CaptureEvent::Open(o) => Some(o),
            _ => None,
        })
        .collect()
}

pub(crate) fn closes(evs: &[CaptureEvent]) -> Vec<&ConnClose> {
    evs.iter()
        .filter_map(|e| match e {
            CaptureEvent::Close(c) => Some(c),
            _ => None,
        })
        .collect()
}

pub(crate) fn all_chunks(evs: &[CaptureEvent]) -> Vec<&Chunk> {
    evs.iter()
        .filter_map(|e| match e {
            CaptureEvent::Chunk(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Chunks of one connection and direction, in capture order.
pub(crate) fn chunks(evs: &[CaptureEvent], conn: ConnId, dir: Direction) -> Vec<&Chunk> {
    all_chunks(evs)
        .into_iter()
        .filter(|c| c.conn == conn && c.direction == dir)
        .collect()
}

/// The byte stream of one connection and direction (its chunks concatenated).
pub(crate) fn stream(evs: &[CaptureEvent], conn: ConnId, dir: Direction) -> Vec<u8> {
    chunks(evs, conn, dir)
        .iter()
        .flat_map(|c| c.bytes.iter().copied())
        .collect()
}

/// One line per event, payloads summarized, for failure messages.
pub(crate) fn describe(evs: &[CaptureEvent]) -> String {
    let mut s = String::new();
    for e in evs {
        let line = match e {
            CaptureEvent::Chunk(c) => format!(
                "chunk {} {:?} {} tid={} len={} syscall_len={} truncated={} gap_before={} head={}",
                c.conn,
                c.direction,
                c.syscall.name(),
                c.tid,
                c.bytes.len(),
                c.syscall_len,
                c.truncated,
                c.gap_before,
                nri_trace::capture::hex(&c.bytes[..c.bytes.len().min(8)])
            ),
            other => format!("{other:?}"),
        };
        s.push_str("  ");
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// Index of the first differing byte (or the shorter length), for messages.
pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or_else(|| a.len().min(b.len())),
    )
}

/// Assert two byte streams are equal, with a readable message.
#[track_caller]
pub(crate) fn assert_bytes_eq(what: &str, got: &[u8], want: &[u8]) {
    if let Some(i) = first_difference(got, want) {
        panic!(
            "{what}: captured {} bytes, expected {}; first difference at byte {i}",
            got.len(),
            want.len()
        );
    }
}

// ------------------------------------------------ client side

/// Connect to `path` as the (untraced) client, with I/O timeouts.
pub(crate) fn connect(path: &Path) -> std::os::unix::net::UnixStream {
    let s = std::os::unix::net::UnixStream::connect(path)
        .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.set_write_timeout(Some(TIMEOUT)).unwrap();
    s
}

/// Send `send` (from a second thread) while reading exactly `recv_len`
/// bytes; returns what was read. Concurrent, so that neither side can
/// block the other whatever the script's order.
pub(crate) fn exchange(
    s: &std::os::unix::net::UnixStream,
    send: Vec<u8>,
    recv_len: usize,
) -> Vec<u8> {
    use std::io::Read;
    let mut w = s.try_clone().expect("clone client stream");
    let writer = std::thread::spawn(move || w.write_all(&send));
    let mut got = vec![0u8; recv_len];
    (&*s).read_exact(&mut got).expect("client read");
    writer.join().expect("writer thread").expect("client write");
    got
}

/// `exchange` on a blocking thread, then the end of stream: the whole
/// conversation of a client whose server closes after its script.
pub(crate) async fn exchange_to_end(
    what: &str,
    client: std::os::unix::net::UnixStream,
    send: Vec<u8>,
    recv_len: usize,
) -> Vec<u8> {
    blocking(what, move || {
        let got = exchange(&client, send, recv_len);
        expect_eof(&client);
        got
    })
    .await
}

/// The server closed the connection: the next read returns end of stream.
pub(crate) fn expect_eof(s: &std::os::unix::net::UnixStream) {
    use std::io::Read;
    let mut b = [0u8; 1];
    let n = (&*s).read(&mut b).expect("client read at end");
    assert_eq!(n, 0, "the server sent more bytes than its script says");
}
