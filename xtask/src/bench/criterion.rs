//! Running criterion: the probe parts' context (the criterion benchmark
//! `nri-trace/benches/syscall_cost.rs`, built once, run pinned to the
//! measurement CPU; the tool checks; the estimates criterion writes), and
//! the runs of the benches that attach no probe (the decode, engine and
//! TUI parts).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{bail, Context, Result};

use super::{
    child::Proc,
    json::{json_number, json_string},
};

// ------------------------------------------------------------ setting up

/// CPU the measured process is pinned to, and CPU for everything else.
pub(super) const BENCH_CPU: &str = "1";
pub(super) const HELPER_CPU: &str = "0";

pub(super) struct Ctx {
    nri_trace: PathBuf,
    pub(super) bench_exe: PathBuf,
    /// Sockets, ready files and the report.
    pub(super) work: PathBuf,
    /// Where criterion writes its estimates (CRITERION_HOME).
    criterion_home: PathBuf,
    quick: bool,
}

impl Ctx {
    pub(super) fn prepare(quick: bool) -> Result<Ctx> {
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
    pub(super) fn bench_cmd(&self) -> Command {
        let mut c = pinned(BENCH_CPU, &self.bench_exe);
        // Without --bench, criterion runs each benchmark once as a test.
        c.arg("--bench").env("CRITERION_HOME", &self.criterion_home);
        if self.quick {
            c.args(QUICK_ARGS);
        }
        c
    }

    /// `nri-trace ARGS` on the helper CPU.
    pub(super) fn nri_trace_cmd(&self, args: &[&str]) -> Command {
        let mut c = pinned(HELPER_CPU, &self.nri_trace);
        c.args(args);
        c
    }

    /// criterion's median for benchmark `id` (e.g. "untraced/getppid"), in
    /// ns per iteration.
    pub(super) fn median_ns(&self, id: &str) -> Result<f64> {
        read_median_ns(&self.estimates(id))
    }

    fn estimates(&self, id: &str) -> PathBuf {
        estimates_path(&self.criterion_home, id)
    }

    /// Remove the estimates of `ids`, so that a run that fails to write them
    /// cannot be read as a result of the previous run.
    pub(super) fn forget(&self, ids: &[&str]) {
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

pub(super) fn pinned(cpu: &str, program: &Path) -> Command {
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
        // The decoders' layers the benches drive (nri-trace/src/testing.rs).
        .args(["--features", "testing"])
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

/// What a decode bench printed, and where it ran.
pub(super) struct DecodeRun {
    /// Its `<bench> input: ` lines, without the prefix.
    pub(super) inputs: Vec<String>,
    /// Everything it printed (stdout and stderr), line by line.
    pub(super) output: Vec<String>,
    /// The CPU the bench ran on, if pinned.
    pub(super) cpu: Option<&'static str>,
    criterion_home: PathBuf,
}

impl DecodeRun {
    pub(super) fn median_ns(&self, id: &str) -> Result<f64> {
        read_median_ns(&estimates_path(&self.criterion_home, id))
    }
}

/// Build and run nri-trace's criterion bench `bench` (pinned to the
/// measurement CPU when there are two CPUs and `taskset`). The estimates of
/// `ids` are removed first, so that a run that fails to write them cannot
/// be read as a result of the previous run.
pub(super) fn run_decode_bench(bench: &str, ids: &[String], quick: bool) -> Result<DecodeRun> {
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
pub(super) fn input_field<'a>(input: &'a str, key: &str) -> Result<&'a str> {
    input
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .with_context(|| format!("no {key}= in the input line: {input}"))
}

pub(super) fn input_number(input: &str, key: &str) -> Result<f64> {
    input_field(input, key)?
        .parse()
        .with_context(|| format!("{key}= is not a number in the input line: {input}"))
}
