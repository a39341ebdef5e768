//! The `nri-rate` part of `cargo xtask bench` (issue 23 item 4, "held at
//! rate"): nri-trace's release binary traces a runtime-side NRI peer
//! (`lab/src/bin/nri-rate.rs`, the `ttrpc` crate) that delivers pod and
//! container events to three of the lab's `nri-test-plugin`s at a paced
//! rate; the part counts what the peer sent and what nri-trace decoded,
//! reads nri-trace's capture loss and its CPU time, at 10,000 calls/s and
//! then at rising rates until records are lost or the peer cannot keep up.
//!
//! nri-trace runs the way a user runs it on a node whose runtime already
//! serves its sockets, in two modes, each rate once per mode: `nri-trace
//! watch -o json --cri-socket C --nri-socket N --no-cri-state` (the whole
//! pipeline: decoders, engine, sandbox probes, JSON; the peer binds C and
//! never serves it, so there is no CRI traffic and every NRI call comes out
//! as an `nri_uncaused` line) and `nri-trace debug nri --socket N -o json`
//! (the NRI decoder alone); the default ring (16 MiB), the plugins' ends
//! followed (the default).
//! Its CPU is utime + stime of /proc/PID/stat (all its threads), from the
//! moment the peer is told to start its plugins to the moment nri-trace has
//! printed the last call (or its output stopped growing for
//! [`SETTLE_QUIET`]), so the decode of calls still in the ring counts.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::bench::{json_number, json_string, loadavg, work_dir};

/// The rate.
pub(crate) const HELD_RATE: f64 = 10_000.0;
/// The target: nri-trace CPU per decoded call (issue 23 item 4), ms.
pub(crate) const TARGET_MS_PER_CALL: f64 = 0.1;
/// Output unchanged this long after the peer ended: nri-trace is done.
const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// After nri-trace is ready and before the idle window: its start's own
/// work (the sandbox probes' /proc walk, the first ticks) is over.
const IDLE_SETTLE: Duration = Duration::from_secs(3);
/// The idle part's target: nri-trace's CPU on a quiet node, % of a core
/// (issue 34 item 3).
pub(crate) const TARGET_IDLE_PCT: f64 = 0.1;
/// The idle part's short run after the quiet spell: the sleeping reader
/// must wake for it and decode every call.
const IDLE_THEN_RATE: f64 = 1000.0;
const IDLE_THEN_SECONDS: f64 = 2.0;
/// Plugins the peer starts (rate-1, rate-2, rate-3; all events).
pub(crate) const PLUGINS: usize = 3;
/// The NRI methods that carry events (v0.6.1); Configure and Synchronize
/// are counted apart.
const EVENT_METHODS: [&str; 4] = [
    "StateChange",
    "CreateContainer",
    "StopContainer",
    "UpdateContainer",
];

/// How nri-trace is run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Watch,
    DebugNri,
    /// `watch` exporting spans to the lab's collector (issue 33).
    WatchOtlp,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Watch => "`watch -o json`",
            Mode::DebugNri => "`debug nri -o json`",
            Mode::WatchOtlp => "`watch -o json --otlp-endpoint` (the lab's collector)",
        }
    }
}

/// One run at one rate.
pub(crate) struct RateRun {
    pub mode: Mode,
    pub target_rate: f64,
    pub in_flight: usize,
    /// From the peer's summary.
    pub sent: f64,
    pub answered_ok: f64,
    pub achieved_rate: f64,
    pub max_behind_ms: f64,
    pub peer_cpu_s: f64,
    /// The three plugins' CPU (the peer's reaped children).
    pub plugins_cpu_s: f64,
    /// nri-trace's `nri_call` lines of event methods from the runtime.
    pub decoded: u64,
    /// ... of which with outcome `ok`.
    pub decoded_ok: u64,
    /// The last `lost_records` nri-trace reported (0: none).
    pub lost_records: f64,
    pub resyncs: u64,
    /// nri-trace's CPU over the window, seconds, and the window.
    pub cpu_s: f64,
    pub window_s: f64,
    pub load_before: String,
    /// nri-trace's CPU while it waited, ready, with nothing happening
    /// before the plugins started, seconds, and that wait (the idle part).
    pub idle: Option<(f64, f64)>,
    /// With export on: (exported, dropped) spans, from `session_end`.
    pub exported_spans: Option<(f64, f64)>,
}

impl RateRun {
    fn cpu_per_s(&self) -> f64 {
        self.cpu_s / self.window_s
    }
    /// ms of nri-trace CPU per second of run, per 1,000 calls/s achieved.
    fn ms_per_s_per_kcalls(&self) -> f64 {
        self.cpu_per_s() * 1e3 / (self.achieved_rate / 1e3)
    }
    fn ms_per_call(&self) -> f64 {
        self.cpu_s * 1e3 / self.decoded.max(1) as f64
    }
    fn missing(&self) -> f64 {
        self.sent - self.decoded as f64
    }
    /// Every call decoded, no loss.
    pub(crate) fn held(&self) -> bool {
        self.lost_records == 0.0 && self.missing() <= 0.0 && self.decoded_ok as f64 >= self.sent
    }
    /// The peer reached at least 95 % of the rate asked.
    fn peer_kept_up(&self) -> bool {
        self.achieved_rate >= 0.95 * self.target_rate
    }
}

pub(crate) struct NriRate {
    pub runs: Vec<RateRun>,
}

/// Build the release nri-trace and the peer, run `HELD_RATE`, then each of
/// `ramp` (ascending) until records are lost or the peer cannot keep up.
pub(crate) fn nri_rate(seconds: f64, in_flight: usize, ramp: &[f64]) -> Result<NriRate> {
    let nri_trace = crate::build(true)?;
    let peer = crate::release_lab_bins(&["nri-rate", "nri-test-plugin"])?.join("nri-rate");
    let work = work_dir()?;
    let mut runs = vec![];
    let mut rates = vec![HELD_RATE];
    rates.extend(ramp.iter().copied().filter(|r| *r > HELD_RATE));
    // Each mode climbs until it loses records or the peer cannot keep up.
    let mut climbing = vec![Mode::Watch, Mode::DebugNri];
    for (i, rate) in rates.into_iter().enumerate() {
        for mode in climbing.clone() {
            eprintln!(
                "bench: nri-rate at {rate} calls/s for {seconds} s, {}",
                mode.label()
            );
            let r = rate_run(
                &nri_trace, &peer, &work, mode, rate, seconds, in_flight, None,
            )?;
            eprintln!(
                "bench: nri-rate: sent {} ({:.0}/s), decoded {}, lost records {}, nri-trace CPU {:.2} s",
                r.sent, r.achieved_rate, r.decoded, r.lost_records, r.cpu_s
            );
            if i > 0 && (!r.held() || !r.peer_kept_up()) {
                climbing.retain(|m| *m != mode);
            }
            runs.push(r);
        }
        if climbing.is_empty() {
            break;
        }
    }
    // Export on, at the held rate, right after the runs without it: what
    // the spans cost (issue 33). The lab's collector takes them.
    let collector = Collector::start(&work)?;
    for mode in [Mode::Watch, Mode::WatchOtlp] {
        eprintln!(
            "bench: nri-rate at {HELD_RATE} calls/s for {seconds} s, {}",
            mode.label()
        );
        let r = rate_run(
            &nri_trace, &peer, &work, mode, HELD_RATE, seconds, in_flight, None,
        )?;
        eprintln!(
            "bench: nri-rate: decoded {}, nri-trace CPU {:.2} s, spans exported {:?}",
            r.decoded, r.cpu_s, r.exported_spans
        );
        runs.push(r);
    }
    drop(collector);
    Ok(NriRate { runs })
}

/// Lines of a child's pipe, with when they came.
pub(crate) fn lines_of(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

pub(crate) fn wait_line(
    rx: &mpsc::Receiver<String>,
    what: &str,
    seen: &mut Vec<String>,
) -> Result<String> {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let hit = l.contains(what);
                seen.push(l.clone());
                if hit {
                    return Ok(l);
                }
            }
            Err(_) => bail!(
                "no line containing {what:?} (ended or 60 s); its output:\n  {}",
                seen.join("\n  ")
            ),
        }
    }
}

/// What nri-trace's JSON said so far.
#[derive(Default)]
struct Decoded {
    events: AtomicU64,
    events_ok: AtomicU64,
    resyncs: AtomicU64,
    lines: AtomicU64,
    lost_records: Mutex<f64>,
    /// `session_end`'s `otlp` (exported, dropped), when export ran.
    exported: Mutex<Option<(f64, f64)>>,
}

/// Count nri-trace's stdout lines as they come (a 10 s run at 10,000
/// calls/s prints 100,000 lines: counted, not kept).
fn count_json(out: impl std::io::Read + Send + 'static, d: Arc<Decoded>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            d.lines.fetch_add(1, Ordering::Relaxed);
            // `debug nri` prints calls as `nri_call`; `watch`, with no CRI
            // call in flight, as `nri_uncaused` (the same fields).
            if l.contains("\"type\":\"nri_call\"") || l.contains("\"type\":\"nri_uncaused\"") {
                if !l.contains("\"caller\":\"runtime\"") {
                    continue;
                }
                let method = json_string(&l, "\"method\":").unwrap_or_default();
                if EVENT_METHODS.contains(&method.as_str()) {
                    d.events.fetch_add(1, Ordering::Relaxed);
                    if l.contains("\"outcome\":{\"kind\":\"ok\"") {
                        d.events_ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            } else if l.contains("\"type\":\"capture_loss\"") {
                if let Some(n) = json_number(&l, &["\"lost_records\":"]) {
                    *d.lost_records.lock().unwrap() = n;
                }
            } else if l.contains("\"type\":\"nri_resync\"") {
                d.resyncs.fetch_add(1, Ordering::Relaxed);
            } else if l.contains("\"type\":\"session_end\"") {
                if let (Some(e), Some(x)) = (
                    json_number(&l, &["\"exported_spans\":"]),
                    json_number(&l, &["\"dropped_spans\":"]),
                ) {
                    *d.exported.lock().unwrap() = Some((e, x));
                }
            }
        }
    })
}

/// utime + stime of a process (all threads), seconds.
pub(crate) fn cpu_s(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').context("bad /proc stat")? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `after` starts at field 3.
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / clock_ticks())
}

/// A `kB` field of /proc/PID/status (`VmHWM:` the peak resident set,
/// `VmRSS:` the resident set), KiB.
pub(crate) fn status_kib(pid: u32, field: &str) -> Result<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Kills the child when dropped (a failed step leaves nothing behind).
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn rate_run(
    nri_trace: &Path,
    peer: &Path,
    work: &Path,
    mode: Mode,
    rate: f64,
    seconds: f64,
    in_flight: usize,
    idle: Option<Duration>,
) -> Result<RateRun> {
    let sock = work.join("nri-rate.sock");
    let cri = work.join("nri-rate-cri.sock");
    let load_before = loadavg();
    // 1. The peer serves its socket and waits.
    let mut p = Command::new(peer)
        .arg("--socket")
        .arg(&sock)
        .arg("--cri-socket")
        .arg(&cri)
        .args(["--plugins", &PLUGINS.to_string()])
        .args(["--rate", &rate.to_string()])
        .args(["--duration", &seconds.to_string()])
        .args(["--in-flight", &in_flight.to_string()])
        .arg("--wait-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", peer.display()))?;
    let mut go: ChildStdin = p.stdin.take().expect("piped");
    let peer_out = lines_of(p.stdout.take().expect("piped"));
    let peer_err = lines_of(p.stderr.take().expect("piped"));
    let mut peer = Killed(p);
    let mut peer_seen = vec![];
    wait_line(&peer_err, "nri-rate: listening", &mut peer_seen)?;

    // 2. nri-trace on it, as a user runs it.
    let mut t = Command::new(nri_trace);
    match mode {
        Mode::Watch => t
            .args(["watch", "-o", "json", "--no-cri-state", "--cri-socket"])
            .arg(&cri)
            .arg("--nri-socket")
            .arg(&sock),
        Mode::DebugNri => t
            .args(["debug", "nri", "-o", "json", "--socket"])
            .arg(&sock),
        Mode::WatchOtlp => t
            .args(["watch", "-o", "json", "--no-cri-state"])
            .args(["--otlp-endpoint", Collector::ENDPOINT, "--cri-socket"])
            .arg(&cri)
            .arg("--nri-socket")
            .arg(&sock),
    };
    let mut t = t
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", nri_trace.display()))?;
    let decoded = Arc::new(Decoded::default());
    let counter = count_json(t.stdout.take().expect("piped"), Arc::clone(&decoded));
    let trace_err = lines_of(t.stderr.take().expect("piped"));
    let mut tracer = Killed(t);
    let mut trace_seen = vec![];
    wait_line(&trace_err, "nri-trace: ready", &mut trace_seen)?;
    let pid = tracer.0.id();
    // 2b. The idle part: nothing happens for a while (the sockets served,
    // no plugin yet); what nri-trace's clocks cost on a quiet node.
    let idle = match idle {
        Some(d) => {
            thread::sleep(IDLE_SETTLE);
            let (c0, t0) = (cpu_s(pid)?, Instant::now());
            thread::sleep(d);
            Some((cpu_s(pid)? - c0, t0.elapsed().as_secs_f64()))
        }
        None => None,
    };

    // 3. Go: the plugins connect, register, are configured, synchronized,
    // then the paced events.
    let cpu0 = cpu_s(pid)?;
    let t0 = Instant::now();
    go.write_all(b"go\n")?;
    drop(go);
    let summary =
        wait_line(&peer_out, "nri_rate_summary", &mut peer_seen).context("the peer's summary")?;
    let status = peer.0.wait()?;
    if !status.success() {
        bail!("nri-rate failed ({status}): {}", peer_seen.join("\n  "));
    }
    let num = |k: &str| {
        json_number(&summary, &[&format!("\"{k}\":")])
            .with_context(|| format!("no {k} in the peer's summary {summary}"))
    };
    let sent = num("calls_sent")?;

    // 4. Until nri-trace has printed every call, or its output stops.
    let mut last = (decoded.lines.load(Ordering::Relaxed), Instant::now());
    loop {
        thread::sleep(Duration::from_millis(100));
        let n = decoded.lines.load(Ordering::Relaxed);
        if decoded.events.load(Ordering::Relaxed) as f64 >= sent {
            break;
        }
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() >= SETTLE_QUIET {
            break;
        }
        if let Ok(Some(st)) = tracer.0.try_wait() {
            bail!(
                "nri-trace ended during the run ({st}): {}",
                trace_seen.join("\n  ")
            );
        }
    }
    let cpu_s = cpu_s(pid)? - cpu0;
    let window_s = t0.elapsed().as_secs_f64();
    // SIGTERM: nri-trace drains and exits; its last loss line comes then.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tracer.0.try_wait()?.is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    drop(tracer);
    let _ = counter.join();
    while let Ok(l) = trace_err.try_recv() {
        trace_seen.push(l);
    }
    let lost_records = *decoded.lost_records.lock().unwrap();
    let exported_spans = *decoded.exported.lock().unwrap();
    let _ = fs::remove_file(&sock);
    let _ = fs::remove_file(&cri);
    Ok(RateRun {
        mode,
        target_rate: rate,
        in_flight,
        sent,
        answered_ok: num("calls_ok")?,
        achieved_rate: num("achieved_rate")?,
        max_behind_ms: num("max_behind_schedule_ms")?,
        peer_cpu_s: num("peer_cpu_s")?,
        plugins_cpu_s: num("plugins_cpu_s")?,
        decoded: decoded.events.load(Ordering::Relaxed),
        decoded_ok: decoded.events_ok.load(Ordering::Relaxed),
        lost_records,
        resyncs: decoded.resyncs.load(Ordering::Relaxed),
        cpu_s,
        window_s,
        load_before,
        idle,
        exported_spans,
    })
}

/// The lab's OpenTelemetry Collector (lab/otelcol.sh), its spans to a
/// file in the bench's work directory; stopped when dropped.
pub(crate) struct Collector {
    _child: Killed,
}

impl Collector {
    /// Its OTLP/gRPC receiver (lab/otelcol.sh config).
    pub(crate) const ENDPOINT: &str = "http://127.0.0.1:4317";
    /// Its OTLP/HTTP receiver (containerd's exporter).
    pub(crate) const HTTP_ENDPOINT: &str = "http://127.0.0.1:4318";

    pub(crate) fn start(work: &Path) -> Result<Self> {
        let script = crate::workspace_root().join("lab/otelcol.sh");
        let sh = |args: &[&str]| -> Result<String> {
            let o = Command::new("bash").arg(&script).args(args).output()?;
            if !o.status.success() {
                bail!(
                    "lab/otelcol.sh {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let bin = sh(&["install"])?;
        let spans = work.join("otlp-spans.json");
        let _ = fs::remove_file(&spans);
        let config = work.join("otelcol.yaml");
        fs::write(&config, sh(&["config", &spans.display().to_string()])?)?;
        let c = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(work.join("otelcol.log"))?)
            .spawn()?;
        let c = Killed(c);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect("127.0.0.1:4317").is_err() {
            if Instant::now() > deadline {
                bail!(
                    "the collector did not listen on 127.0.0.1:4317 (log: {})",
                    work.join("otelcol.log").display()
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(Collector { _child: c })
    }
}

pub(crate) fn nri_rate_section(n: &NriRate) -> String {
    let mut s = format!(
        "## Held at rate: NRI calls from a ttrpc peer\n\n\
         nri-trace's release build (default 16 MiB ring, the plugins' ends followed) \
         tracing `nri-rate` (lab/src/bin/nri-rate.rs: the runtime side of NRI v0.6.1 on \
         the `ttrpc` crate) while it delivers pod lifecycles (9 events each, as \
         StateChange, CreateContainer and StopContainer) to {PLUGINS} `nri-test-plugin`s \
         subscribed to every event, paced at the rate asked with up to {} lifecycles in \
         flight. Two modes per rate: `watch -o json --no-cri-state` (decoders, engine, \
         sandbox probes, JSON; no CRI traffic, so each call is an `nri_uncaused` line) \
         and `debug nri -o json` (the NRI decoder alone). Decoded: nri-trace's lines for \
         the runtime's event calls; CPU: nri-trace's utime+stime (/proc/PID/stat, all \
         threads) from the start of the plugins to its last line (registration and \
         Synchronize included). The peer's CPU and its plugins' (getrusage: \
         RUSAGE_SELF, RUSAGE_CHILDREN) show what else the cores carried. Nothing \
         pinned; each mode climbs the rates until it loses records or the peer falls \
         5 % short of the rate.\n\n\
         | mode | rate asked (calls/s) | peer achieved (calls/s) | peer max behind (ms) \
         | calls sent | answered ok | decoded | of them ok | lost records | resyncs | \
         nri-trace CPU (s) / window (s) | CPU, % of a core | ms CPU/s per 1,000 calls/s \
         | ms CPU per decoded call | peer CPU (s) | plugins' CPU (s) | load before |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | \
         ---: | ---: | ---: | ---: | ---: | --- |\n",
        n.runs.first().map_or(0, |r| r.in_flight),
    );
    for r in &n.runs {
        s += &format!(
            "| {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | {} | {} | {:.0} | {} | {:.2} / \
             {:.1} | {:.0} % | {:.2} | {:.3} | {:.2} | {:.2} | {} |\n",
            r.mode.label(),
            r.target_rate,
            r.achieved_rate,
            r.max_behind_ms,
            r.sent,
            r.answered_ok,
            r.decoded,
            r.decoded_ok,
            r.lost_records,
            r.resyncs,
            r.cpu_s,
            r.window_s,
            r.cpu_per_s() * 100.0,
            r.ms_per_s_per_kcalls(),
            r.ms_per_call(),
            r.peer_cpu_s,
            r.plugins_cpu_s,
            r.load_before,
        );
    }
    s += "\n";
    for h in n.runs.iter().filter(|r| r.target_rate == HELD_RATE) {
        s += &format!(
            "- {} at {:.0} calls/s: {}; {:.3} ms of nri-trace CPU per decoded call against \
             the target of at most {TARGET_MS_PER_CALL} ms: **{}**.\n",
            h.mode.label(),
            h.target_rate,
            if h.held() {
                "every call decoded, 0 lost records".to_string()
            } else {
                format!(
                    "{:.0} of {:.0} calls missing, {:.0} lost records",
                    h.missing().max(0.0),
                    h.sent,
                    h.lost_records
                )
            },
            h.ms_per_call(),
            if h.held() && h.ms_per_call() <= TARGET_MS_PER_CALL {
                "met"
            } else {
                "missed"
            },
        );
    }
    // The export pair: the last `watch` run without export, then with.
    if let Some(on) = n.runs.iter().rfind(|r| r.mode == Mode::WatchOtlp) {
        if let Some(off) = n.runs.iter().rfind(|r| r.mode == Mode::Watch) {
            let (exported, dropped) = on.exported_spans.unwrap_or((0.0, 0.0));
            s += &format!(
                "- OTLP export at {:.0} calls/s: {:.4} ms of nri-trace CPU per decoded call with \
                 it, {:.4} ms without (the run just before), {:+.0} %; {exported:.0} spans \
                 exported, {dropped:.0} dropped.\n",
                on.target_rate,
                on.ms_per_call(),
                off.ms_per_call(),
                (on.ms_per_call() / off.ms_per_call() - 1.0) * 100.0,
            );
        }
    }
    for mode in [Mode::Watch, Mode::DebugNri] {
        let runs: Vec<_> = n.runs.iter().filter(|r| r.mode == mode).collect();
        let first_loss = runs.iter().find(|r| !r.held());
        let capped = runs.iter().find(|r| !r.peer_kept_up());
        s += &match (first_loss, capped) {
            (Some(r), _) => format!(
                "- {}: loss starts at {:.0} calls/s asked ({:.0} achieved).\n",
                mode.label(),
                r.target_rate,
                r.achieved_rate
            ),
            (None, Some(r)) => format!(
                "- {}: no loss up to the peer's limit: asked {:.0} calls/s, the peer made \
                 {:.0} on this machine, so loss starts above what it can make here.\n",
                mode.label(),
                r.target_rate,
                r.achieved_rate
            ),
            (None, None) => format!(
                "- {}: no loss at any rate run (up to {:.0} calls/s).\n",
                mode.label(),
                runs.last().map_or(0.0, |r| r.achieved_rate)
            ),
        };
    }
    s
}

/// The idle part (issue 34 item 3): in each mode, nri-trace ready on the
/// peer's sockets with nothing happening for `seconds`, its CPU over that
/// window; then a short run at [`IDLE_THEN_RATE`] calls/s, which its
/// reader, asleep by then, must wake for and decode in full.
pub(crate) fn idle_cost(seconds: f64) -> Result<Vec<RateRun>> {
    let nri_trace = crate::build(true)?;
    let peer = crate::release_lab_bins(&["nri-rate", "nri-test-plugin"])?.join("nri-rate");
    let work = work_dir()?;
    let mut runs = vec![];
    for mode in [Mode::Watch, Mode::DebugNri] {
        eprintln!("bench: idle for {seconds} s, {}", mode.label());
        let r = rate_run(
            &nri_trace,
            &peer,
            &work,
            mode,
            IDLE_THEN_RATE,
            IDLE_THEN_SECONDS,
            16,
            Some(Duration::from_secs_f64(seconds)),
        )?;
        if let Some((cpu, window)) = r.idle {
            eprintln!(
                "bench: idle: nri-trace CPU {cpu:.3} s in {window:.1} s; then sent {}, decoded {}",
                r.sent, r.decoded
            );
        }
        runs.push(r);
    }
    Ok(runs)
}

pub(crate) fn idle_section(runs: &[RateRun]) -> String {
    let mut s = String::from(
        "## Idle: nri-trace on a quiet node\n\n\
         nri-trace's release build ready on the `nri-rate` peer's sockets (served, no \
         plugin connected, nothing written) for the window; its CPU is utime+stime of \
         /proc/PID/stat over the window, which starts 3 s after its `ready` line. Then \
         the peer's plugins start and it sends calls for a short run, which nri-trace's \
         reader, asleep by then, must wake for: decoded counts them.\n\n\
         | mode | idle CPU (s) / window (s) | idle CPU, % of a core | target | then: calls \
         sent | decoded | lost records | load before |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |\n",
    );
    for r in runs {
        let Some((cpu, window)) = r.idle else {
            continue;
        };
        let pct = cpu / window * 100.0;
        s += &format!(
            "| {} | {cpu:.3} / {window:.1} | {pct:.3} % | at most {TARGET_IDLE_PCT} %: **{}** \
             | {:.0} | {} | {:.0} | {} |\n",
            r.mode.label(),
            if pct <= TARGET_IDLE_PCT {
                "met"
            } else {
                "missed"
            },
            r.sent,
            r.decoded,
            r.lost_records,
            r.load_before,
        );
    }
    s
}
