//! The probe part: syscalls of a process nri-trace does NOT track, with
//! nothing, the real capture, the design floors or a bpftrace pair
//! attached; and the design comparison drawn from it.

use std::{path::Path, process::Command, thread, time::Duration};

use anyhow::Result;

use super::{
    child::{idle_listener, start_capture, stop_capture, Proc, SETTLE},
    criterion::{Ctx, HELPER_CPU},
    mix::fmt_break_even,
    rounds::paired_diff,
    tables::fmt_spread,
};

// --------------------------------------------- part a: untraced process

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum State {
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

    pub(super) fn label(self) -> &'static str {
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

pub(super) struct ProbeCost {
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
    pub(super) fn diff(&self, s: State, base: State) -> (f64, f64) {
        let (a, b) = (self.row(s), self.row(base));
        (
            paired_diff(&a.write, &b.write),
            paired_diff(&a.getppid, &b.getppid),
        )
    }
    /// Added (write, getppid) cost over the `none` state.
    pub(super) fn added(&self, s: State) -> (f64, f64) {
        self.diff(s, State::None)
    }
    /// Added unlinkat cost of `s` over `base` (paired per round).
    pub(super) fn diff_unlinkat(&self, s: State, base: State) -> f64 {
        paired_diff(&self.row(s).unlinkat, &self.row(base).unlinkat)
    }
    /// The exec probe's own time per exec over its floor's (paired per
    /// round).
    pub(super) fn exec_added(&self) -> f64 {
        paired_diff(
            &self.row(State::Sandbox).exec,
            &self.row(State::FloorSandbox).exec,
        )
    }
}

pub(super) fn probe_cost(ctx: &Ctx, rounds: usize) -> Result<ProbeCost> {
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

// ---------------------------------------------------------------- report

pub(super) fn probe_section(p: &ProbeCost) -> String {
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

/// The design comparison from the probe part.
pub(super) fn design_section(p: &ProbeCost) -> String {
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
