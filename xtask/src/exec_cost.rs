//! The exec probe's own cost per exec, read from the kernel's BPF
//! statistics (part of `cargo xtask bench --only probe`).
//!
//! `sandbox_exec` (sched/sched_process_exec) runs on every exec of the node.
//! What it adds, tens to hundreds of ns, is far below the spread of one
//! fork+exec (about 630 us here, varying by microseconds), so a timed loop
//! of execs cannot resolve it the way the criterion loops resolve a
//! syscall. The kernel's statistics can: while `kernel.bpf_stats_enabled`
//! is 1, every run of a program adds its own time to the program's
//! `run_time_ns` and 1 to its `run_cnt` (`bpf_prog_run` in
//! include/linux/filter.h, Documentation/admin-guide/sysctl/kernel.rst).
//! They are on only around the exec loop: they cost every program run two
//! clock reads, which would shift the syscall figures of the same state.
//! Both figures (the probe's and its floor's, `floor_exec`) include those
//! reads, so the difference does not.

use std::{path::Path, process::Command};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Execs per measurement.
const EXECS: u32 = 2_000;

/// One program of `bpftool prog show -j` (the fields read here; bpftool
/// leaves the statistics out while they are zero).
#[derive(Deserialize)]
struct ProgInfo {
    id: u32,
    #[serde(default)]
    name: String,
    #[serde(default)]
    run_time_ns: u64,
    #[serde(default)]
    run_cnt: u64,
}

/// The ids of the BPF programs process `owner` holds a descriptor of
/// (`prog_id:` in /proc/PID/fdinfo, kernel/bpf/syscall.c
/// bpf_prog_show_fdinfo). Debian's bpftool is built without the `pids`
/// field that would say it.
fn owned_prog_ids(owner: u32) -> Result<Vec<u32>> {
    let dir = format!("/proc/{owner}/fdinfo");
    let mut ids = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(text) = std::fs::read_to_string(e?.path()) else {
            continue;
        };
        ids.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("prog_id:"))
                .filter_map(|v| v.trim().parse::<u32>().ok()),
        );
    }
    Ok(ids)
}

/// The program `name` loaded by process `owner`: (run_time_ns, run_cnt).
/// By owner, because other nri-trace processes (a test, the lab) may have
/// a program of the same name loaded at the same time.
fn prog_stats(owner: u32, name: &str) -> Result<(u64, u64)> {
    let owned = owned_prog_ids(owner)?;
    let out = Command::new("bpftool")
        .args(["prog", "show", "-j"])
        .output()
        .context("running bpftool prog show (Debian's bpftool; `cargo xtask setup`)")?;
    if !out.status.success() {
        bail!(
            "bpftool prog show failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let progs: Vec<ProgInfo> =
        serde_json::from_slice(&out.stdout).context("parsing bpftool prog show -j")?;
    progs
        .iter()
        .find(|p| p.name == name && owned.contains(&p.id))
        .map(|p| (p.run_time_ns, p.run_cnt))
        .with_context(|| format!("no BPF program {name} of pid {owner} in bpftool prog show"))
}

/// Puts the statistics sysctl back as it was, however the measurement ends.
struct StatsOn {
    before: String,
}

impl StatsOn {
    fn enable() -> Result<StatsOn> {
        let before = std::fs::read_to_string(STATS_SYSCTL)
            .with_context(|| format!("reading {STATS_SYSCTL}"))?;
        std::fs::write(STATS_SYSCTL, "1")
            .with_context(|| format!("writing 1 to {STATS_SYSCTL}"))?;
        Ok(StatsOn { before })
    }
}

impl Drop for StatsOn {
    fn drop(&mut self) {
        let _ = std::fs::write(STATS_SYSCTL, self.before.trim());
    }
}

/// The mean own run time, in ns per run, of program `name` of process
/// `owner` over [`EXECS`] fork+execs of /bin/true (and whatever else the
/// machine execs meanwhile: every exec runs it).
pub(crate) fn ns_per_exec(owner: u32, name: &str) -> Result<f64> {
    let stats = StatsOn::enable()?;
    let (t0, n0) = prog_stats(owner, name)?;
    let truth = Path::new("/bin/true");
    for _ in 0..EXECS {
        let status = Command::new(truth).status().context("running /bin/true")?;
        if !status.success() {
            bail!("/bin/true failed: {status}");
        }
    }
    let (t1, n1) = prog_stats(owner, name)?;
    drop(stats);
    let runs = n1.saturating_sub(n0);
    if runs < u64::from(EXECS) {
        bail!("{name} ran {runs} times over {EXECS} execs: is it attached to sched_process_exec?");
    }
    Ok(t1.saturating_sub(t0) as f64 / runs as f64)
}
