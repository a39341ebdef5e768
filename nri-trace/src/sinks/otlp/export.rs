//! The OTLP exporter: spans from [`super::spans`] shipped over OTLP/gRPC
//! by the opentelemetry-otlp crate, on a thread of its own.
//!
//! Export must never hurt capture (issue 33): the sink hands spans to a
//! bounded queue with `try_send` and counts what does not fit; a thread
//! with its own single-threaded tokio runtime drains it in batches, so a
//! slow or absent collector holds only that thread. An unreachable
//! collector is logged once (then again only after it recovered), and the
//! batch is retried with a doubling backoff while new spans queue up to
//! the bound and the rest are counted as dropped.
//!
//! The SDK's own `BatchSpanProcessor` is not used: it takes spans from the
//! SDK's tracer, with ids and times of its making, while these spans carry
//! ids made from the calls and times from the capture.

use std::{
    borrow::Cow,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
    InstrumentationScope, KeyValue,
};
use opentelemetry_sdk::{
    trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks},
    Resource,
};
use tokio::sync::mpsc;

use super::spans::{Kind, OtelSpan, Value};
use crate::store::record_file::ExportTotals;

/// Spans the queue holds at most (about 2 MB); past it they are dropped,
/// counted.
pub(crate) const QUEUE_SPANS: usize = 8_192;
/// Spans per export request.
const BATCH_SPANS: usize = 512;
/// How long a batch waits to fill before it goes.
const BATCH_WAIT: Duration = Duration::from_millis(500);
/// Backoff after a failed export: from the first to the most.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// At the end, how long the queue gets to drain.
pub(crate) const FINISH_WAIT: Duration = Duration::from_secs(5);

/// What export did, for `session_end` and the metrics.
#[derive(Debug, Default)]
pub struct ExportCounters {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed_exports: AtomicU64,
}

impl ExportCounters {
    pub fn totals(&self) -> ExportTotals {
        ExportTotals {
            exported_spans: self.exported.load(Ordering::Relaxed),
            dropped_spans: self.dropped.load(Ordering::Relaxed),
            failed_exports: self.failed_exports.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn drop_spans(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Setting up the exporter failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the OTLP exporter cannot be set up: {0}. Give --otlp-endpoint an http:// URL of an \
         OTLP/gRPC receiver (e.g. http://127.0.0.1:4317), or set OTEL_EXPORTER_OTLP_ENDPOINT"
    )]
    Build(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("starting the OTLP export thread")]
    Thread(#[source] std::io::Error),
}

/// The exporter's end of the queue, running on its thread.
pub(crate) struct Exporter {
    tx: Option<mpsc::Sender<OtelSpan>>,
    thread: Option<JoinHandle<()>>,
    done: std::sync::mpsc::Receiver<()>,
    pub(crate) counters: Arc<ExportCounters>,
}

impl Exporter {
    /// Start the thread. `endpoint`: `--otlp-endpoint`, else the
    /// `OTEL_EXPORTER_OTLP_*` variables the crate reads; the service name
    /// is `OTEL_SERVICE_NAME`, else "nri-trace".
    pub(crate) fn start(endpoint: Option<&str>) -> Result<Self, ExportError> {
        use opentelemetry_otlp::WithExportConfig;
        let (tx, rx) = mpsc::channel(QUEUE_SPANS);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel();
        let counters = Arc::new(ExportCounters::default());
        let endpoint = endpoint.map(str::to_owned);
        let c = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(ExportError::Thread(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    // Built inside the runtime: tonic's channel needs one.
                    let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                    if let Some(e) = endpoint {
                        b = b.with_endpoint(e);
                    }
                    let mut exporter = match b.build() {
                        Ok(x) => x,
                        Err(e) => {
                            let _ = ready_tx.send(Err(ExportError::Build(e)));
                            return;
                        }
                    };
                    exporter.set_resource(&resource());
                    let _ = ready_tx.send(Ok(()));
                    drain(exporter, rx, &c).await;
                });
                let _ = done_tx.send(());
            })
            .map_err(ExportError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Exporter {
                tx: Some(tx),
                thread: Some(thread),
                done,
                counters,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ExportError::Thread(std::io::Error::other(
                    "the export thread ended before it started",
                )))
            }
        }
    }

    /// Queue `spans`; what does not fit is dropped and counted. Never
    /// waits.
    pub(crate) fn send(&self, spans: impl IntoIterator<Item = OtelSpan>) {
        let Some(tx) = &self.tx else { return };
        for s in spans {
            if tx.try_send(s).is_err() {
                self.counters.drop_spans(1);
            }
        }
    }

    /// Close the queue and give the thread [`FINISH_WAIT`] to ship what
    /// it holds; what it could not ship is counted as dropped by it.
    pub(crate) fn finish(&mut self) {
        self.tx = None;
        if self.done.recv_timeout(FINISH_WAIT).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        // Otherwise the thread is left to the process's exit: a collector
        // that does not answer must not hold the run's end.
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if self.tx.is_some() {
            self.finish();
        }
    }
}

/// The resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the
/// SDK reads them, the service name "nri-trace" when none is set, and the
/// node's host name.
fn resource() -> Resource {
    let mut b = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        b = b.with_service_name("nri-trace");
    }
    if let Some(h) = host_name() {
        b = b.with_attribute(KeyValue::new("host.name", h));
    }
    b.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

fn host_name() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_owned())
}

/// The export loop: a batch of up to [`BATCH_SPANS`] (or what came within
/// [`BATCH_WAIT`]), exported, retried with backoff until it goes or the
/// queue closes.
async fn drain(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<OtelSpan>,
    counters: &ExportCounters,
) {
    let mut buf: Vec<OtelSpan> = Vec::with_capacity(BATCH_SPANS);
    let mut failing = false;
    let mut closed = false;
    while !closed {
        // The first span waits as long as it takes; the rest of the batch
        // up to BATCH_WAIT.
        if rx.recv_many(&mut buf, BATCH_SPANS).await == 0 {
            break;
        }
        let deadline = tokio::time::Instant::now() + BATCH_WAIT;
        while buf.len() < BATCH_SPANS {
            let room = BATCH_SPANS - buf.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut buf, room)).await {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let batch: Vec<SpanData> = buf.drain(..).map(span_data).collect();
        let n = batch.len();
        let mut backoff = BACKOFF_FIRST;
        loop {
            match exporter.export(batch.clone()).await {
                Ok(()) => {
                    counters.exported.fetch_add(n as u64, Ordering::Relaxed);
                    if failing {
                        log::warn!("OTLP export works again");
                        failing = false;
                    }
                    break;
                }
                Err(e) => {
                    counters.failed_exports.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        log::warn!(
                            "OTLP export failed: {e}; retrying with backoff (spans past {QUEUE_SPANS} \
                             queued are dropped and counted)"
                        );
                        failing = true;
                    }
                    // The run ended while the collector fails: no more
                    // tries (finish must not wait on it).
                    if rx.is_closed() {
                        counters.drop_spans(n);
                        break;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
    // Spans the run's end left in the queue after a failure.
    let mut rest = 0;
    while rx.try_recv().is_ok() {
        rest += 1;
    }
    counters.drop_spans(rest);
    let _ = exporter.shutdown();
}

fn wall(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn key_value(k: &'static str, v: Value) -> KeyValue {
    match v {
        Value::Str(s) => KeyValue::new(k, s),
        Value::Int(i) => KeyValue::new(k, i),
        Value::F64(f) => KeyValue::new(k, f),
        Value::Bool(b) => KeyValue::new(k, b),
    }
}

/// One span in the SDK's export form.
pub(crate) fn span_data(s: OtelSpan) -> SpanData {
    let mut events = SpanEvents::default();
    events.events = s
        .events
        .into_iter()
        .map(|e| {
            opentelemetry::trace::Event::new(
                e.name,
                wall(e.wall_ns),
                e.attributes
                    .into_iter()
                    .map(|(k, v)| key_value(k, v))
                    .collect(),
                0,
            )
        })
        .collect();
    let (parent_span_id, parent_span_is_remote) = match s.parent {
        Some(p) => (SpanId::from_bytes(p.span_id), p.remote),
        None => (SpanId::INVALID, false),
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(s.trace_id),
            SpanId::from_bytes(s.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id,
        parent_span_is_remote,
        span_kind: match s.kind {
            Kind::Server => SpanKind::Server,
            Kind::Internal => SpanKind::Internal,
        },
        name: Cow::Owned(s.name),
        start_time: wall(s.start_wall_ns),
        end_time: wall(s.end_wall_ns),
        attributes: s
            .attributes
            .into_iter()
            .map(|(k, v)| key_value(k, v))
            .collect(),
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: match s.error {
            Some(d) => Status::error(d),
            None => Status::Unset,
        },
        instrumentation_scope: InstrumentationScope::builder("nri-trace")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::otlp::spans::{Parent, SpanEvent};

    #[test]
    fn a_span_keeps_its_ids_times_parent_events_and_status() {
        let s = OtelSpan {
            trace_id: [7; 16],
            span_id: [9; 8],
            parent: Some(Parent {
                span_id: [3; 8],
                remote: true,
            }),
            name: "nri.pkg.api.v1alpha1.Plugin/CreateContainer".into(),
            kind: Kind::Server,
            start_wall_ns: 1_000,
            end_wall_ns: 4_000,
            attributes: vec![("nri.plugin", Value::Str("10-slow".into()))],
            events: vec![SpanEvent {
                name: "nri_trace.finding",
                wall_ns: 2_000,
                attributes: vec![("nri_trace.rule", Value::Str("a-rule".into()))],
            }],
            error: Some("a-rule".into()),
        };
        let d = span_data(s);
        assert_eq!(d.span_context.trace_id(), TraceId::from_bytes([7; 16]));
        assert_eq!(d.span_context.span_id(), SpanId::from_bytes([9; 8]));
        assert!(d.span_context.is_sampled());
        assert_eq!(d.parent_span_id, SpanId::from_bytes([3; 8]));
        assert!(d.parent_span_is_remote);
        assert_eq!(d.span_kind, SpanKind::Server);
        assert_eq!(
            d.end_time.duration_since(d.start_time).unwrap(),
            Duration::from_micros(3)
        );
        assert_eq!(d.events.len(), 1);
        assert_eq!(d.events[0].name, "nri_trace.finding");
        assert_eq!(d.status, Status::error("a-rule"));
        assert_eq!(d.attributes, vec![KeyValue::new("nri.plugin", "10-slow")]);
    }

    #[test]
    fn a_root_span_has_no_parent() {
        let s = OtelSpan {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: None,
            name: "n".into(),
            kind: Kind::Internal,
            start_wall_ns: 0,
            end_wall_ns: 0,
            attributes: vec![],
            events: vec![],
            error: None,
        };
        let d = span_data(s);
        assert_eq!(d.parent_span_id, SpanId::INVALID);
        assert_eq!(d.status, Status::Unset);
    }
}
