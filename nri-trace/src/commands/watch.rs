//! `nri-trace watch` (and `nri-trace` alone on a terminal): the runtime
//! traced live through the pipeline, to text, JSON or the TUI, and to a
//! record file, a raw capture and Prometheus alongside.

use anyhow::{Context, Result};
use nri_trace::{
    pipeline::{live, runtime_name, runtime_session, Follow, Pipeline},
    sinks::{
        serve_metrics,
        tui::{self, Mode, TuiOptions, TuiSink},
        MetricsSink, OtlpSink,
    },
    store::ndjson::{self, LineWriter},
    store::{
        flight_recorder::{FlightRecorder, FlightRecorderConfig},
        record_file::RecordWriter,
    },
};

use super::{
    announce, contract, drain, filter, find_target, json_sink, load_probes, on_terminal, otlp_sink,
    seconds, start_capture, text_sink,
};
use crate::cli::{
    args::{CallLines, WatchOutput},
    WatchArgs,
};

/// What a live run shows: an output, or only the flight recorder's
/// segments (`nri-trace record`).
pub(crate) enum Show {
    Output(WatchOutput),
    FlightRecorder(FlightRecorderConfig),
}

pub(crate) async fn run(a: WatchArgs) -> Result<()> {
    let output = a.output.unwrap_or_else(|| {
        if on_terminal() {
            WatchOutput::Tui
        } else {
            WatchOutput::Text
        }
    });
    live(a, Show::Output(output)).await
}

/// The runtime traced live, shown as `show` says.
pub(crate) async fn live(a: WatchArgs, show: Show) -> Result<()> {
    // From the start: `--duration` bounds the wait for the runtime too.
    let stop = live::stop_on_signal(seconds(a.duration)?);
    let follow = Follow {
        drain: drain(&a.probe),
        plugin_ends: !a.target.no_plugin_end,
        sandbox: !a.target.no_sandbox,
        wait: !a.wait.no_wait,
        cri_state: !a.target.no_cri_state,
    };
    let backend = load_probes(&a.probe, follow.sandbox, a.decode.kernel)?;
    let Some(target) = find_target(
        a.target.cri_socket.clone(),
        a.target.nri_socket.clone(),
        a.wait.no_wait,
        &stop,
    )
    .await?
    else {
        return Ok(());
    };
    if let Some((kind, pid)) = target.runtime {
        eprintln!(
            "nri-trace: runtime {} pid {pid}: CRI {}, NRI {}",
            runtime_name(kind),
            target.cri.display(),
            target.nri.display()
        );
    }
    let cfg = runtime_session(&target, follow)?;
    let info = target.session_info(!a.no_redact);
    let mut p = Pipeline::new(&info, contract(&a.decode)).with_filter(filter(&a.filter));
    if let Some(path) = &a.save {
        let f =
            ndjson::create_private(path).with_context(|| format!("creating {}", path.display()))?;
        let w = RecordWriter::<Box<dyn std::io::Write>>::new(Box::new(f), &info)
            .with_context(|| format!("writing {}", path.display()))?;
        p.save_to(path.display().to_string(), w);
    }
    if let Some(path) = &a.save_raw {
        eprintln!(
            "nri-trace: {} holds every byte the runtime reads and writes, secrets included \
             (created 0600): keep it on this node",
            path.display()
        );
        let f =
            ndjson::create_private(path).with_context(|| format!("creating {}", path.display()))?;
        p.save_raw_to(path.display().to_string(), LineWriter::new(Box::new(f)));
    }
    let otlp = otlp_sink(a.otlp_endpoint.as_deref())?;
    let export = otlp.as_ref().map(OtlpSink::counters);
    if let Some(s) = otlp {
        p.export_to(Box::new(s));
    }
    if let Some(addr) = a.metrics_addr {
        let (bound, text) = serve_metrics(addr).await.with_context(|| {
            format!("metrics: cannot listen on {addr} (in use? choose another --metrics-addr)")
        })?;
        eprintln!("nri-trace: metrics on http://{bound}/metrics");
        let mut m = MetricsSink::new(text);
        if let Some(c) = export {
            m = m.with_export(c);
        }
        p.add_sink(Box::new(m));
    }
    let mut s = start_capture(cfg, backend).await?;
    let mut tui = None;
    match show {
        Show::FlightRecorder(cfg) => {
            let dir = cfg.dir.display().to_string();
            let r = FlightRecorder::open(cfg.clone(), &info).with_context(|| {
                format!("opening the recorder's directory {dir} (give another with --dir)")
            })?;
            eprintln!(
                "nri-trace: recording to {dir}: at most {} KiB{}, oldest segments deleted \
                 (`nri-trace explain POD`, `report` and `replay` read it)",
                cfg.max_bytes >> 10,
                cfg.max_age
                    .map(|d| format!(" and {} s", d.as_secs()))
                    .unwrap_or_default()
            );
            p.record_to(dir, r);
        }
        Show::Output(WatchOutput::Text) => p.add_sink(text_sink(&a.decode)),
        Show::Output(WatchOutput::Json) => p.add_sink(json_sink(&info)?),
        Show::Output(WatchOutput::Tui) => {
            let mut status = tui::status_of(&info, "live".into());
            status.recording = a.save.as_ref().map(|p| p.display().to_string());
            let opts = TuiOptions {
                export_dir: a.export_dir.clone(),
                all_calls: a.decode.calls == CallLines::All,
                ..Default::default()
            };
            tui = Some((status, opts, stop.clone()));
        }
    }
    // The TUI takes the terminal once the runtime is served: the notices
    // of the wait are on it until then.
    let stage = announce(p, &s, Some(&target)).on_served(Box::new(move |p: &mut Pipeline| {
        if let Some((status, opts, stop)) = tui {
            p.add_sink(Box::new(TuiSink::open(Mode::Live, status, opts, stop)));
        }
    }));
    live::run(&mut s, stage, stop).await?;
    Ok(())
}
