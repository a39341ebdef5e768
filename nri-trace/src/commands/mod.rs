//! What each command does; `main.rs` only dispatches here. Errors are
//! anyhow at this edge, with the fix in the message.

pub(crate) mod debug;
pub(crate) mod doctor;
pub(crate) mod explain;
pub(crate) mod hold;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod watch;
pub(crate) mod write_cost;

use std::{
    io::{self, IsTerminal},
    path::PathBuf,
    time::Duration,
};

use nri_trace::{
    capture::{start_session, EbpfBackend, EbpfOptions, ProgramSet, Session, SessionConfig},
    engine::contract::ContractConfig,
    pipeline::{live::Stage, Announce, Awaited, Filter, Sink, Stop, Target},
    sinks::{JsonSink, OtlpSink, TextSink},
    store::record_file::SessionInfo,
};

use crate::cli::args::{CallLines, DecodeArgs, FilterArgs, KernelEvents, ProbeArgs};

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

/// The probes a live run loads; `kernel`: which sandbox events the kernel
/// sends (`--kernel`).
pub(crate) fn ebpf_options(
    p: &ProbeArgs,
    programs: ProgramSet,
    sandbox: bool,
    kernel: KernelEvents,
) -> EbpfOptions {
    EbpfOptions {
        ring_bytes: p.ring_bytes,
        snap_len: p.snap_len,
        wakeup_bytes: p.wakeup_bytes.unwrap_or(p.ring_bytes / 4),
        programs,
        sandbox,
        all_kernel_events: kernel == KernelEvents::All,
        backend: p.backend,
    }
}

/// Load the probes (before any wait for the runtime: attaching then
/// costs no time).
pub(crate) fn load_probes(
    probe: &ProbeArgs,
    sandbox: bool,
    kernel: KernelEvents,
) -> anyhow::Result<EbpfBackend> {
    Ok(EbpfBackend::load(&ebpf_options(
        probe,
        ProgramSet::Capture,
        sandbox,
        kernel,
    ))?)
}

/// Start the capture session `cfg` describes on `backend`, then say on
/// standard error what it captures: each socket with the connections
/// already open on it, each socketpair that was open before (a
/// pre-launched plugin's), and `ready` once the probes are attached (the
/// tests and the bench wait for that word; sockets not served yet are
/// waited for from then on: `pipeline::wait`).
pub(crate) async fn start_capture(
    cfg: SessionConfig,
    backend: EbpfBackend,
) -> anyhow::Result<Session> {
    let env = cfg.existing_socketpair_env.clone().unwrap_or_default();
    let s = start_session(cfg, Box::new(backend)).await?;
    for l in &s.attached.listeners {
        eprintln!(
            "nri-trace: capturing {} (pid {}, listening fd {}, {} open connections)",
            l.path.display(),
            l.pid,
            l.listen_fd,
            l.connections.len()
        );
    }
    for p in &s.attached.existing_socketpairs {
        eprintln!(
            "nri-trace: capturing pid {} fd {} (its peer, pid {}, has {env})",
            p.pid, p.fd, p.peer_pid,
        );
    }
    eprintln!(
        "nri-trace: ready (tracking pids {:?})",
        s.attached.tracked_pids
    );
    Ok(s)
}

/// Say a notice on standard error (the waits' words).
pub(crate) fn say(s: &str) {
    eprintln!("{s}");
}

/// The runtime to trace: the sockets given, or the runtime found, waited
/// for unless `no_wait` (docs/trace.md, "Started before the runtime");
/// `None` when `stop` came first (said on standard error).
pub(crate) async fn find_target(
    cri: Option<PathBuf>,
    nri: Option<PathBuf>,
    no_wait: bool,
    stop: &Stop,
) -> anyhow::Result<Option<Target>> {
    if no_wait || (cri.is_some() && nri.is_some()) {
        // Given sockets are waited for by the session, from their bind.
        return Ok(Some(Target::find(cri, nri)?));
    }
    let found = nri_trace::pipeline::find_target(cri, nri, stop, &mut say).await?;
    if found.is_none() {
        say("nri-trace: stopped before the runtime came; nothing traced");
    }
    Ok(found)
}

/// `stage`, saying what session `s` waits for (its sockets nothing served
/// when it started) until each is served.
pub(crate) fn announce<S: Stage>(stage: S, s: &Session, target: Option<&Target>) -> Announce<S> {
    Announce::new(
        stage,
        Awaited::of(&s.attached.unserved, target),
        Box::new(say),
    )
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
    Filter::new(f.namespace.clone(), f.pod.clone(), f.plugin.clone()).with_client(f.client.clone())
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
        d.calls == CallLines::Summary,
    ))
}

/// The JSON sink on standard output.
pub(crate) fn json_sink(session: &SessionInfo) -> io::Result<Box<dyn Sink>> {
    Ok(Box::new(JsonSink::new(io::stdout(), session)?))
}

/// The OTLP sink `--otlp-endpoint` asks for, or the standard
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (read by the exporter itself) when the flag is not given.
pub(crate) fn otlp_sink(endpoint: Option<&str>) -> anyhow::Result<Option<OtlpSink>> {
    let from_env = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    let to = match (endpoint, from_env) {
        (Some(e), _) => e.to_owned(),
        (None, Some(v)) => format!("${v}"),
        (None, None) => return Ok(None),
    };
    // The standard variables may ask for OTLP/HTTP (the SDKs' default is
    // http/protobuf; containerd's exporter speaks it on 4318): the tonic
    // exporter would send gRPC to their endpoint and fail on every batch.
    // Said once, at the start, with the fix. `--otlp-endpoint` is gRPC by
    // its own definition: the variables do not change it.
    let protocol_vars: &[&str] = if endpoint.is_none() {
        &[
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]
    } else {
        &[]
    };
    // The traces' own variable first, as the SDKs read them.
    let asked = protocol_vars
        .iter()
        .find_map(|&v| Some((v, std::env::var(v).ok().filter(|p| !p.is_empty())?)));
    if let Some((v, p)) = asked.filter(|(_, p)| p != "grpc") {
        anyhow::bail!(
            "{v}={p}: nri-trace exports over OTLP/gRPC only; point it at the collector's \
             gRPC receiver (usually port 4317) and set {v}=grpc or unset it"
        );
    }
    let sink = OtlpSink::start(endpoint)?;
    eprintln!("nri-trace: exporting spans over OTLP/gRPC to {to}");
    Ok(Some(sink))
}
