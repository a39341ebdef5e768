//! What each command does; `main.rs` only dispatches here. Errors are
//! anyhow at this edge, with the fix in the message.

pub(crate) mod debug;
pub(crate) mod doctor;
pub(crate) mod explain;
pub(crate) mod hold;
pub(crate) mod replay;
pub(crate) mod watch;

use std::{
    io::{self, IsTerminal},
    time::Duration,
};

use nri_trace::{
    capture::{
        ebpf::{EbpfBackend, EbpfOptions, ProgramSet},
        session::{self, Session, SessionConfig},
    },
    engine::contract::ContractConfig,
    model::record_file::SessionInfo,
    pipeline::{Filter, Sink},
    sinks::{json::JsonSink, text::TextSink},
};

use crate::cli::args::{DecodeArgs, FilterArgs, KernelEvents, ProbeArgs};

/// Whether `e` comes from writing to a pipe nobody reads any more.
pub(crate) fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Standard input and output are a terminal (the TUI can run).
pub(crate) fn on_terminal() -> bool {
    io::stdout().is_terminal() && io::stdin().is_terminal()
}

/// The probes a live run loads.
pub(crate) fn ebpf_options(p: &ProbeArgs, programs: ProgramSet, sandbox: bool) -> EbpfOptions {
    EbpfOptions {
        ring_bytes: p.ring_bytes,
        snap_len: p.snap_len,
        wakeup_bytes: p.wakeup_bytes.unwrap_or(p.ring_bytes / 4),
        programs,
        sandbox,
    }
}

/// Load the probes and start the capture session `cfg` describes, then
/// say on standard error what it captures: each socket with the
/// connections already open on it, each socketpair that was open before
/// (a pre-launched plugin's), and `ready` once the probes are attached
/// (the tests and the bench wait for that word).
pub(crate) async fn start_capture(
    cfg: SessionConfig,
    probe: &ProbeArgs,
) -> anyhow::Result<Session> {
    let env = cfg.existing_socketpair_env.clone().unwrap_or_default();
    let backend = EbpfBackend::load(&ebpf_options(probe, ProgramSet::Capture, cfg.sandbox))?;
    let s = session::start(cfg, Box::new(backend)).await?;
    for l in &s.info.listeners {
        eprintln!(
            "nri-trace: capturing {} (pid {}, listening fd {}, {} open connections)",
            l.path.display(),
            l.pid,
            l.listen_fd,
            l.connections.len()
        );
    }
    for p in &s.info.existing_socketpairs {
        eprintln!(
            "nri-trace: capturing pid {} fd {} (its peer, pid {}, has {env})",
            p.pid, p.fd, p.peer_pid,
        );
    }
    eprintln!("nri-trace: ready (tracking pids {:?})", s.info.tracked_pids);
    Ok(s)
}

pub(crate) fn drain(p: &ProbeArgs) -> Duration {
    Duration::from_millis(p.drain_ms.max(1))
}

pub(crate) fn contract(d: &DecodeArgs) -> ContractConfig {
    ContractConfig {
        hook_budget_ns: d.hook_budget_ms.map(|ms| ms * 1_000_000),
    }
}

pub(crate) fn filter(f: &FilterArgs) -> Filter {
    Filter::new(f.namespace.clone(), f.pod.clone(), f.plugin.clone())
}

pub(crate) fn seconds(s: Option<f64>) -> anyhow::Result<Option<Duration>> {
    s.map(|s| {
        Duration::try_from_secs_f64(s)
            .map_err(|e| anyhow::anyhow!("--duration {s}: {e}; give a number of seconds, e.g. 30"))
    })
    .transpose()
}

/// The text sink on standard output.
pub(crate) fn text_sink(d: &DecodeArgs) -> Box<dyn Sink> {
    Box::new(TextSink::new(
        io::stdout(),
        !d.no_tables,
        d.kernel == KernelEvents::All,
    ))
}

/// The JSON sink on standard output.
pub(crate) fn json_sink(session: &SessionInfo) -> io::Result<Box<dyn Sink>> {
    Ok(Box::new(JsonSink::new(io::stdout(), session)?))
}
