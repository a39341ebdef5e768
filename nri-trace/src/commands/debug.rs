//! `nri-trace debug capture|nri|cri`: one stage of the pipeline alone,
//! fed by the same live loop (and replay loop) as the whole of it.

use std::{
    io::{self, BufWriter, Stdout, Write},
    path::PathBuf,
};

use anyhow::{bail, Result};
use nri_trace::{
    assemble::TraceDecoder,
    capture::{CaptureEvent, SessionConfig},
    model::Observation,
    output,
    pipeline::{
        cri_session,
        live::{self, Stage},
        nri_session, open_source, replay, Follow, PipelineError, Source,
    },
    sinks::observation_text,
    store::ndjson::LineWriter,
};

use super::{announce, drain, find_target, load_probes, seconds, start_capture};
use crate::cli::{
    args::{CaptureOutput, KernelEvents, LineOutput},
    CaptureArgs, DebugCmd, NriStageArgs, StageArgs,
};

pub(crate) async fn run(cmd: DebugCmd) -> Result<()> {
    match cmd {
        DebugCmd::Capture(a) => capture(a).await,
        DebugCmd::Nri(NriStageArgs {
            stage,
            no_plugin_end,
        }) => decode(stage, Which::Nri, !no_plugin_end).await,
        // The CRI socket has no plugin ends; kubelet's end is never followed.
        DebugCmd::Cri(a) => decode(a, Which::Cri, true).await,
    }
}

/// Prints capture events as they come (`debug capture`).
struct CapturePrinter {
    out: BufWriter<Stdout>,
    format: CaptureOutput,
    dump_bytes: usize,
    counts: output::Counts,
    /// Events since the last flush (chunks are not flushed one by one).
    unflushed: bool,
}

fn sink_err(e: io::Error) -> PipelineError {
    PipelineError::Sink(e)
}

impl Stage for CapturePrinter {
    type Output = ();

    fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError> {
        match self.format {
            CaptureOutput::Text => output::text(&mut self.out, ev, self.dump_bytes),
            CaptureOutput::Json => output::ndjson(&mut self.out, ev),
            CaptureOutput::Count => {
                self.counts.add(ev);
                Ok(())
            }
        }
        .map_err(sink_err)?;
        self.unflushed = true;
        if !matches!(ev, CaptureEvent::Chunk(_)) {
            self.idle()?;
        }
        Ok(())
    }

    fn idle(&mut self) -> Result<(), PipelineError> {
        if std::mem::take(&mut self.unflushed) {
            self.out.flush().map_err(sink_err)?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), PipelineError> {
        if self.format == CaptureOutput::Count {
            #[derive(serde::Serialize)]
            struct Totals<'a> {
                #[serde(rename = "type")]
                kind: &'static str,
                #[serde(flatten)]
                counts: &'a output::Counts,
            }
            let totals = Totals {
                kind: "capture_totals",
                counts: &self.counts,
            };
            LineWriter::new(&mut self.out)
                .write_record(&totals, true)
                .map_err(sink_err)?;
        }
        self.out.flush().map_err(sink_err)
    }
}

async fn capture(a: CaptureArgs) -> Result<()> {
    let stop = live::stop_on_signal(seconds(a.duration)?);
    let cfg = SessionConfig {
        sockets: a.sockets,
        pids: a.pids,
        connect_paths: a.connect_paths,
        drain_interval: drain(&a.probe),
        existing_socketpair_env: a.socketpair_env.clone(),
        wait_for_listeners: !a.no_wait,
        ..Default::default()
    };
    let mut s = start_capture(cfg, load_probes(&a.probe, false, KernelEvents::Explaining)?).await?;
    let printer = CapturePrinter {
        out: BufWriter::new(io::stdout()),
        format: a.output,
        dump_bytes: a.dump_bytes,
        counts: output::Counts::default(),
        unflushed: false,
    };
    let stage = announce(printer, &s, None);
    live::run(&mut s, stage, stop).await?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Nri,
    Cri,
}

/// Prints what the decoders make of capture events (`debug nri|cri`):
/// observations, before the engine.
struct DecodePrinter {
    decoder: TraceDecoder,
    obs: Vec<Observation>,
    out: Out,
}

enum Out {
    Json(LineWriter<Stdout>),
    Text(BufWriter<Stdout>),
}

impl DecodePrinter {
    fn new(which: Which, socket: PathBuf, json: bool) -> Self {
        let (cri, nri) = match which {
            Which::Nri => (vec![], vec![socket]),
            Which::Cri => (vec![socket], vec![]),
        };
        DecodePrinter {
            decoder: TraceDecoder::new(cri, nri),
            obs: Vec::new(),
            out: if json {
                Out::Json(LineWriter::new(io::stdout()))
            } else {
                Out::Text(BufWriter::new(io::stdout()))
            },
        }
    }

    fn print(&mut self) -> Result<(), PipelineError> {
        for o in self.obs.drain(..) {
            if matches!(o, Observation::Clock { .. }) {
                continue;
            }
            match &mut self.out {
                Out::Json(w) => w.write_record(&o, false),
                Out::Text(w) => observation_text(w, &o),
            }
            .map_err(sink_err)?;
        }
        Ok(())
    }
}

impl Stage for DecodePrinter {
    type Output = ();

    fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError> {
        self.decoder.on_capture(ev, &mut self.obs);
        self.print()
    }

    fn idle(&mut self) -> Result<(), PipelineError> {
        match &mut self.out {
            Out::Json(w) => w.flush(),
            Out::Text(w) => w.flush(),
        }
        .map_err(sink_err)
    }

    fn finish(mut self) -> Result<(), PipelineError> {
        self.decoder.finish(&mut self.obs);
        self.print()?;
        self.idle()
    }
}

async fn decode(a: StageArgs, which: Which, plugin_ends: bool) -> Result<()> {
    let json = a.output == LineOutput::Json;
    if let Some(file) = &a.file {
        let src = open_source(file)?;
        let Source::Capture {
            name,
            session,
            events,
        } = src
        else {
            bail!(
                "{} is a record file: it holds decoded calls already (`nri-trace replay {} -o \
                 json` prints them); `debug` decodes a raw capture (--save-raw)",
                file.display(),
                file.display()
            );
        };
        let socket = a.socket.clone().unwrap_or_else(|| {
            PathBuf::from(match which {
                Which::Nri => &session.nri_socket,
                Which::Cri => &session.cri_socket,
            })
        });
        let ((), truncated) =
            replay::run_capture(&name, events, DecodePrinter::new(which, socket, json))?;
        if let Some(e) = truncated {
            eprintln!("nri-trace: {name}: {e}; decoded what came before");
        }
        return Ok(());
    }
    let stop = live::stop_on_signal(seconds(a.duration)?);
    let follow = Follow {
        drain: drain(&a.probe),
        plugin_ends,
        sandbox: false,
        // The decoder alone shows what it decodes; the runtime's lists
        // are for the engine's names (`watch`).
        cri_state: false,
        wait: !a.wait.no_wait,
    };
    let backend = load_probes(&a.probe, false, KernelEvents::Explaining)?;
    let (socket, target) = if let Some(s) = a.socket.clone() {
        (s, None)
    } else {
        let Some(t) = find_target(None, None, a.wait.no_wait, &stop).await? else {
            return Ok(());
        };
        let socket = match which {
            Which::Nri => t.nri.clone(),
            Which::Cri => t.cri.clone(),
        };
        (socket, Some(t))
    };
    let cfg = match which {
        Which::Nri => nri_session(&socket, vec![], follow)?,
        Which::Cri => cri_session(&socket, follow)?,
    };
    let mut s = start_capture(cfg, backend).await?;
    let printer = DecodePrinter::new(which, socket, json);
    let stage = announce(printer, &s, target.as_ref());
    live::run(&mut s, stage, stop).await?;
    Ok(())
}
