//! Text lines the sinks share: an observation (`-o text`, `debug nri|cri`),
//! a finding with its evidence (the report), and both latency tables.

use std::io::{self, Write};

use super::{
    cri_lines,
    finding_message::{evidence_words, finding_message},
    nri_lines,
};
use crate::{
    engine::{
        conformance::{
            ClauseCase, ClauseTally, SANDBOX_RUNNING_AT_RUN_POD_SANDBOX,
            STOP_CONTAINER_ONCE_PER_EXIT, STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN,
            SYNCHRONIZE_TELLS_EXISTING_PODS,
        },
        cri_latency::MethodSummary,
        findings::{Certainty, Violation},
        hook_latency::HookSummary,
    },
    human::{clock, sanitize},
    model::observation::Observation,
};

/// An observation the engine passed on (or, in `debug nri|cri`, one the
/// decoders made), as text.
pub fn observation_text(w: &mut impl Write, o: &Observation) -> io::Result<()> {
    match o {
        Observation::Sandbox(s) => writeln!(w, "{} ~~ {}", clock(&s.ts), sanitize(&s.describe())),
        Observation::RuntimeExited { ts, pid } => {
            writeln!(w, "{} == runtime pid {pid} exited", clock(ts))
        }
        Observation::RuntimeStarted { ts, pid } => writeln!(
            w,
            "{} == runtime pid {pid} now serves the sockets (runtime restarted)",
            clock(ts)
        ),
        Observation::CriConnection {
            conn,
            ts,
            client,
            client_process,
        } => cri_lines::connection_text(w, *conn, ts, client.as_deref(), client_process.as_ref()),
        Observation::CriConnectionGone { conn, ts, client } => {
            cri_lines::connection_gone_text(w, *conn, ts, client.as_deref())
        }
        Observation::CriResync { conn, ts, skipped } => {
            cri_lines::resync_text(w, *conn, ts, *skipped)
        }
        Observation::NriPlugin {
            conn,
            ts,
            plugin,
            events,
            nri_version,
        } => nri_lines::plugin_text(w, *conn, ts, plugin, events.as_deref(), nri_version),
        Observation::NriPluginGone { conn, ts, plugin } => {
            nri_lines::plugin_gone_text(w, *conn, ts, plugin)
        }
        Observation::NriResync {
            conn,
            ts,
            mux_conn,
            skipped,
        } => nri_lines::resync_text(w, *conn, ts, *mux_conn, *skipped),
        Observation::CaptureLoss(l) => nri_lines::loss_text(w, l),
        Observation::NriPending(c) => nri_lines::pending_text(w, c),
        Observation::CriCall(c) => cri_lines::call_text(w, c),
        Observation::CriPending(c) => cri_lines::pending_text(w, c),
        Observation::NriCall(c) => nri_lines::call_text(w, c),
        Observation::Clock { .. } => Ok(()),
        Observation::CriState(s) => {
            let ready = s.pods.iter().filter(|p| p.state == "ready").count();
            let running = s.containers.iter().filter(|c| c.state == "running").count();
            writeln!(
                w,
                "{} == runtime state (ListPodSandbox, ListContainers): {} pods ({ready} ready), \
                 {} containers ({running} running){}",
                clock(&s.ts),
                s.pods.len(),
                s.containers.len(),
                if s.truncated { ", more not kept" } else { "" }
            )
        }
    }
}

/// A finding: `prefix`, severity, rule, pod, certainty, message; then its
/// evidence, one call a line.
pub(crate) fn violation_text(w: &mut impl Write, v: &Violation, prefix: &str) -> io::Result<()> {
    let certainty = match &v.certainty {
        Certainty::Certain => String::new(),
        Certainty::Uncertain { why } => format!(" (uncertain: {})", sanitize(why)),
    };
    writeln!(
        w,
        "{prefix}{:?} {} [{}]{}: {}",
        v.severity,
        v.rule,
        sanitize(v.pod.as_deref().unwrap_or("-")),
        certainty,
        sanitize(&finding_message(v))
    )?;
    for e in v.evidence.iter().map(evidence_words) {
        let at =
            e.at.map(|(conn, stream)| format!(" on {conn} stream {stream}"))
                .unwrap_or_default();
        writeln!(
            w,
            "      evidence: {} {}{at}: {}",
            e.kind,
            sanitize(&e.what),
            sanitize(&e.outcome)
        )?;
    }
    Ok(())
}

/// Both tables, as text.
pub(crate) fn summary_text(
    w: &mut impl Write,
    hooks: &[HookSummary],
    methods: &[MethodSummary],
) -> io::Result<()> {
    cri_lines::summary_text(w, methods)?;
    writeln!(w)?;
    nri_lines::summary_text(w, hooks)
}

/// What a conformance clause promises (engine/conformance.rs), in words.
pub(crate) fn clause_words(clause: &str) -> &'static str {
    match clause {
        SANDBOX_RUNNING_AT_RUN_POD_SANDBOX => {
            "the pod's sandbox (pause) process runs when plugins get RunPodSandbox"
        }
        STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN => {
            "plugins get StopPodSandbox before the pod's network namespace is torn down"
        }
        STOP_CONTAINER_ONCE_PER_EXIT => {
            "a container that exits on its own gets one StopContainer per plugin"
        }
        SYNCHRONIZE_TELLS_EXISTING_PODS => {
            "a registering plugin is told of every existing pod, in Synchronize or by the \
             RunPodSandbox in flight"
        }
        _ => "a clause of the NRI contract draft",
    }
}

/// What a clause is counted over.
fn clause_unit(clause: &str) -> &'static str {
    match clause {
        STOP_CONTAINER_ONCE_PER_EXIT => "containers",
        SYNCHRONIZE_TELLS_EXISTING_PODS => "pods at a registration",
        _ => "pods",
    }
}

/// One case of a clause, in words.
fn case_words(c: &ClauseCase) -> String {
    if let Some(s) = &c.sync {
        let ready = s.pod_ready.map_or_else(
            || "in the runtime's state at attach".to_string(),
            |t| {
                let gap = crate::human::duration(t.mono_ns.abs_diff(c.delivered.mono_ns));
                let when = if t.mono_ns <= c.delivered.mono_ns {
                    "before"
                } else {
                    "after"
                };
                format!("its RunPodSandbox returned {gap} {when}")
            },
        );
        let told = match s.told {
            "listed" => "listed",
            "run_pod_sandbox" => "told by its RunPodSandbox",
            _ => "NOT TOLD",
        };
        let containers = match (s.containers, s.containers_not_told.as_slice()) {
            (0, _) => String::new(),
            (n, []) => format!("; its {n} containers told"),
            (n, missing) => format!("; of its {n} containers NOT TOLD: {}", missing.join(", ")),
        };
        return format!(
            "{}: plugin {} synchronized at {} ({} pods listed); {ready}; {told}{containers}",
            c.pod,
            c.plugin,
            clock(&c.delivered),
            s.listed
        );
    }
    let Some(k) = &c.kernel else {
        return format!("{}: plugin {} got {}", c.pod, c.plugin, c.hook);
    };
    let gap = crate::human::duration(k.at.mono_ns.abs_diff(c.delivered.mono_ns));
    let when = if k.at.mono_ns <= c.delivered.mono_ns {
        "before"
    } else {
        "after"
    };
    let what = match k.op {
        "exec" => format!("the sandbox's {} (pid {}) started", k.path, k.pid),
        "exit" => format!("the container's {}[{}] exited", k.comm, k.pid),
        op => format!("{}[{}] did {op} {}", k.comm, k.pid, k.path),
    };
    format!(
        "{}: plugin {} got {} at {}; {what} {gap} {when}",
        c.pod,
        c.plugin,
        c.hook,
        clock(&c.delivered)
    )
}

/// The conformance table: each clause held and broken over the pods, with
/// one case of each.
pub(crate) fn conformance_text(w: &mut impl Write, clauses: &[ClauseTally]) -> io::Result<()> {
    if clauses.is_empty() {
        return Ok(());
    }
    let runtime = clauses
        .iter()
        .find_map(|c| c.runtime.as_deref())
        .unwrap_or("runtime version not seen");
    writeln!(
        w,
        "\nCONFORMANCE ({}; by-design clauses of the NRI contract draft, docs/contract.md)",
        sanitize(runtime)
    )?;
    for c in clauses {
        writeln!(
            w,
            "{}: {} on {} of {} {} ({})",
            c.clause,
            if c.broken == 0 { "held" } else { "BROKEN" },
            if c.broken == 0 { c.held } else { c.broken },
            c.held + c.broken,
            clause_unit(c.clause),
            clause_words(c.clause)
        )?;
        for (what, case) in [("broken", &c.broken_case), ("held", &c.held_case)] {
            if let Some(case) = case {
                writeln!(w, "  {what}, e.g. {}", sanitize(&case_words(case)))?;
            }
        }
    }
    Ok(())
}
