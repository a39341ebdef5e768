//! `cargo xtask bench`: what nri-trace's probes cost, measured around real
//! attachments, printed as markdown tables for docs/benchmarks.md.
//!
//! Eleven parts (see docs/benchmarks.md for how to read them):
//! - probe: syscalls of a process nri-trace does NOT track, with nothing,
//!   the real capture, the design floors or a bpftrace pair attached.
//! - traced: write(2) of the process nri-trace captures, without and with
//!   the capture.
//! - paced: write(2) of the captured process at 10,000 writes/s, without
//!   and with the capture: the per-write cost when the capture keeps up
//!   and its reader is mostly idle.
//! - throughput: how fast a captured writer can go before records are lost.
//! - mix: the system-wide syscall mix, and what each design would cost over
//!   it (with the break-even share of probed syscalls, from the probe part).
//! - nri-decode: decode throughput of a recorded NRI stream, the whole
//!   pipeline against its framing layers and its protobuf decoding alone
//!   (`nri-trace/benches/nri_decode.rs`; no probes, no root needed: run
//!   alone, it skips the eBPF build and the tool checks).
//! - cri-decode: the same for recorded CRI streams (HTTP/2, HPACK, gRPC),
//!   with the cost of method inference beside it
//!   (`nri-trace/benches/cri_decode.rs`; no probes, no root needed either).
//! - trace-engine: the pipeline (`Pipeline`: the decoders and the
//!   `TraceEngine`, folding into a `PodModel`) over a long recording
//!   (events/s, pod lifecycles/s), and its memory after 10,000 pod
//!   lifecycles against the 100 MiB target
//!   (`nri-trace/benches/trace_engine.rs`; no probes, no root needed).
//! - tui-frame: the TUI's frame time per view at 1,002 pods, and a second
//!   of live load (100 records, 4 frames)
//!   (`nri-trace/benches/tui_frame.rs`; no probes, no root needed).
//! - nri-rate: nri-trace (`debug nri -o json`) tracing a ttrpc NRI peer
//!   at 10,000 calls/s and a ramp above it: calls sent and decoded, lost
//!   records, nri-trace's CPU per call (issue 23 item 4; xtask/src/
//!   nri_rate.rs).
//! - named-span: from the start of `nri-trace watch` to the first
//!   StopPodSandbox span that names a pod made before it, on a fake
//!   runtime holding 1,000 pods (`lab/src/bin/fake-cri.rs`), with and
//!   without the CRI state query (issue 20).
//!
//! Every probe measurement runs the criterion benchmark `nri-trace/benches/
//! syscall_cost.rs` (built once) pinned to one CPU; everything attached runs
//! on the other CPU so that its own work does not land in the measurement.
//! States are interleaved over rounds and medians over rounds are reported,
//! so slow drift of the VM spreads over all states instead of biasing one.

use std::{
    env, fs,
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Rounds over all states (interleaved); medians over rounds are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Rounds of the paced part. A 3 s paced round's added cost moves by
    /// about 0.2 us (standard deviation) from round to round on this VM,
    /// several times the flat-out loop's spread, so its median needs more
    /// rounds than the other parts (docs/benchmarks.md).
    #[arg(long, default_value_t = 9)]
    paced_rounds: usize,
    /// Seconds of system-wide syscall counting for the mix.
    #[arg(long, default_value_t = 10)]
    mix_seconds: u64,
    /// Shell command to run while the syscall mix is counted (a workload).
    #[arg(long, value_name = "CMD")]
    mix_while: Option<String>,
    /// Seconds each throughput writer runs.
    #[arg(long, default_value_t = 3.0)]
    throughput_seconds: f64,
    /// Bisection steps when searching the highest rate without loss.
    #[arg(long, default_value_t = 6)]
    loss_steps: usize,
    /// Parts to run (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "probe,traced,paced,throughput,mix,nri-decode,cri-decode,trace-engine,tui-frame,named-span,nri-rate"
    )]
    only: Vec<Part>,
    /// Seconds of paced NRI calls per rate in the nri-rate part.
    #[arg(long, default_value_t = 10.0)]
    rate_seconds: f64,
    /// Pod lifecycles the NRI peer keeps in flight (nri-rate part).
    #[arg(long, default_value_t = 16)]
    rate_in_flight: usize,
    /// Rates (calls/s) tried after 10,000 in the nri-rate part, ascending,
    /// until records are lost or the peer cannot keep up.
    #[arg(long, value_delimiter = ',', default_value = "20000,25000,30000,40000")]
    rates: Vec<f64>,
    /// Starts of `nri-trace watch` per mode in the named-span part.
    #[arg(long, default_value_t = 5)]
    span_rounds: usize,
    /// Very short criterion runs: checks the harness, the numbers are noise.
    #[arg(long)]
    quick: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Part {
    Probe,
    Traced,
    Paced,
    Throughput,
    Mix,
    NriDecode,
    CriDecode,
    TraceEngine,
    TuiFrame,
    NamedSpan,
    NriRate,
}

impl Part {
    /// Parts that attach probes around the criterion loops: they need
    /// root, the tools and the eBPF build. named-span runs `nri-trace
    /// watch` itself (root, and the build it makes) and none of the tools.
    fn attaches_probes(self) -> bool {
        !matches!(
            self,
            Part::NriDecode
                | Part::CriDecode
                | Part::TraceEngine
                | Part::TuiFrame
                | Part::NamedSpan
                | Part::NriRate
        )
    }
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    let started = Instant::now();
    // Everything but the decode and engine parts attaches probes: only then
    // are root, the tools and the eBPF build needed.
    let ctx = if a.only.iter().any(|p| p.attaches_probes()) {
        Some(Ctx::prepare(a.quick)?)
    } else {
        None
    };
    let mut report = vec![header_section()];
    let probe = match &ctx {
        Some(ctx) if a.only.contains(&Part::Probe) => {
            let p = probe_cost(ctx, a.rounds)?;
            report.push(probe_section(&p));
            Some(p)
        }
        _ => None,
    };
    let traced = match &ctx {
        Some(ctx) if a.only.contains(&Part::Traced) => {
            let t = traced_cost(ctx, a.rounds)?;
            report.push(traced_section(&t));
            Some(t)
        }
        _ => None,
    };
    let paced = match &ctx {
        Some(ctx) if a.only.contains(&Part::Paced) => {
            let p = paced_cost(ctx, a.paced_rounds, a.throughput_seconds)?;
            report.push(paced_section(&p, a.throughput_seconds));
            Some(p)
        }
        _ => None,
    };
    if let Some(ctx) = ctx.as_ref().filter(|_| a.only.contains(&Part::Throughput)) {
        let t = throughput(ctx, a.throughput_seconds, a.loss_steps)?;
        report.push(throughput_section(&t, a.throughput_seconds));
    }
    if let Some(p) = &probe {
        report.push(design_section(p));
    }
    if a.only.contains(&Part::Mix) {
        let mix = syscall_mix(a.mix_seconds, a.mix_while.as_deref())?;
        report.push(mix_section(&mix, probe.as_ref(), a.mix_while.as_deref()));
    }
    if a.only.contains(&Part::NamedSpan) {
        report.push(named_span_section(&named_span(a.span_rounds)?));
    }
    if a.only.contains(&Part::NriRate) {
        let r = crate::nri_rate::nri_rate(a.rate_seconds, a.rate_in_flight, &a.rates)?;
        report.push(crate::nri_rate::nri_rate_section(&r));
    }
    // Last: they need no probe, and nothing is attached any more.
    let decode = if a.only.contains(&Part::NriDecode) {
        let d = nri_decode(a.quick)?;
        report.push(nri_decode_section(&d));
        Some(d)
    } else {
        None
    };
    if a.only.contains(&Part::CriDecode) {
        report.push(cri_decode_section(&cri_decode(a.quick)?));
    }
    let engine = if a.only.contains(&Part::TraceEngine) {
        let e = trace_engine(a.quick)?;
        report.push(trace_engine_section(&e));
        Some(e)
    } else {
        None
    };
    if a.only.contains(&Part::TuiFrame) {
        report.push(tui_frame_section(&tui_frame(a.quick)?));
    }
    // Only parts with a target (cri-decode has none) make rows.
    if probe.is_some()
        || traced.is_some()
        || paced.is_some()
        || decode.is_some()
        || engine.is_some()
    {
        report.push(targets_section(
            probe.as_ref(),
            traced.as_ref(),
            paced.as_ref(),
            decode.as_ref(),
            engine.as_ref(),
        ));
    }
    report.push(format!("Load average at the end: {}\n", loadavg()));
    let text = report.join("\n");
    let work = work_dir()?;
    let out = work.join("report.md");
    fs::write(&out, &text)?;
    println!("{text}");
    eprintln!(
        "bench: done in {:.0} s; report also in {}",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

// ------------------------------------------------------------ setting up

/// CPU the measured process is pinned to, and CPU for everything else.
const BENCH_CPU: &str = "1";
const HELPER_CPU: &str = "0";

struct Ctx {
    nri_trace: PathBuf,
    bench_exe: PathBuf,
    /// Sockets, ready files and the report.
    work: PathBuf,
    /// Where criterion writes its estimates (CRITERION_HOME).
    criterion_home: PathBuf,
    quick: bool,
}

impl Ctx {
    fn prepare(quick: bool) -> Result<Ctx> {
        if thread::available_parallelism().map_or(1, std::num::NonZero::get) < 2 {
            bail!("the benchmarks pin the measured process and the probes to two different CPUs: this machine has one");
        }
        for tool in ["taskset", "bpftrace", "python3"] {
            which(tool)?;
        }
        let root = crate::workspace_root();
        let nri_trace = crate::build(true)?;
        let bench_exe = build_bench_exe("syscall_cost")?;
        Ok(Ctx {
            nri_trace,
            bench_exe,
            work: work_dir()?,
            criterion_home: root.join("target/criterion"),
            quick,
        })
    }

    /// The bench executable pinned to the measurement CPU, with criterion's
    /// flags.
    fn bench_cmd(&self) -> Command {
        let mut c = pinned(BENCH_CPU, &self.bench_exe);
        // Without --bench, criterion runs each benchmark once as a test.
        c.arg("--bench").env("CRITERION_HOME", &self.criterion_home);
        if self.quick {
            c.args(QUICK_ARGS);
        }
        c
    }

    /// `nri-trace ARGS` on the helper CPU.
    fn nri_trace_cmd(&self, args: &[&str]) -> Command {
        let mut c = pinned(HELPER_CPU, &self.nri_trace);
        c.args(args);
        c
    }

    /// criterion's median for benchmark `id` (e.g. "untraced/getppid"), in
    /// ns per iteration.
    fn median_ns(&self, id: &str) -> Result<f64> {
        read_median_ns(&self.estimates(id))
    }

    fn estimates(&self, id: &str) -> PathBuf {
        estimates_path(&self.criterion_home, id)
    }

    /// Remove the estimates of `ids`, so that a run that fails to write them
    /// cannot be read as a result of the previous run.
    fn forget(&self, ids: &[&str]) {
        for id in ids {
            let _ = fs::remove_file(self.estimates(id));
        }
    }
}

/// criterion's flags for `--quick`.
const QUICK_ARGS: [&str; 6] = [
    "--warm-up-time",
    "0.2",
    "--measurement-time",
    "0.5",
    "--sample-size",
    "10",
];

/// Sockets, ready files and the report.
pub(crate) fn work_dir() -> Result<PathBuf> {
    let work = crate::workspace_root().join("target/nri-trace-bench");
    fs::create_dir_all(&work)?;
    Ok(work)
}

/// Where criterion writes the estimates of benchmark `id`.
fn estimates_path(criterion_home: &Path, id: &str) -> PathBuf {
    criterion_home.join(id).join("new/estimates.json")
}

/// The median point estimate (ns per iteration) in an estimates.json.
fn read_median_ns(p: &Path) -> Result<f64> {
    let s = fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    json_number(&s, &["\"median\":", "\"point_estimate\":"])
        .with_context(|| format!("no median point estimate in {}", p.display()))
}

fn pinned(cpu: &str, program: &Path) -> Command {
    let mut c = Command::new("taskset");
    c.args(["-c", cpu]).arg(program);
    c
}

fn which(tool: &str) -> Result<()> {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        bail!("`{tool}` is not installed; the benchmarks need it");
    }
    Ok(())
}

/// Build the criterion executable of nri-trace's bench `name` once and
/// return its path (cargo prints it in its JSON messages).
fn build_bench_exe(name: &str) -> Result<PathBuf> {
    let mut cmd = crate::cargo();
    cmd.args(["bench", "--no-run", "-p", "nri-trace", "--bench", name])
        .arg("--message-format=json")
        // Same as `build`, so the library is not rebuilt for another object.
        .env("NRI_TRACE_EBPF_OBJ", crate::ebpf_object())
        .stderr(Stdio::inherit());
    let out = cmd.output().context("running cargo bench --no-run")?;
    if !out.status.success() {
        bail!("cargo bench --no-run failed: {}", out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter(|l| {
            l.contains("\"kind\":[\"bench\"]") && l.contains(&format!("\"name\":\"{name}\""))
        })
        .find_map(|l| json_string(l, "\"executable\":"))
        .map(PathBuf::from)
        .with_context(|| format!("cargo did not report the {name} executable"))
}

// ------------------------------------------------------ child processes

/// A child process whose output lines are collected. Dropping it kills it:
/// no probe stays attached when a step fails half-way.
struct Proc {
    name: String,
    child: Child,
    /// Each line with when it was read from the pipe.
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<String>,
    /// When each line of `seen` was read.
    seen_at: Vec<Instant>,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Result<Proc> {
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

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for a line containing `needle`; fail if the process ends first.
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.wait_for_line(needle, |l| l.contains(needle), timeout)
            .map(|(_, l)| l)
    }

    /// Wait for a line that `hit` accepts (`what` names it in errors), and
    /// when it was read from the pipe; fail if the process ends first.
    fn wait_for_line(
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
    fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
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
    fn wait_success(&mut self, timeout: Duration) -> Result<()> {
        let st = self.wait_exit(timeout)?;
        if !st.success() {
            bail!("{} failed ({st}){}", self.name, self.tail());
        }
        Ok(())
    }

    /// Fail if the process has already ended: a probe that died during a
    /// measurement makes that measurement one of "nothing attached".
    fn check_alive(&mut self) -> Result<()> {
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
    fn stop(&mut self) -> Result<ExitStatus> {
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
    fn seen_line(&self, hit: impl Fn(&str) -> bool) -> Option<(Instant, &str)> {
        let i = self.seen.iter().position(|l| hit(l))?;
        Some((self.seen_at[i], &self.seen[i]))
    }

    fn tail(&self) -> String {
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
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Wait this long after an attachment reports itself ready: bpftrace prints
/// "Attaching" just before it attaches.
const SETTLE: Duration = Duration::from_millis(500);

/// A process that holds a listening unix socket and does nothing: the
/// target of the attachments in the probe part, so that the benchmark
/// process is NOT the one they track.
fn idle_listener(work: &Path) -> Result<(Proc, PathBuf)> {
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
fn start_capture(ctx: &Ctx, sock: &Path) -> Result<Proc> {
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
struct Summary {
    connections: u64,
    chunks: u64,
    bytes: u64,
    lost_records: u64,
    lost_bytes: u64,
}

/// SIGTERM the capture and parse the summary line it prints.
fn stop_capture(mut p: Proc) -> Result<Summary> {
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

// --------------------------------------------- part a: untraced process

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    None,
    NriTrace,
    FloorClassic,
    FloorRaw,
    FloorRawFiltered,
    BpftracePair,
    /// The capture programs and the sandbox probes, with their maps set as
    /// a live session sets them (`nri-trace hold --programs capture
    /// --sandbox`: the idle listener tracked, its process tree watched).
    Sandbox,
    /// Empty programs on every tracepoint of the capture and the sandbox
    /// probes: the floor of `Sandbox`.
    FloorSandbox,
}

impl State {
    const ALL: [State; 8] = [
        State::None,
        State::NriTrace,
        State::FloorClassic,
        State::FloorRaw,
        State::FloorRawFiltered,
        State::BpftracePair,
        State::Sandbox,
        State::FloorSandbox,
    ];

    fn label(self) -> &'static str {
        match self {
            State::None => "none",
            State::NriTrace => "nri-trace capture (classic, exit only)",
            State::FloorClassic => "floor-classic (empty programs, same tracepoints)",
            State::FloorRaw => "floor-raw (empty raw sys_exit)",
            State::FloorRawFiltered => "floor-raw-filtered (raw sys_exit + tgid filter)",
            State::BpftracePair => "bpftrace sys_enter_write + sys_exit_write, pid filter",
            State::Sandbox => "nri-trace capture + sandbox probes",
            State::FloorSandbox => "floor-sandbox (empty programs, capture + sandbox tracepoints)",
        }
    }
}

const UNTRACED_WRITE: &str = "untraced/write_devnull_64";
const UNTRACED_GETPPID: &str = "untraced/getppid";
const UNTRACED_UNLINKAT: &str = "untraced/unlinkat_enoent";

/// One state's measurements, one entry per round (ns per call).
struct ProbeRow {
    state: State,
    write: Vec<f64>,
    getppid: Vec<f64>,
    /// unlinkat of a missing absolute path: probed by the sandbox probes.
    unlinkat: Vec<f64>,
    /// The exec probe's own run time per exec (`sandbox_exec` in
    /// `Sandbox`, its floor `floor_exec` in `FloorSandbox`; exec_cost.rs),
    /// empty in the other states.
    exec: Vec<f64>,
}

struct ProbeCost {
    rows: Vec<ProbeRow>,
}

impl ProbeCost {
    fn row(&self, s: State) -> &ProbeRow {
        self.rows
            .iter()
            .find(|r| r.state == s)
            .expect("every state")
    }
    /// (write, getppid) medians over rounds.
    /// Added (write, getppid) cost of `s` over `base`: the median over
    /// rounds of the per-round differences. Pairing within a round cancels
    /// the VM's drift between rounds, which is larger than some of the
    /// differences measured.
    fn diff(&self, s: State, base: State) -> (f64, f64) {
        let (a, b) = (self.row(s), self.row(base));
        (
            paired_diff(&a.write, &b.write),
            paired_diff(&a.getppid, &b.getppid),
        )
    }
    /// Added (write, getppid) cost over the `none` state.
    fn added(&self, s: State) -> (f64, f64) {
        self.diff(s, State::None)
    }
    /// Added unlinkat cost of `s` over `base` (paired per round).
    fn diff_unlinkat(&self, s: State, base: State) -> f64 {
        paired_diff(&self.row(s).unlinkat, &self.row(base).unlinkat)
    }
    /// The exec probe's own time per exec over its floor's (paired per
    /// round).
    fn exec_added(&self) -> f64 {
        paired_diff(
            &self.row(State::Sandbox).exec,
            &self.row(State::FloorSandbox).exec,
        )
    }
}

fn probe_cost(ctx: &Ctx, rounds: usize) -> Result<ProbeCost> {
    let (idle, sock) = idle_listener(&ctx.work)?;
    let idle_pid = idle.pid();
    let mut rows: Vec<ProbeRow> = State::ALL
        .iter()
        .map(|&state| ProbeRow {
            state,
            write: vec![],
            getppid: vec![],
            unlinkat: vec![],
            exec: vec![],
        })
        .collect();
    for round in 1..=rounds {
        for row in &mut rows {
            let (w, g, u, x) = measure_state(ctx, row.state, idle_pid, &sock)?;
            let exec = x
                .map(|x| format!("  exec probe {x:7.1} ns"))
                .unwrap_or_default();
            eprintln!(
                "bench: probe round {round}/{rounds}: {:<52} write {w:7.1} ns  getppid {g:7.1} ns  unlinkat {u:7.1} ns{exec}",
                row.state.label()
            );
            row.write.push(w);
            row.getppid.push(g);
            row.unlinkat.push(u);
            row.exec.extend(x);
        }
    }
    Ok(ProbeCost { rows })
}

/// Attach `state`, run the untraced benchmarks (and, where the exec probe
/// or its floor is attached, the exec loop), detach.
fn measure_state(
    ctx: &Ctx,
    state: State,
    idle_pid: u32,
    sock: &Path,
) -> Result<(f64, f64, f64, Option<f64>)> {
    let mut attached = attach(ctx, state, idle_pid, sock)?;
    if attached.is_some() {
        thread::sleep(SETTLE);
    }
    let exec_prog = match state {
        State::Sandbox => Some("sandbox_exec"),
        State::FloorSandbox => Some("floor_exec"),
        _ => None,
    };
    let result = run_untraced(ctx).and_then(|(w, g, u)| {
        let exec = match (exec_prog, attached.as_ref()) {
            (Some(name), Some(p)) => Some(crate::exec_cost::ns_per_exec(p.pid(), name)?),
            _ => None,
        };
        Ok((w, g, u, exec))
    });
    if let Some(p) = attached.as_mut() {
        p.check_alive()?;
    }
    match (state, attached) {
        (State::NriTrace, Some(p)) => {
            stop_capture(p)?;
        }
        (_, Some(mut p)) => {
            p.stop()?;
        }
        (_, None) => {}
    }
    result
}

/// Start what `state` attaches and wait until it says it is attached.
fn attach(ctx: &Ctx, state: State, pid: u32, sock: &Path) -> Result<Option<Proc>> {
    let pid_s = pid.to_string();
    let hold = |programs: &str, sandbox: bool| -> Result<Option<Proc>> {
        let mut args = vec![
            "hold",
            "--programs",
            programs,
            "--pid",
            &pid_s,
            "--duration",
            "3600",
        ];
        if sandbox {
            args.push("--sandbox");
        }
        let mut cmd = ctx.nri_trace_cmd(&args);
        let mut p = Proc::spawn(&format!("nri-trace hold {programs}"), &mut cmd)?;
        p.wait_for("ready", Duration::from_secs(30))?;
        Ok(Some(p))
    };
    match state {
        State::None => Ok(None),
        State::NriTrace => Ok(Some(start_capture(ctx, sock)?)),
        State::FloorClassic => hold("floor-classic", false),
        State::FloorRaw => hold("floor-raw", false),
        State::FloorRawFiltered => hold("floor-raw-filtered", false),
        State::Sandbox => hold("capture", true),
        State::FloorSandbox => hold("floor-classic", true),
        State::BpftracePair => {
            let prog = format!(
                "tracepoint:syscalls:sys_enter_write /pid == {pid}/ {{}} \
                 tracepoint:syscalls:sys_exit_write /pid == {pid}/ {{}}"
            );
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", HELPER_CPU, "bpftrace", "-e", &prog]);
            let mut p = Proc::spawn("bpftrace pair", &mut cmd)?;
            p.wait_for("Attaching", Duration::from_mins(1))?;
            Ok(Some(p))
        }
    }
}

/// Run the untraced group; (write, getppid, unlinkat) medians in ns.
fn run_untraced(ctx: &Ctx) -> Result<(f64, f64, f64)> {
    ctx.forget(&[UNTRACED_WRITE, UNTRACED_GETPPID, UNTRACED_UNLINKAT]);
    let mut p = Proc::spawn("bench (untraced)", &mut ctx.bench_cmd())?;
    p.wait_success(Duration::from_mins(5))?;
    Ok((
        ctx.median_ns(UNTRACED_WRITE)?,
        ctx.median_ns(UNTRACED_GETPPID)?,
        ctx.median_ns(UNTRACED_UNLINKAT)?,
    ))
}

// ------------------------------------------------ part b: traced process

/// Benchmarks of the traced group: (criterion id, unix write size). The
/// /dev/null write is the traced process on an fd nri-trace does not track.
const TRACED_CASES: [(&str, Option<u64>); 4] = [
    ("traced/write_devnull_64", None),
    ("traced/unix_write/64", Some(64)),
    ("traced/unix_write/4096", Some(4096)),
    ("traced/unix_write/65536", Some(65536)),
];

fn case_label(i: usize) -> String {
    match TRACED_CASES[i].1 {
        Some(size) => format!("unix write {size} B (captured fd)"),
        None => "write 64 B to /dev/null (untracked fd)".into(),
    }
}

struct TracedCost {
    /// Per case: per-round medians without and with the capture.
    baseline: Vec<Vec<f64>>,
    captured: Vec<Vec<f64>>,
    /// Per case: what each captured run's nri-trace saw.
    summaries: Vec<Vec<Summary>>,
    /// Per case: (writes on the connection, reads by the reader thread) in
    /// each captured run.
    counts: Vec<Vec<(u64, u64)>>,
}

impl TracedCost {
    /// Median over rounds of (captured - baseline), run back to back.
    fn added(&self, i: usize) -> f64 {
        paired_diff(&self.captured[i], &self.baseline[i])
    }

    /// Per-write and per-byte cost: a line through the unix writes' added
    /// costs (sizes whose captured runs lost records left out).
    fn fit(&self) -> SizeFit {
        let points = (0..TRACED_CASES.len()).filter_map(|i| {
            let size = TRACED_CASES[i].1?;
            let lost = self.summaries[i].iter().map(|s| s.lost_records).sum();
            Some((size, self.added(i), lost))
        });
        SizeFit::new(points)
    }
}

fn traced_cost(ctx: &Ctx, rounds: usize) -> Result<TracedCost> {
    let n = TRACED_CASES.len();
    let mut t = TracedCost {
        baseline: vec![vec![]; n],
        captured: vec![vec![]; n],
        summaries: vec![vec![]; n],
        counts: vec![vec![]; n],
    };
    for round in 1..=rounds {
        for i in 0..n {
            let (base, _, _) = run_traced(ctx, i, false)?;
            let (cap, summary, counts) = run_traced(ctx, i, true)?;
            let summary = summary.expect("captured run");
            eprintln!(
                "bench: traced round {round}/{rounds} {}: baseline {base:.1} ns, \
                 captured {cap:.1} ns (capture saw {summary:?})",
                case_label(i)
            );
            t.baseline[i].push(base);
            t.captured[i].push(cap);
            t.summaries[i].push(summary);
            t.counts[i].push(counts);
        }
    }
    Ok(t)
}

/// One run of traced benchmark `i`: this bench process listens, nri-trace
/// (if `captured`) attaches to it, then the connection is made and written.
/// One process and capture per benchmark, so that each capture's summary
/// (losses) belongs to one benchmark.
/// Returns (median ns, the capture's summary, the bench's (writes, reads)).
fn run_traced(ctx: &Ctx, i: usize, captured: bool) -> Result<(f64, Option<Summary>, (u64, u64))> {
    let (id, size) = TRACED_CASES[i];
    ctx.forget(&[id]);
    let mut cmd = ctx.bench_cmd();
    cmd.args(["--exact", id]);
    let (mut bench, capture) = start_traced_process(ctx, &mut cmd, "bench (traced)", captured)?;
    bench.wait_success(Duration::from_mins(10))?;
    let summary = capture.map(stop_capture).transpose()?;
    if let Some(s) = &summary {
        check_captured(s, size.is_some())?;
    }
    let counts = bench_counts(&bench.seen)
        .context("the traced bench did not report its writes and its reader's reads")?;
    Ok((ctx.median_ns(id)?, summary, counts))
}

/// "nri-trace-bench: writes=N reader reads=M" -> (N, M)
fn bench_counts(lines: &[String]) -> Option<(u64, u64)> {
    let l = lines
        .iter()
        .find(|l| l.contains("nri-trace-bench: writes="))?;
    let num = |key: &str| -> Option<u64> {
        let at = l.find(key)? + key.len();
        l[at..].split_whitespace().next()?.parse().ok()
    };
    Some((num("writes=")?, num("reads=")?))
}

/// Start `cmd` (the bench executable, in a mode that listens on
/// NRI_TRACE_BENCH_SOCK), attach a capture to it if `captured`, then let it
/// connect (ready file). Returns (the process, the capture).
fn start_traced_process(
    ctx: &Ctx,
    cmd: &mut Command,
    name: &str,
    captured: bool,
) -> Result<(Proc, Option<Proc>)> {
    let sock = ctx.work.join("traced.sock");
    let ready = ctx.work.join("traced.ready");
    let _ = fs::remove_file(&sock);
    let _ = fs::remove_file(&ready);
    if !captured {
        // The baseline connects at once.
        fs::write(&ready, b"")?;
    }
    cmd.env("NRI_TRACE_BENCH_SOCK", &sock)
        .env("NRI_TRACE_BENCH_READY", &ready);
    let mut bench = Proc::spawn(name, cmd)?;
    bench.wait_for("nri-trace-bench: listening", Duration::from_secs(30))?;
    let capture = if captured {
        let c = start_capture(ctx, &sock)?;
        fs::write(&ready, b"")?;
        Some(c)
    } else {
        None
    };
    bench.wait_for("nri-trace-bench: connected", Duration::from_secs(30))?;
    Ok((bench, capture))
}

/// A captured run whose capture saw no connection (or, when the run wrote
/// on it, no data) measured an untraced process.
fn check_captured(s: &Summary, expect_data: bool) -> Result<()> {
    if s.connections == 0 || (expect_data && s.chunks == 0) {
        bail!(
            "the capture saw no connection or no data ({s:?}): the traced process was not traced"
        );
    }
    Ok(())
}

// ------------------------------------------------------ part b2: paced

/// The paced part's rate: the capture keeps up with it at every size (see
/// the throughput part), so its reader drains a few records per wakeup
/// instead of competing with the writer flat out.
const PACED_WRITES_S: f64 = 10_000.0;
const PACED_SIZES: [u64; 3] = [64, 4096, 65536];
/// The paced writer's peer reads without blocking every 100 us: a reader
/// blocked in read(2) is woken by every write and, on the same CPU, often
/// preempts the writer on its way out of write(2), so the timed write also
/// held a switch to the reader and the reader's own probed read (about 4 us
/// of the 6 us baseline). In this mode the bench executable also raises the
/// writer's socket buffer (`SO_SNDBUFFORCE`), so that the writes queued
/// between two polls never fill it.
const PACED_READER: &[(&str, &str)] = &[("NRI_TRACE_BENCH_READER_POLL_US", "100")];

struct PacedCost {
    /// Per size: per-round mean ns in write(2) without and with capture.
    baseline: Vec<Vec<f64>>,
    captured: Vec<Vec<f64>>,
    /// Per size: the captured runs' writes, chunks and lost records, summed.
    writes: Vec<u64>,
    chunks: Vec<u64>,
    lost: Vec<u64>,
}

impl PacedCost {
    /// Median over rounds of (captured - baseline), run back to back.
    fn added(&self, i: usize) -> f64 {
        paired_diff(&self.captured[i], &self.baseline[i])
    }

    /// Per round, in run order: captured - baseline.
    fn added_per_round(&self, i: usize) -> Vec<f64> {
        paired_diffs(&self.captured[i], &self.baseline[i])
    }

    /// Per-write and per-byte cost through the added costs (sizes whose
    /// captured runs lost records left out).
    fn fit(&self) -> SizeFit {
        let points = PACED_SIZES
            .iter()
            .enumerate()
            .map(|(i, &size)| (size, self.added(i), self.lost[i]));
        SizeFit::new(points)
    }
}

fn paced_cost(ctx: &Ctx, rounds: usize, seconds: f64) -> Result<PacedCost> {
    let n = PACED_SIZES.len();
    let mut p = PacedCost {
        baseline: vec![vec![]; n],
        captured: vec![vec![]; n],
        writes: vec![0; n],
        chunks: vec![0; n],
        lost: vec![0; n],
    };
    for _ in 0..rounds {
        for (i, &size) in PACED_SIZES.iter().enumerate() {
            let rate = size as f64 * PACED_WRITES_S;
            let base = run_writer_with(ctx, size, seconds, rate, false, PACED_READER)?;
            let cap = run_writer_with(ctx, size, seconds, rate, true, PACED_READER)?;
            let summary = cap.summary.expect("captured run");
            p.baseline[i].push(base.write_ns);
            p.captured[i].push(cap.write_ns);
            p.writes[i] += cap.writes;
            p.chunks[i] += summary.chunks;
            p.lost[i] += summary.lost_records;
        }
    }
    Ok(p)
}

fn paced_section(p: &PacedCost, seconds: f64) -> String {
    let mut s = format!(
        "## Cost for the traced process at {PACED_WRITES_S:.0} writes/s\n\n\
         The throughput part's writer, paced to {PACED_WRITES_S:.0} writes/s for {seconds} s: \
         mean time inside write(2) (two clock reads included), without and with the \
         capture, run back to back. The peer end is drained by a thread of the same process \
         that reads without blocking every 100 us, so a write wakes nobody and its time holds \
         the write alone. {rounds} rounds; median over rounds (min-max); added = median over \
         rounds of (captured - no capture). Unlike the flat-out loop above, the capture's \
         reader is mostly idle here, as on a node, where the runtime's sockets carry far \
         fewer messages.\n\n\
         | write(2) of the traced process | no capture (ns) | nri-trace capture (ns) | added per write (ns) \
         | added per round, in run order (ns) | writes captured | chunks captured | lost records |\n\
         | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n",
        rounds = p.baseline.first().map_or(0, Vec::len),
    );
    for (i, size) in PACED_SIZES.iter().enumerate() {
        let per_round: Vec<String> = p
            .added_per_round(i)
            .iter()
            .map(|d| format!("{d:+.0}"))
            .collect();
        s += &format!(
            "| unix write {size} B (captured fd) | {} | {} | {:+.1} | {} | {} | {} | {} |\n",
            fmt_spread(&p.baseline[i]),
            fmt_spread(&p.captured[i]),
            p.added(i),
            per_round.join(", "),
            p.writes[i],
            p.chunks[i],
            p.lost[i],
        );
    }
    s += &p.fit().sentence();
    s
}

// --------------------------------------------------- part c: throughput

struct WriterRun {
    /// Target rate in bytes/s (0 = as fast as possible).
    target: f64,
    writes: u64,
    bytes: u64,
    seconds: f64,
    /// Mean time inside write(2), ns.
    write_ns: f64,
    /// What the capture saw; None for runs without a capture.
    summary: Option<Summary>,
}

impl WriterRun {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
    fn writes_s(&self) -> f64 {
        self.writes as f64 / self.seconds
    }
    fn lost(&self) -> u64 {
        self.summary.map_or(0, |s| s.lost_records)
    }
}

struct SizeThroughput {
    size: u64,
    /// Full speed without a capture: what the writer does at all.
    base_full: WriterRun,
    /// Full speed, captured.
    full: WriterRun,
    /// The rate search (empty when nothing was lost at full speed).
    steps: Vec<WriterRun>,
    /// The highest lossless rate found, again without a capture: the
    /// per-write cost of a capture that keeps up.
    paced_base: Option<WriterRun>,
}

impl SizeThroughput {
    fn best_lossless(&self) -> Option<&WriterRun> {
        self.steps
            .iter()
            .filter(|r| r.lost() == 0)
            .max_by(|a, b| a.target.total_cmp(&b.target))
    }
}

fn throughput(ctx: &Ctx, seconds: f64, steps: usize) -> Result<Vec<SizeThroughput>> {
    let mut out = vec![];
    for size in [65536, 4096] {
        let base_full = run_writer(ctx, size, seconds, 0.0, false)?;
        let full = run_writer(ctx, size, seconds, 0.0, true)?;
        let mut st = SizeThroughput {
            size,
            base_full,
            steps: vec![],
            full,
            paced_base: None,
        };
        if st.full.lost() > 0 {
            st.steps = lossless_search(ctx, size, seconds, st.full.mb_s() * 1e6, steps)?;
        }
        if let Some(best) = st.best_lossless() {
            let target = best.target;
            st.paced_base = Some(run_writer(ctx, size, seconds, target, false)?);
        }
        out.push(st);
    }
    Ok(out)
}

/// Bisect the writer's rate between 0 and the full-speed rate for the
/// highest rate at which no record is lost.
fn lossless_search(
    ctx: &Ctx,
    size: u64,
    seconds: f64,
    full_rate: f64,
    steps: usize,
) -> Result<Vec<WriterRun>> {
    let (mut lo, mut hi) = (0.0, full_rate);
    let mut runs = vec![];
    for _ in 0..steps {
        let rate = f64::midpoint(lo, hi);
        let r = run_writer(ctx, size, seconds, rate, true)?;
        if r.lost() == 0 {
            lo = rate;
        } else {
            hi = rate;
        }
        runs.push(r);
    }
    Ok(runs)
}

/// One writer run (the bench executable in throughput mode, on the bench
/// CPU; its reader thread shares that CPU), captured or not.
fn run_writer(ctx: &Ctx, size: u64, seconds: f64, rate: f64, captured: bool) -> Result<WriterRun> {
    run_writer_with(ctx, size, seconds, rate, captured, &[])
}

/// `run_writer` with extra environment for the bench executable.
fn run_writer_with(
    ctx: &Ctx,
    size: u64,
    seconds: f64,
    rate: f64,
    captured: bool,
    env: &[(&str, &str)],
) -> Result<WriterRun> {
    let mut cmd = pinned(BENCH_CPU, &ctx.bench_exe);
    cmd.envs(env.iter().copied());
    cmd.env("NRI_TRACE_BENCH_MODE", "throughput")
        .env("NRI_TRACE_BENCH_WRITE_SIZE", size.to_string())
        .env("NRI_TRACE_BENCH_SECONDS", seconds.to_string())
        .env("NRI_TRACE_BENCH_RATE", rate.to_string());
    let (mut writer, capture) = start_traced_process(ctx, &mut cmd, "throughput writer", captured)?;
    let line = writer.wait_for("nri-trace-bench: throughput", Duration::from_mins(2))?;
    writer.wait_success(Duration::from_secs(30))?;
    let summary = capture.map(stop_capture).transpose()?;
    if let Some(s) = &summary {
        check_captured(s, true)?;
    }
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no {k} in {line:?}"))
    };
    let r = WriterRun {
        target: rate,
        writes: field("writes=")? as u64,
        bytes: field("bytes=")? as u64,
        seconds: field("seconds=")?,
        write_ns: field("write_ns=")?,
        summary,
    };
    let reads = field("reads=")?;
    eprintln!(
        "bench: throughput {size} B writes, {}, target {}: {:.1} MB/s, {:.0} writes/s, \
         {:.1} ns in write, {:.2} reads per write, capture {:?}",
        if captured { "captured" } else { "no capture" },
        fmt_rate(r.target),
        r.mb_s(),
        r.writes_s(),
        r.write_ns,
        reads / r.writes.max(1) as f64,
        r.summary
    );
    Ok(r)
}

// ------------------------------------------------------- part d: the mix

/// x86_64 numbers of the syscalls nri-trace probes.
const PROBED: &[(u64, &str)] = &[
    (0, "read"),
    (1, "write"),
    (3, "close"),
    (19, "readv"),
    (20, "writev"),
    (32, "dup"),
    (33, "dup2"),
    (42, "connect"),
    (43, "accept"),
    (44, "sendto"),
    (45, "recvfrom"),
    (46, "sendmsg"),
    (47, "recvmsg"),
    (53, "socketpair"),
    (288, "accept4"),
    (292, "dup3"),
];

struct Mix {
    seconds: u64,
    /// (syscall number, count), most frequent first.
    counts: Vec<(u64, u64)>,
}

impl Mix {
    fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.1).sum()
    }
    fn probed(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(nr, _)| PROBED.iter().any(|p| p.0 == *nr))
            .map(|c| c.1)
            .sum()
    }
    fn probed_share(&self) -> f64 {
        self.probed() as f64 / self.total().max(1) as f64
    }
}

/// Count syscalls by number, system-wide, for `seconds` (while `workload`
/// runs, if given).
fn syscall_mix(seconds: u64, workload: Option<&str>) -> Result<Mix> {
    let prog = format!(
        "tracepoint:raw_syscalls:sys_enter {{ @[args->id] = count(); }} \
         interval:s:{seconds} {{ exit(); }}"
    );
    let mut bt = Proc::spawn(
        "bpftrace syscall count",
        Command::new("bpftrace").args(["-e", &prog]),
    )?;
    bt.wait_for("Attaching", Duration::from_mins(1))?;
    // Its own process group, so that the whole workload can be stopped.
    let mut load = match workload {
        Some(w) => Some(Proc::spawn(
            "mix workload",
            Command::new("sh").args(["-c", w]).process_group(0),
        )?),
        None => None,
    };
    eprintln!("bench: counting syscalls for {seconds} s");
    let st = bt.wait_exit(Duration::from_secs(seconds + 60));
    if let Some(l) = load.as_mut() {
        signal(l.pid(), "TERM");
        // The negative pid names the process group.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", l.pid())])
            .stderr(Stdio::null())
            .status();
        let _ = l.wait_exit(Duration::from_secs(10));
    }
    if !st?.success() {
        bail!("bpftrace syscall count failed{}", bt.tail());
    }
    let mut counts: Vec<(u64, u64)> = bt.seen.iter().filter_map(|l| parse_map_line(l)).collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    if counts.is_empty() {
        bail!("bpftrace counted no syscalls{}", bt.tail());
    }
    Ok(Mix { seconds, counts })
}

/// x86_64 syscall names by number, from the kernel headers (linux-libc-dev)
/// when they are installed, else only the probed ones.
fn syscall_names() -> std::collections::HashMap<u64, String> {
    let mut names: std::collections::HashMap<u64, String> =
        PROBED.iter().map(|(nr, n)| (*nr, n.to_string())).collect();
    let header = fs::read_to_string("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    for l in header.unwrap_or_default().lines() {
        let mut w = l.split_whitespace();
        if let (Some("#define"), Some(name), Some(nr)) = (w.next(), w.next(), w.next()) {
            if let (Some(name), Ok(nr)) = (name.strip_prefix("__NR_"), nr.parse()) {
                names.insert(nr, name.to_string());
            }
        }
    }
    names
}

/// "@[1]: 1234" -> (1, 1234)
fn parse_map_line(l: &str) -> Option<(u64, u64)> {
    let rest = l.strip_prefix("@[")?;
    let (nr, count) = rest.split_once("]: ")?;
    Some((nr.trim().parse().ok()?, count.trim().parse().ok()?))
}

/// Break-even share p* of probed syscalls at which the two designs cost the
/// same: classic costs p*cp + (1-p)*cu, raw p*rp + (1-p)*ru.
fn break_even(classic: (f64, f64), raw: (f64, f64)) -> Option<f64> {
    let ((cp, cu), (rp, ru)) = (classic, raw);
    let denom = (cp - cu) - (rp - ru);
    if denom.abs() < 1e-9 {
        return None;
    }
    Some((ru - cu) / denom)
}

fn expected(cost: (f64, f64), p: f64) -> f64 {
    p * cost.0 + (1.0 - p) * cost.1
}

// ------------------------------------------------- part e: NRI decoding

/// The benchmarks of `nri-trace/benches/nri_decode.rs`: (criterion id,
/// label, what it runs).
const NRI_DECODE: [(&str, &str, &str); 4] = [
    (
        "nri_decode/full",
        "full",
        "the pipeline's decoder stage (`TraceDecoder`): routing, framing, protobuf, matching, \
         plugin identity, observations",
    ),
    (
        "nri_decode/assembler",
        "assembler",
        "the call assembler alone: framing, protobuf, matching (no hook timing)",
    ),
    (
        "nri_decode/framing",
        "framing",
        "mux + ttrpc framing only, every message drained",
    ),
    (
        "nri_decode/prost_only",
        "prost_only",
        "protobuf decoding only (envelope + typed body) of the messages the pipeline decodes",
    ),
];

struct NriDecode {
    /// The bench's `nri_decode input:` line, as printed.
    input: String,
    bytes: f64,
    messages: f64,
    /// criterion medians (ns per run over the whole recording), in the
    /// order of [`NRI_DECODE`].
    ns: [f64; 4],
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

impl NriDecode {
    fn full(&self) -> f64 {
        self.ns[0]
    }

    fn assembler(&self) -> f64 {
        self.ns[1]
    }

    fn framing(&self) -> f64 {
        self.ns[2]
    }

    fn prost(&self) -> f64 {
        self.ns[3]
    }

    /// Framing and bookkeeping: the pipeline minus its protobuf decoding.
    fn rest(&self) -> f64 {
        self.full() - self.prost()
    }
}

/// Build and run the nri_decode criterion bench, then read its medians.
fn nri_decode(quick: bool) -> Result<NriDecode> {
    let ids = NRI_DECODE.map(|(id, _, _)| id.to_string());
    let run = run_decode_bench("nri_decode", &ids, quick)?;
    let input = run.inputs[0].clone();
    let mut ns = [0.0; 4];
    for (slot, id) in ns.iter_mut().zip(&ids) {
        *slot = run.median_ns(id)?;
    }
    Ok(NriDecode {
        bytes: input_number(&input, "bytes")?,
        messages: input_number(&input, "messages")?,
        input,
        ns,
        cpu: run.cpu,
    })
}

// ------------------------------------------------- part f: CRI decoding

/// The benchmarks of `nri-trace/benches/cri_decode.rs`: (name, what it
/// runs); criterion id `cri_decode/<name>/<input>`.
const CRI_DECODE: [(&str, &str); 4] = [
    (
        "full",
        "the pipeline's decoder stage (`TraceDecoder`): HTTP/2 framing, HPACK, gRPC reassembly, \
         streams, method inference, protobuf, identity, observations",
    ),
    (
        "framing",
        "HTTP/2 framing + HPACK + gRPC message reassembly only, every event drained",
    ),
    (
        "prost_only",
        "protobuf decoding only of the messages the pipeline decodes, typed by the call's \
         (seen or inferred) method",
    ),
    (
        "shape_inference",
        "`message::candidates` over the messages of the calls whose :path was hidden",
    ),
];

/// The inputs of `cri_decode.rs` (criterion parameters), headline first.
const CRI_INPUTS: [&str; 2] = ["grpc-go", "tonic"];

struct CriDecode {
    inputs: Vec<CriInput>,
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

struct CriInput {
    name: &'static str,
    /// The bench's `cri_decode input:` line for it, as printed.
    input: String,
    bytes: f64,
    calls: f64,
    /// criterion medians (ns per run over the whole recording), in the
    /// order of [`CRI_DECODE`]; `None`: not run (no hidden call).
    ns: [Option<f64>; 4],
}

/// Build and run the cri_decode criterion bench, then read its medians.
fn cri_decode(quick: bool) -> Result<CriDecode> {
    let id = |name: &str, input: &str| format!("cri_decode/{name}/{input}");
    let ids: Vec<String> = CRI_INPUTS
        .iter()
        .flat_map(|i| CRI_DECODE.iter().map(move |(n, _)| id(n, i)))
        .collect();
    let run = run_decode_bench("cri_decode", &ids, quick)?;
    let mut inputs = Vec::new();
    for name in CRI_INPUTS {
        let input = run
            .inputs
            .iter()
            .find(|l| input_field(l, "fixture").is_ok_and(|f| f == name))
            .with_context(|| format!("the cri_decode bench printed no input line for {name}"))?
            .clone();
        let hidden = input_number(&input, "hidden")?;
        let mut ns = [None; 4];
        for (slot, (bench, _)) in ns.iter_mut().zip(CRI_DECODE) {
            // The bench skips shape_inference when no :path was hidden.
            if bench != "shape_inference" || hidden > 0.0 {
                *slot = Some(run.median_ns(&id(bench, name))?);
            }
        }
        inputs.push(CriInput {
            name,
            bytes: input_number(&input, "bytes")?,
            calls: input_number(&input, "calls")?,
            input,
            ns,
        });
    }
    Ok(CriDecode {
        inputs,
        cpu: run.cpu,
    })
}

/// What a decode bench printed, and where it ran.
struct DecodeRun {
    /// Its `<bench> input: ` lines, without the prefix.
    inputs: Vec<String>,
    /// Everything it printed (stdout and stderr), line by line.
    output: Vec<String>,
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
    criterion_home: PathBuf,
}

impl DecodeRun {
    fn median_ns(&self, id: &str) -> Result<f64> {
        read_median_ns(&estimates_path(&self.criterion_home, id))
    }
}

/// Build and run nri-trace's criterion bench `bench` (pinned to the
/// measurement CPU when there are two CPUs and `taskset`). The estimates of
/// `ids` are removed first, so that a run that fails to write them cannot
/// be read as a result of the previous run.
fn run_decode_bench(bench: &str, ids: &[String], quick: bool) -> Result<DecodeRun> {
    let exe = build_bench_exe(bench)?;
    let criterion_home = crate::workspace_root().join("target/criterion");
    for id in ids {
        let _ = fs::remove_file(estimates_path(&criterion_home, id));
    }
    let two_cpus = thread::available_parallelism().map_or(1, std::num::NonZero::get) >= 2;
    let cpu = (two_cpus && which("taskset").is_ok()).then_some(BENCH_CPU);
    let mut cmd = match cpu {
        Some(cpu) => pinned(cpu, &exe),
        None => Command::new(&exe),
    };
    cmd.arg("--bench").env("CRITERION_HOME", &criterion_home);
    if quick {
        cmd.args(QUICK_ARGS);
    }
    eprintln!(
        "bench: {} ({})",
        bench.replace('_', "-"),
        cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        )
    );
    let mut p = Proc::spawn(&format!("bench ({bench})"), &mut cmd)?;
    p.wait_success(Duration::from_mins(10))?;
    let prefix = format!("{bench} input: ");
    let inputs: Vec<String> = p
        .seen
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .collect();
    if inputs.is_empty() {
        bail!("the {bench} bench printed no input line");
    }
    Ok(DecodeRun {
        inputs,
        output: p.seen.clone(),
        cpu,
        criterion_home,
    })
}

/// The value of `key=` in a decode bench's input line.
fn input_field<'a>(input: &'a str, key: &str) -> Result<&'a str> {
    input
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .with_context(|| format!("no {key}= in the input line: {input}"))
}

fn input_number(input: &str, key: &str) -> Result<f64> {
    input_field(input, key)?
        .parse()
        .with_context(|| format!("{key}= is not a number in the input line: {input}"))
}

// ------------------------------------------------ part g: trace engine

/// The criterion id of `nri-trace/benches/trace_engine.rs`'s throughput
/// benchmark.
const TRACE_ENGINE_ID: &str = "trace_engine/full";
/// The same bench's engine-alone benchmark (pre-decoded observations).
const ENGINE_ALONE_ID: &str = "trace_engine/engine";
/// Issue 23's target for the engine alone, on one core.
const ENGINE_TARGET_OBS_S: f64 = 1_000_000.0;
/// The issue's memory target after 10,000 pod lifecycles.
const MEMORY_TARGET_MIB: f64 = 100.0;
/// The lifecycles the memory target is stated for.
const MEMORY_LIFECYCLES: f64 = 10_000.0;

struct TraceEngine {
    /// The bench's `trace_engine input:` line, as printed.
    input: String,
    reps: f64,
    events: f64,
    bytes: f64,
    lifecycles: f64,
    /// criterion median, ns per run over the whole long input.
    ns: f64,
    /// The input's observations (what its decoding gives).
    observations: f64,
    /// criterion median of the engine alone, ns per run.
    engine_ns: f64,
    /// The bench's `trace_engine memory:` line, as printed.
    memory: String,
    mem_lifecycles: f64,
    mem_events: f64,
    mem_seconds: f64,
    rss_before_kib: f64,
    rss_after_kib: f64,
    hwm_kib: f64,
    pods_kept: f64,
    /// (lifecycles, VmRSS KiB, seconds) along the memory run.
    progress: Vec<(f64, f64, f64)>,
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

impl TraceEngine {
    fn memory_verdict(&self) -> &'static str {
        if self.mem_lifecycles < MEMORY_LIFECYCLES {
            "not measured"
        } else if self.hwm_kib < MEMORY_TARGET_MIB * 1024.0 {
            "met"
        } else {
            "MISSED"
        }
    }
}

/// Build and run the trace_engine bench (criterion, then its memory run),
/// then read its median and its memory lines.
fn trace_engine(quick: bool) -> Result<TraceEngine> {
    let run = run_decode_bench(
        "trace_engine",
        &[TRACE_ENGINE_ID.to_string(), ENGINE_ALONE_ID.to_string()],
        quick,
    )?;
    let input = run.inputs[0].clone();
    let line = |prefix: &str| {
        run.output
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::to_string)
            .with_context(|| format!("the trace_engine bench printed no `{prefix}` line"))
    };
    let memory = line("trace_engine memory: ")?;
    let progress = line("trace_engine memory progress: ")?
        .split_whitespace()
        .map(|p| {
            let v: Vec<f64> = p.split(':').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [l, kib, t] => Ok((l, kib, t)),
                _ => bail!("bad memory progress point {p:?}"),
            }
        })
        .collect::<Result<_>>()?;
    Ok(TraceEngine {
        reps: input_number(&input, "reps")?,
        events: input_number(&input, "events")?,
        bytes: input_number(&input, "bytes")?,
        lifecycles: input_number(&input, "lifecycles")?,
        ns: run.median_ns(TRACE_ENGINE_ID)?,
        observations: input_number(&input, "observations")?,
        engine_ns: run.median_ns(ENGINE_ALONE_ID)?,
        input,
        mem_lifecycles: input_number(&memory, "lifecycles")?,
        mem_events: input_number(&memory, "events")?,
        mem_seconds: input_number(&memory, "seconds")?,
        rss_before_kib: input_number(&memory, "rss_before_kib")?,
        rss_after_kib: input_number(&memory, "rss_after_kib")?,
        hwm_kib: input_number(&memory, "hwm_kib")?,
        pods_kept: input_number(&memory, "pods_kept")?,
        memory,
        progress,
        cpu: run.cpu,
    })
}

fn trace_engine_section(e: &TraceEngine) -> String {
    let mib = |kib: f64| kib / 1024.0;
    let mut s = format!(
        "## Engine throughput and memory\n\n\
         One run = the whole long input ({} repetitions of the happy trace recording, each \
         with its own ids, connections and times) through a fresh `Pipeline` (decoders and \
         engine) and `PodModel`, on one core ({}); criterion median. MB/s = captured payload bytes (10^6) \
         per second.\n\n\
         Input: `{}`\n\n\
         | benchmark | time per run (ms) | events/s | MB/s | pod lifecycles/s |\n\
         | --- | ---: | ---: | ---: | ---: |\n\
         | full | {:.1} | {:.0} | {:.1} | {:.0} |\n\n\
         Engine alone: the same input decoded beforehand into {} observations, moved \
         into a fresh `TraceEngine` (records dropped as they come; the clone of the \
         observations is outside the timing): {:.1} ms per run, **{:.0} observations/s**; \
         target {} observations/s on one core: **{}**.\n\n",
        fmt_f0(e.reps),
        e.cpu
            .map_or_else(|| "not pinned".to_string(), |c| format!("pinned to CPU {c}")),
        e.input,
        e.ns / 1e6,
        e.events * 1e9 / e.ns,
        e.bytes * 1e3 / e.ns,
        e.lifecycles * 1e9 / e.ns,
        fmt_f0(e.observations),
        e.engine_ns / 1e6,
        e.observations * 1e9 / e.engine_ns,
        fmt_f0(ENGINE_TARGET_OBS_S),
        if e.observations * 1e9 / e.engine_ns >= ENGINE_TARGET_OBS_S {
            "met"
        } else {
            "MISSED"
        },
    );
    s += &format!(
        "Memory: a fresh process streams {} pod lifecycles ({} events, one repetition \
         generated at a time) through one `Pipeline` and one `PodModel`; \
         /proc/self/status.\n\n\
         Memory run: `{}`\n\n\
         | | |\n| --- | ---: |\n\
         | VmRSS, the recording loaded (before) | {:.1} MiB |\n\
         | VmRSS after {} lifecycles | {:.1} MiB |\n\
         | VmHWM (peak) | {:.1} MiB |\n\
         | pods kept in the model | {} |\n\
         | run time | {:.1} s ({:.0} events/s, {:.0} lifecycles/s) |\n\n",
        fmt_f0(e.mem_lifecycles),
        fmt_f0(e.mem_events),
        e.memory,
        mib(e.rss_before_kib),
        fmt_f0(e.mem_lifecycles),
        mib(e.rss_after_kib),
        mib(e.hwm_kib),
        fmt_f0(e.pods_kept),
        e.mem_seconds,
        e.mem_events / e.mem_seconds,
        e.mem_lifecycles / e.mem_seconds,
    );
    s += "| lifecycles | VmRSS (MiB) | seconds | lifecycles/s since the previous row |\n\
          | ---: | ---: | ---: | ---: |\n";
    let mut prev = (0.0, 0.0);
    for &(l, kib, t) in &e.progress {
        s += &format!(
            "| {} | {:.1} | {:.1} | {:.0} |\n",
            fmt_f0(l),
            mib(kib),
            t,
            (l - prev.0) / (t - prev.1)
        );
        prev = (l, t);
    }
    s += &format!(
        "\nTarget: under {MEMORY_TARGET_MIB} MiB after {} pod lifecycles (VmHWM of the memory \
         run): {:.1} MiB, **{}**.\n",
        fmt_f0(MEMORY_LIFECYCLES),
        mib(e.hwm_kib),
        e.memory_verdict()
    );
    s
}

// ------------------------------------------------------ part h: TUI frame

/// The benchmarks of `nri-trace/benches/tui_frame.rs`: (id, what).
const TUI_FRAME_IDS: [(&str, &str); 7] = [
    ("tui_frame/pods_80x24", "pods view, 80x24"),
    ("tui_frame/pods_200x50", "pods view, 200x50"),
    ("tui_frame/timeline_200x50", "timeline view, 200x50"),
    ("tui_frame/plugins_200x50", "plugins view, 200x50"),
    ("tui_frame/findings_200x50", "findings view, 200x50"),
    ("tui_frame/calls_200x50", "calls view, 200x50"),
    (
        "tui_frame/live_second_200x50",
        "one second of live load: 100 records + 4 frames of the pods view",
    ),
];
/// The TUI redraws every 250 ms: a frame must take far less.
const TUI_REDRAW_MS: f64 = 250.0;

struct TuiFrame {
    /// The bench's `tui_frame input:` line, as printed.
    input: String,
    pods: f64,
    /// (id, what, criterion median ns).
    medians: Vec<(&'static str, &'static str, f64)>,
    cpu: Option<&'static str>,
}

/// Build and run the tui_frame bench and read its medians.
fn tui_frame(quick: bool) -> Result<TuiFrame> {
    let ids: Vec<String> = TUI_FRAME_IDS.iter().map(|(id, _)| id.to_string()).collect();
    let run = run_decode_bench("tui_frame", &ids, quick)?;
    let input = run.inputs[0].clone();
    let medians = TUI_FRAME_IDS
        .iter()
        .map(|&(id, what)| Ok((id, what, run.median_ns(id)?)))
        .collect::<Result<_>>()?;
    Ok(TuiFrame {
        pods: input_number(&input, "pods")?,
        input,
        medians,
        cpu: run.cpu,
    })
}

fn tui_frame_section(t: &TuiFrame) -> String {
    let mut s = format!(
        "## TUI frame time\n\n\
         One frame = `sinks::tui::draw` of one view into a ratatui `TestBackend` terminal \
         kept across frames (layout, widgets, diff), with {} pods in the `TuiState` (the \
         happy trace recording's records repeated with their own pods, ids and times); \
         one core ({}); criterion median.\n\n\
         Input: `{}`\n\n\
         | benchmark | what | time (ms) | share of the {TUI_REDRAW_MS} ms redraw period |\n\
         | --- | --- | ---: | ---: |\n",
        fmt_f0(t.pods),
        t.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        t.input,
    );
    for (id, what, ns) in &t.medians {
        let ms = ns / 1e6;
        let share = if id.contains("live_second") {
            // Four periods in that second.
            format!("{:.2}% of the second", ms / 10.0)
        } else {
            format!("{:.2}%", ms / TUI_REDRAW_MS * 100.0)
        };
        s += &format!("| {id} | {what} | {ms:.3} | {share} |\n");
    }
    s
}

// ------------------------------------------------------------ named span

/// Pods (one container each) the fake runtime holds: issue 20's "node
/// with 1,000 existing pods".
const NAMED_SPAN_PODS: usize = 1000;
/// StopPodSandbox calls sent in one start, one pod each, until a span
/// comes out named: the first may settle before the state is in.
const NAMED_SPAN_CALLS: usize = 10;

/// One start of `nri-trace watch` against the fake runtime. Times are
/// from the spawn of nri-trace to the line read from its pipe.
struct SpanRound {
    ready: Duration,
    /// The span of the first StopPodSandbox sent.
    first_span: Duration,
    /// The first span naming its pod; `None`: none of the calls' spans did.
    named: Option<Duration>,
    /// Calls sent until then (or all of them).
    calls: usize,
    state: Option<StateLine>,
    /// nri-trace's VmHWM before it is stopped, KiB.
    peak_rss_kib: f64,
}

/// The `cri_state` line: when it came, and its `took_ns` and `bytes`.
struct StateLine {
    at: Duration,
    took_ns: f64,
    bytes: f64,
}

struct NamedSpan {
    /// (with the CRI state, `--no-cri-state`), round by round.
    rounds: [Vec<SpanRound>; 2],
    /// The fake's own line ("fake-cri: serving 1000 pods").
    fake: String,
}

/// Both modes, interleaved over `rounds` starts each, against one fake
/// runtime.
fn named_span(rounds: usize) -> Result<NamedSpan> {
    let nri_trace = crate::build(true)?;
    let fake = crate::release_lab_bins(&["fake-cri"])?.join("fake-cri");
    let work = work_dir()?;
    let (cri, nri) = (work.join("fake-cri.sock"), work.join("fake-nri.sock"));
    let mut server = Proc::spawn(
        "fake-cri serve",
        Command::new(&fake)
            .args(["serve", "--pods", &NAMED_SPAN_PODS.to_string(), "--cri"])
            .arg(&cri)
            .arg("--nri")
            .arg(&nri),
    )?;
    let fake_line = server.wait_for("fake-cri: serving", Duration::from_secs(30))?;
    let mut out = NamedSpan {
        rounds: [Vec::new(), Vec::new()],
        fake: fake_line,
    };
    for r in 0..rounds {
        for (m, with_state) in [true, false].into_iter().enumerate() {
            eprintln!(
                "bench: named-span round {}/{rounds}, CRI state {with_state}",
                r + 1
            );
            // Other pods each start: the engine cannot have seen them.
            let first_pod = 100 + (r * 2 + m) * NAMED_SPAN_CALLS;
            out.rounds[m].push(span_round(
                &nri_trace, &fake, &cri, &nri, with_state, first_pod,
            )?);
            server.check_alive()?;
        }
    }
    server.stop()?;
    Ok(out)
}

fn span_round(
    nri_trace: &Path,
    fake: &Path,
    cri: &Path,
    nri: &Path,
    with_state: bool,
    first_pod: usize,
) -> Result<SpanRound> {
    let mut cmd = Command::new(nri_trace);
    cmd.args(["watch", "-o", "json", "--cri-socket"])
        .arg(cri)
        .arg("--nri-socket")
        .arg(nri);
    if !with_state {
        cmd.arg("--no-cri-state");
    }
    let t0 = Instant::now();
    let mut p = Proc::spawn("nri-trace watch", &mut cmd)?;
    let (ready, _) = p.wait_for_line(
        "nri-trace: ready",
        |l| l.contains("nri-trace: ready"),
        Duration::from_mins(1),
    )?;
    let mut first_span = None;
    let mut named = None;
    let mut calls = 0;
    // Without the state no span is named: one call tells what it shows.
    let tries = if with_state { NAMED_SPAN_CALLS } else { 1 };
    for pod in first_pod..first_pod + tries {
        calls += 1;
        // kubelet's side: a new connection, StopPodSandbox, the pod it
        // named, then a call every 10 ms (fake-cri.rs says why) until
        // dropped here.
        let mut client = Proc::spawn(
            "fake-cri stop",
            Command::new(fake)
                .args(["stop", "--pod", &pod.to_string(), "--cri"])
                .arg(cri),
        )?;
        let said = client.wait_for("\"sandbox_id\":", Duration::from_secs(30))?;
        let (Some(id), Some(ns), Some(name)) = (
            json_string(&said, "\"sandbox_id\":"),
            json_string(&said, "\"namespace\":"),
            json_string(&said, "\"name\":"),
        ) else {
            bail!("fake-cri stop said {said:?}");
        };
        let (at, span) = p.wait_for_line(
            "the StopPodSandbox cri_span",
            |l| l.contains("\"type\":\"cri_span\"") && l.contains(&id),
            Duration::from_secs(30),
        )?;
        first_span.get_or_insert(at - t0);
        if span_pod(&span) == Some((ns, name)) {
            named = Some(at - t0);
            break;
        }
    }
    let peak_rss_kib = fs::read_to_string(format!("/proc/{}/status", p.pid()))
        .ok()
        .and_then(|s| json_number(&s, &["VmHWM:"]))
        .context("no VmHWM in nri-trace's /proc status")?;
    p.stop()?;
    let state = p
        .seen_line(|l| l.contains("\"type\":\"cri_state\""))
        .map(|(at, l)| {
            Ok::<_, anyhow::Error>(StateLine {
                at: at - t0,
                took_ns: json_number(l, &["\"took_ns\":"]).context("cri_state without took_ns")?,
                bytes: json_number(l, &["\"bytes\":"]).context("cri_state without bytes")?,
            })
        })
        .transpose()?;
    if with_state == state.is_none() {
        bail!(
            "nri-trace (CRI state {with_state}) printed {} cri_state line",
            if with_state { "no" } else { "a" }
        );
    }
    Ok(SpanRound {
        ready: ready - t0,
        first_span: first_span.context("no call sent")?,
        named,
        calls,
        state,
        peak_rss_kib,
    })
}

/// The (namespace, name) of a span line's `pod` object, when it has one.
fn span_pod(line: &str) -> Option<(String, String)> {
    let pod = &line[line.find("\"pod\":{")?..];
    let pod = &pod[..pod.find('}')?];
    Some((
        json_string(pod, "\"namespace\":")?,
        json_string(pod, "\"name\":")?,
    ))
}

/// A figure of one round, if it has it.
type RoundFigure = dyn Fn(&SpanRound) -> Option<f64>;

fn named_span_section(n: &NamedSpan) -> String {
    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }
    // "median / max" of `f` over a mode's rounds, "-" when no round has it.
    let stat = |m: usize, f: &RoundFigure| {
        let v: Vec<f64> = n.rounds[m].iter().filter_map(f).collect();
        if v.is_empty() {
            "-".to_string()
        } else {
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{:.1} / {max:.1}", median(&v))
        }
    };
    let never = |m: usize| n.rounds[m].iter().filter(|r| r.named.is_none()).count();
    let rows: [(&str, &RoundFigure); 8] = [
        ("start to `nri-trace: ready` (ms)", &|r| Some(ms(r.ready))),
        ("start to the `cri_state` line (ms)", &|r| {
            r.state.as_ref().map(|s| ms(s.at))
        }),
        ("start to the first StopPodSandbox span (ms)", &|r| {
            Some(ms(r.first_span))
        }),
        ("start to the first correctly named span (ms)", &|r| {
            r.named.map(ms)
        }),
        ("StopPodSandbox calls sent until named", &|r| {
            r.named.map(|_| r.calls as f64)
        }),
        ("`cri_state` `took_ns` (ms)", &|r| {
            r.state.as_ref().map(|s| s.took_ns / 1e6)
        }),
        ("`cri_state` `bytes` (KiB)", &|r| {
            r.state.as_ref().map(|s| s.bytes / 1024.0)
        }),
        ("nri-trace peak RSS, VmHWM (MiB)", &|r| {
            Some(r.peak_rss_kib / 1024.0)
        }),
    ];
    let mut s = format!(
        "## Named span on a node with {NAMED_SPAN_PODS} pods\n\n\
         `nri-trace watch -o json` against `{}` (lab/src/bin/fake-cri.rs); once it says \
         `ready`, a new CRI connection sends StopPodSandbox for one of the pods (a pod \
         made before the trace); if its span does not name the pod, another pod's \
         StopPodSandbox follows (at most {NAMED_SPAN_CALLS}). Times from nri-trace's \
         spawn to its line read from the pipe; nothing pinned. {} starts per mode, \
         interleaved; median / max.\n\n\
         | measure | with the CRI state (default) | `--no-cri-state` |\n\
         | --- | ---: | ---: |\n",
        n.fake,
        n.rounds[0].len(),
    );
    for (what, f) in rows {
        s += &format!("| {what} | {} | {} |\n", stat(0, f), stat(1, f));
    }
    s += &format!(
        "| starts whose spans never named the pod | {} of {} | {} of {} |\n",
        never(0),
        n.rounds[0].len(),
        never(1),
        n.rounds[1].len()
    );
    s
}

// ---------------------------------------------------------------- report

fn header_section() -> String {
    let cmd = format!(
        "cargo xtask {}",
        env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    let nproc = thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "## Run\n\n\
         - command: `{cmd}`\n\
         - date: {date}\n\
         - machine: {nproc} CPUs, {cpu}, kernel {}\n\
         - load average at the start: {}\n\
         - measured process pinned to CPU {BENCH_CPU} (`taskset`); captures, probes holders \
         and bpftrace on CPU {HELPER_CPU}\n",
        kernel.trim(),
        loadavg()
    )
}

/// /proc/loadavg's 1, 5 and 15 minute figures: other work on the machine
/// during the run shows here.
pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn probe_section(p: &ProbeCost) -> String {
    let mut s = String::from(
        "## Probe cost for an untraced process\n\n\
         criterion medians (ns per call), median over rounds (min-max of the rounds); \
         added = median over rounds of (this state - `none` of the same round).\n\n\
         | probes attached | write 64 B to /dev/null | added | getppid | added | unlinkat ENOENT | added |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in &p.rows {
        let (aw, ag) = p.added(r.state);
        s += &format!(
            "| {} | {} | {:+.1} | {} | {:+.1} | {} | {:+.1} |\n",
            r.state.label(),
            fmt_spread(&r.write),
            aw,
            fmt_spread(&r.getppid),
            ag,
            fmt_spread(&r.unlinkat),
            p.diff_unlinkat(r.state, State::None)
        );
    }
    s += &format!(
        "\nThe exec probe (`sandbox_exec`, on sched_process_exec, every exec of the node), \
         its own run time per exec from the kernel's BPF statistics over 2,000 fork+execs \
         of /bin/true per round (exec_cost.rs): {} ns; its floor, an empty program on the \
         same tracepoint (`floor_exec`): {} ns; added: {:+.1} ns.\n",
        fmt_spread(&p.row(State::Sandbox).exec),
        fmt_spread(&p.row(State::FloorSandbox).exec),
        p.exec_added()
    );
    s
}

fn traced_section(t: &TracedCost) -> String {
    let mut s = String::from(
        "## Cost for the traced process\n\n\
         write(2) on the server end of a captured unix stream connection (a reader thread \
         of the same process, on the same CPU, drains the other end). criterion medians, \
         median over rounds (min-max); added = median over rounds of (captured - no capture), \
         the two run back to back.\n\n\
         | write(2) of the traced process | no capture (ns) | nri-trace capture (ns) | added per write (ns) \
         | writes on the connection | chunks captured | lost records | reader reads per write |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (i, (_, size)) in TRACED_CASES.iter().enumerate() {
        let sum = |f: fn(&Summary) -> u64| t.summaries[i].iter().map(f).sum::<u64>();
        let writes: u64 = t.counts[i].iter().map(|c| c.0).sum();
        let reads: u64 = t.counts[i].iter().map(|c| c.1).sum();
        let (writes_s, per_write) = if size.is_some() {
            (
                writes.to_string(),
                format!("{:.2}", reads as f64 / writes.max(1) as f64),
            )
        } else {
            ("-".into(), "-".into())
        };
        s += &format!(
            "| {} | {} | {} | {:+.1} | {writes_s} | {} | {} | {per_write} |\n",
            case_label(i),
            fmt_spread(&t.baseline[i]),
            fmt_spread(&t.captured[i]),
            t.added(i),
            sum(|s| s.chunks),
            sum(|s| s.lost_records),
        );
    }
    s += &t.fit().sentence();
    s += "\nWrites, chunks, lost records and reads are summed over the captured runs (one \
          capture per run, warm-up included); a lost record is a ring buffer output that failed. The \
          reader's reads are syscalls of the traced process on an fd nri-trace does not \
          track: each pays about what the /dev/null row adds.\n";
    s
}

fn throughput_section(t: &[SizeThroughput], seconds: f64) -> String {
    let mut s = format!(
        "## Capture throughput ({}, {seconds} s per run)\n\n\
         A writer thread writes on the server end of a unix stream connection, flat out or \
         paced to a target rate; a reader thread of the same process (same CPU) drains the \
         other end. Chunks = syscalls reassembled by nri-trace; a 64 KiB write is 4 kernel \
         records of 16 KiB, a 4 KiB write one.\n\n\
         | write size | capture | target rate | writer MB/s | writes/s | mean ns in write(2) \
         | writes | chunks captured | bytes written | bytes captured | lost records | lost bytes |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        fmt_bytes(nri_ring_bytes())
    );
    for st in t {
        let runs = [&st.base_full, &st.full]
            .into_iter()
            .chain(st.steps.iter())
            .chain(st.paced_base.iter());
        for r in runs {
            s += &writer_row(st.size, r);
        }
    }
    s += "\n";
    for st in t {
        s += &throughput_verdict(st);
    }
    s
}

fn writer_row(size: u64, r: &WriterRun) -> String {
    let capture = match &r.summary {
        Some(c) => {
            format!(
                "nri-trace | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_rate(r.target),
                fmt_f(r.mb_s()),
                fmt_f0(r.writes_s()),
                fmt_f(r.write_ns),
                r.writes,
                c.chunks,
                r.bytes,
                c.bytes,
                c.lost_records,
                c.lost_bytes
            )
        }
        None => format!(
            "none | {} | {} | {} | {} | {} | - | {} | - | - | - |",
            fmt_rate(r.target),
            fmt_f(r.mb_s()),
            fmt_f0(r.writes_s()),
            fmt_f(r.write_ns),
            r.writes,
            r.bytes
        ),
    };
    format!("| {size} B | {capture}\n")
}

fn throughput_verdict(st: &SizeThroughput) -> String {
    let full = &st.full;
    if full.lost() == 0 {
        return format!(
            "- {} B writes: no record lost at full speed ({:.1} MB/s captured; {:.1} MB/s \
             without capture).\n",
            st.size,
            full.mb_s(),
            st.base_full.mb_s()
        );
    }
    let mut s = format!(
        "- {} B writes: records WERE lost at full speed: {} records ({} bytes) at {:.1} MB/s \
         ({:.1} MB/s without capture).",
        st.size,
        full.lost(),
        full.summary.map_or(0, |c| c.lost_bytes),
        full.mb_s(),
        st.base_full.mb_s()
    );
    match (st.best_lossless(), &st.paced_base) {
        (Some(b), Some(base)) => {
            s += &format!(
                " Highest rate tested without loss: {:.1} MB/s ({:.0} writes/s); at that pace \
                 a write takes {:.1} ns captured vs {:.1} ns without capture ({:+.1} ns).\n",
                b.mb_s(),
                b.writes_s(),
                b.write_ns,
                base.write_ns,
                b.write_ns - base.write_ns
            )
        }
        _ => s += " Records were lost at every rate tested.\n",
    }
    s
}

/// The design comparison from the probe part.
fn design_section(p: &ProbeCost) -> String {
    let mut s = String::from(
        "## Design comparison: added ns per syscall of an untraced process\n\n\
         | design | probed syscall (write) | unprobed syscall (getppid) |\n\
         | --- | ---: | ---: |\n",
    );
    for st in [
        State::NriTrace,
        State::FloorClassic,
        State::FloorRaw,
        State::FloorRawFiltered,
    ] {
        let (w, g) = p.added(st);
        s += &format!("| {} | {w:+.1} | {g:+.1} |\n", st.label());
    }
    s += "\nBreak-even share p* of probed syscalls (below it the classic design costs less):\n\n";
    for (c, r) in [
        (State::NriTrace, State::FloorRawFiltered),
        (State::FloorClassic, State::FloorRaw),
    ] {
        s += &format!(
            "- {} vs {}: {}\n",
            c.label(),
            r.label(),
            fmt_break_even(p.added(c), p.added(r))
        );
    }
    s
}

fn fmt_break_even(classic: (f64, f64), raw: (f64, f64)) -> String {
    match break_even(classic, raw) {
        Some(x) if (0.0..=1.0).contains(&x) => format!("p* = {:.1} %", x * 100.0),
        _ => {
            // No crossing in [0, 1]: one design is cheaper at every mix.
            let cheaper = if expected(classic, 0.5) < expected(raw, 0.5) {
                "classic"
            } else {
                "raw"
            };
            format!("no crossing in [0, 1]: {cheaper} costs less at every share")
        }
    }
}

fn mix_section(m: &Mix, p: Option<&ProbeCost>, workload: Option<&str>) -> String {
    let share = m.probed_share();
    let mut s = format!(
        "## Syscall mix\n\n\
         Counted system-wide for {} s with bpftrace (`tracepoint:raw_syscalls:sys_enter`){}. \
         This is the mix of this machine, not of a Kubernetes node.\n\n\
         {} syscalls, {} probed: probed share p = {:.1} %.\n\n\
         | syscall nr | name | probed | count | share |\n| ---: | --- | --- | ---: | ---: |\n",
        m.seconds,
        workload.map_or_else(
            || ", with no workload of its own (whatever else ran on the machine is in it)".into(),
            |w| format!(" while `{w}` ran")
        ),
        m.total(),
        m.probed(),
        share * 100.0
    );
    let names = syscall_names();
    for (nr, n) in m.counts.iter().take(15) {
        let name = names.get(nr).map_or("", String::as_str);
        let probed = if PROBED.iter().any(|p| p.0 == *nr) {
            "yes"
        } else {
            ""
        };
        s += &format!(
            "| {nr} | {name} | {probed} | {n} | {:.1} % |\n",
            *n as f64 * 100.0 / m.total() as f64
        );
    }
    if let Some(p) = p {
        s += "\nExpected added cost per syscall of an untraced process over this mix:\n\n\
              | design | ns per syscall |\n| --- | ---: |\n";
        for st in [
            State::NriTrace,
            State::FloorClassic,
            State::FloorRaw,
            State::FloorRawFiltered,
        ] {
            s += &format!(
                "| {} | {:+.1} |\n",
                st.label(),
                expected(p.added(st), share)
            );
        }
    }
    s
}

fn nri_decode_section(d: &NriDecode) -> String {
    let mut s = format!(
        "## NRI decode throughput\n\n\
         One run = the whole recording, on one core ({}); criterion medians. \
         MB/s = captured payload bytes (10^6) per second.\n\n\
         Input: `{}`\n\n\
         | benchmark | what it runs | time per run (us) | MB/s | messages/s |\n\
         | --- | --- | ---: | ---: | ---: |\n",
        d.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        d.input
    );
    for ((_, label, what), ns) in NRI_DECODE.iter().zip(d.ns) {
        s += &format!(
            "| {label} | {what} | {:.1} | {:.1} | {:.0} |\n",
            ns / 1e3,
            d.bytes * 1e3 / ns,
            d.messages * 1e9 / ns
        );
    }
    let bookkeeping = d.rest() - d.framing();
    s += &format!(
        "\nframing + bookkeeping (full - prost_only): {:.1} us = {:.2} x prost_only; \
         bookkeeping alone (full - prost_only - framing): {:.1} us = {:.2} x prost_only, \
         of which routing and observations (full - assembler): {:.1} us.\n",
        d.rest() / 1e3,
        d.rest() / d.prost(),
        bookkeeping / 1e3,
        bookkeeping / d.prost(),
        (d.full() - d.assembler()) / 1e3
    );
    s
}

fn cri_decode_section(d: &CriDecode) -> String {
    let mut s = format!(
        "## CRI decode throughput\n\n\
         One run = the whole recording, on one core ({}); criterion medians. \
         MB/s = captured payload bytes (10^6) per second. Headline: `{}`.\n\n",
        d.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        CRI_INPUTS[0]
    );
    for i in &d.inputs {
        s += &format!("Input `{}`: `{}`\n\n", i.name, i.input);
    }
    s += "| input | benchmark | what it runs | time per run (us) | MB/s | calls/s |\n\
          | --- | --- | --- | ---: | ---: | ---: |\n";
    for i in &d.inputs {
        for ((label, what), ns) in CRI_DECODE.iter().zip(i.ns) {
            let Some(ns) = ns else { continue };
            s += &format!(
                "| {} | {label} | {what} | {:.1} | {:.1} | {:.0} |\n",
                i.name,
                ns / 1e3,
                i.bytes * 1e3 / ns,
                i.calls * 1e9 / ns
            );
        }
    }
    for i in &d.inputs {
        let [Some(full), Some(framing), Some(prost), shapes] = i.ns else {
            continue;
        };
        let rest = full - prost;
        s += &format!(
            "\n`{}`: full = {:.2} x prost_only; framing + bookkeeping (full - prost_only): \
             {:.1} us = {:.2} x prost_only; bookkeeping alone (full - prost_only - framing): \
             {:.1} us = {:.2} x prost_only",
            i.name,
            full / prost,
            rest / 1e3,
            rest / prost,
            (rest - framing) / 1e3,
            (rest - framing) / prost
        );
        if let Some(shapes) = shapes {
            s += &format!(
                "; shape_inference: {:.1} us = {:.2} x prost_only",
                shapes / 1e3,
                shapes / prost
            );
        }
        s += ".\n";
    }
    s
}

/// The targets of the issue, checked against what was measured.
fn targets_section(
    p: Option<&ProbeCost>,
    t: Option<&TracedCost>,
    paced: Option<&PacedCost>,
    d: Option<&NriDecode>,
    e: Option<&TraceEngine>,
) -> String {
    let mut s = String::from("## Targets\n\n| target | measured | |\n| --- | --- | --- |\n");
    if let Some(p) = p {
        // Paired per round, like the added costs.
        let (dw, dg) = p.diff(State::NriTrace, State::FloorClassic);
        let (bw, _) = p.diff(State::NriTrace, State::BpftracePair);
        s += &format!(
            "| nri-trace within 35 ns of floor-classic, write | {dw:+.1} ns | {} |\n\
             | nri-trace within 35 ns of floor-classic, getppid | {dg:+.1} ns | {} |\n\
             | nri-trace below the bpftrace pair, write | {bw:+.1} ns vs the pair | {} |\n",
            verdict(dw <= 35.0),
            verdict(dg <= 35.0),
            verdict(bw < 0.0)
        );
        let (sw, sg) = p.diff(State::Sandbox, State::FloorSandbox);
        let su = p.diff_unlinkat(State::Sandbox, State::FloorSandbox);
        let sx = p.exec_added();
        let (sbw, _) = p.diff(State::Sandbox, State::BpftracePair);
        s += &format!(
            "| nri-trace + sandbox probes within 35 ns of floor-sandbox, write | {sw:+.1} ns | {} |\n\
             | nri-trace + sandbox probes within 35 ns of floor-sandbox, getppid | {sg:+.1} ns | {} |\n\
             | nri-trace + sandbox probes within 35 ns of floor-sandbox, unlinkat (a probed path syscall) | {su:+.1} ns | {} |\n\
             | the exec probe within 35 ns of its floor, per exec (BPF statistics) | {sx:+.1} ns | {} |\n\
             | nri-trace + sandbox probes below the bpftrace pair, write | {sbw:+.1} ns vs the pair | {} |\n",
            verdict(sw <= 35.0),
            verdict(sg <= 35.0),
            verdict(su <= 35.0),
            verdict(sx <= 35.0),
            verdict(sbw < 0.0)
        );
    }
    if let Some(t) = t {
        for (i, &(_, size)) in TRACED_CASES.iter().enumerate() {
            let Some(size) = size else { continue };
            let added = t.added(i);
            s += &format!(
                "| under 1 us added per captured write, {size} B | {added:+.1} ns | {} |\n",
                verdict(added < 1000.0)
            );
        }
        s += &t.fit().target_row("under 1 us per captured write");
    }
    if let Some(p) = paced {
        for (i, size) in PACED_SIZES.iter().enumerate() {
            let added = p.added(i);
            s += &format!(
                "| under 1 us added per captured write at {PACED_WRITES_S:.0} writes/s, {size} B \
                 | {added:+.1} ns | {} |\n",
                verdict(added < 1000.0)
            );
        }
        s += &p.fit().target_row(&format!(
            "under 1 us per captured write at {PACED_WRITES_S:.0} writes/s"
        ));
    }
    if let Some(d) = d {
        s += &format!(
            "| NRI decoding: framing + bookkeeping below protobuf decoding \
             (full - prost_only < prost_only) | {:.1} us vs {:.1} us ({:.2} x) | {} |\n",
            d.rest() / 1e3,
            d.prost() / 1e3,
            d.rest() / d.prost(),
            verdict(d.rest() < d.prost())
        );
    }
    if let Some(e) = e {
        s += &format!(
            "| engine memory after {} pod lifecycles under {} MiB (VmHWM) | {:.1} MiB | {} |\n",
            fmt_f0(e.mem_lifecycles),
            MEMORY_TARGET_MIB,
            e.hwm_kib / 1024.0,
            e.memory_verdict()
        );
    }
    s
}

// --------------------------------------------------------------- helpers

/// The ring buffer size nri-trace uses by default (nri_trace_common's
/// DEFAULT_RING_BYTES; xtask does not depend on that crate).
fn nri_ring_bytes() -> u64 {
    16 << 20
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => f64::midpoint(s[n / 2 - 1], s[n / 2]),
    }
}

/// Median of the element-wise differences a[r] - b[r].
fn paired_diff(a: &[f64], b: &[f64]) -> f64 {
    median(&paired_diffs(a, b))
}

/// a - b, round by round.
fn paired_diffs(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

/// "median (min-max)"
fn fmt_spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.1} ({min:.1}-{max:.1})", median(v))
}

fn fmt_f(x: f64) -> String {
    format!("{x:.1}")
}

fn fmt_f0(x: f64) -> String {
    format!("{x:.0}")
}

fn fmt_rate(bytes_per_s: f64) -> String {
    if bytes_per_s <= 0.0 {
        "full speed".into()
    } else {
        format!("{:.1} MB/s", bytes_per_s / 1e6)
    }
}

fn fmt_bytes(b: u64) -> String {
    format!("default {} MiB ring buffer", b >> 20)
}

/// The added cost per write and per byte: a least-squares line through
/// the write sizes whose captured runs lost no record. A size with losses
/// is left out: a failed ring-buffer output skips the copy, so its added
/// cost is not what capturing those bytes costs, and it pulled the line's
/// slope down and its per-write part up (benchmarks.md, 2026-11-22).
struct SizeFit {
    /// (ns per byte, ns per write); None with fewer than two sizes.
    line: Option<(f64, f64)>,
    sizes: Vec<u64>,
    /// (size, records lost) of the sizes left out.
    left_out: Vec<(u64, u64)>,
}

impl SizeFit {
    fn new(points: impl Iterator<Item = (u64, f64, u64)>) -> Self {
        let (mut xs, mut ys, mut sizes, mut left_out) = (vec![], vec![], vec![], vec![]);
        for (size, added, lost) in points {
            if lost > 0 {
                left_out.push((size, lost));
            } else {
                xs.push(size as f64);
                ys.push(added);
                sizes.push(size);
            }
        }
        let line = (xs.len() >= 2).then(|| fit(&xs, &ys));
        SizeFit {
            line,
            sizes,
            left_out,
        }
    }

    /// The sizes the line goes through, "64, 4096".
    fn sizes_used(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(u64::to_string).collect();
        sizes.join(", ")
    }

    fn sentence(&self) -> String {
        let left: Vec<String> = self
            .left_out
            .iter()
            .map(|(size, lost)| format!("{size} B ({lost} records lost)"))
            .collect();
        let left = if left.is_empty() {
            String::new()
        } else {
            format!(
                "; left out, since the capture lost records there: {}",
                left.join(", ")
            )
        };
        match self.line {
            Some((slope, intercept)) => format!(
                "\nLeast-squares fit of the added cost over the write sizes without lost \
                 records ({} B{left}): {intercept:.1} ns per write + {slope:.4} ns per byte \
                 ({:.0} ns per KiB).\n",
                self.sizes_used(),
                slope * 1024.0
            ),
            None => format!("\nNo fit: fewer than two write sizes without lost records{left}.\n"),
        }
    }

    /// The targets table's row for the per-write part.
    fn target_row(&self, what: &str) -> String {
        match self.line {
            Some((slope, intercept)) => format!(
                "| {what}, per-write part of the fit over {} B (plus {slope:.4} ns per byte) \
                 | {intercept:+.1} ns | {} |\n",
                self.sizes_used(),
                verdict(intercept < 1000.0)
            ),
            None => format!(
                "| {what}, per-write part of the fit | no fit: fewer than two sizes without loss \
                 | not measured |\n"
            ),
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Least-squares line through (xs, ys): (slope, intercept).
fn fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let slope = sxy / sxx;
    (slope, my - slope * mx)
}

/// The number after the last of `keys`, each searched after the previous
/// one (enough for criterion's and nri-trace's flat JSON; xtask has no JSON
/// dependency).
pub(crate) fn json_number(s: &str, keys: &[&str]) -> Option<f64> {
    let mut at = 0;
    for k in keys {
        at += s[at..].find(k)? + k.len();
    }
    let rest = s[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The string value after `key` (no escapes expected: paths).
pub(crate) fn json_string(s: &str, key: &str) -> Option<String> {
    let at = s.find(key)? + key.len();
    let rest = s[at..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_criterion_median() {
        let s = r#"{"mean":{"confidence_interval":{"lower_bound":1.0},"point_estimate":2.5},"median":{"confidence_interval":{"confidence_level":0.95},"point_estimate":136.93,"standard_error":0.3},"median_abs_dev":{"point_estimate":2.4}}"#;
        assert_eq!(
            json_number(s, &["\"median\":", "\"point_estimate\":"]),
            Some(136.93)
        );
    }

    #[test]
    fn span_pod_reads_the_pod_object() {
        let named = r#"{"v":1,"type":"cri_span","method":"StopPodSandbox","pod":{"name":"web-1","namespace":"team-3","uid":"u","attempt":0},"sandbox_id":"ab","container":null,"hooks":[]}"#;
        assert_eq!(
            span_pod(named),
            Some(("team-3".to_string(), "web-1".to_string()))
        );
        let unnamed = r#"{"v":1,"type":"cri_span","method":"StopPodSandbox","pod":null,"sandbox_id":"ab","container":{"name":"c","attempt":0}}"#;
        assert_eq!(span_pod(unnamed), None);
    }

    #[test]
    fn break_even_of_crossing_lines() {
        // classic: probed +300, other +45; raw: +200 everywhere.
        let p = break_even((300.0, 45.0), (200.0, 200.0)).unwrap();
        assert!((expected((300.0, 45.0), p) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn size_fit_leaves_out_lossy_sizes() {
        let f = SizeFit::new([(64, 800.0, 0), (4096, 1200.0, 0), (65536, 900.0, 7)].into_iter());
        let (slope, intercept) = f.line.unwrap();
        assert!((slope - 400.0 / 4032.0).abs() < 1e-9);
        assert!((intercept - (800.0 - 64.0 * slope)).abs() < 1e-9);
        assert_eq!(f.left_out, vec![(65536, 7)]);
        assert!(f.sentence().contains("65536 B (7 records lost)"));
        assert!(f.target_row("x").contains("over 64, 4096 B"));
        let one = SizeFit::new([(64, 800.0, 0), (4096, 1200.0, 3)].into_iter());
        assert!(one.line.is_none());
        assert!(one.target_row("x").contains("not measured"));
    }

    #[test]
    fn parses_bpftrace_map_lines() {
        assert_eq!(parse_map_line("@[1]: 1234"), Some((1, 1234)));
        assert_eq!(parse_map_line("Attaching 2 probes..."), None);
    }
}
