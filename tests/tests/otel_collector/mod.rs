//! The lab's OpenTelemetry Collector (lab/otelcol.sh) for the tests that
//! read spans back: started on loopback with the file exporter, and the
//! file's OTLP JSON read as spans.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// The collector's OTLP receivers (lab/otelcol.sh config).
pub(crate) const OTLP_GRPC: &str = "http://127.0.0.1:4317";
pub(crate) const OTLP_HTTP: &str = "http://127.0.0.1:4318";

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// lab/otelcol.sh with `args`, its stdout.
pub(crate) fn otelcol_sh(args: &[&str]) -> String {
    let o = Command::new("bash")
        .arg(workspace().join("lab/otelcol.sh"))
        .args(args)
        .output()
        .expect("running lab/otelcol.sh");
    assert!(
        o.status.success(),
        "lab/otelcol.sh {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

/// The collector's ports are the machine's: one test at a time holds
/// them, from before its first collector to after its last (a test may
/// start two). The tests of one binary run on threads (trace_lab's two
/// OTLP tests collided in ci39: one's collector on the other's port);
/// taken before the lab lock, always in that order, so that neither
/// waits on the other while holding one.
pub(crate) fn ports() -> std::sync::MutexGuard<'static, ()> {
    static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The collector, running until dropped.
pub(crate) struct Collector(Child);

impl Collector {
    pub(crate) fn start(dir: &Path, file: &Path) -> Self {
        let bin = otelcol_sh(&["install"]);
        // Another listener would take the spans and this collector would
        // exit: say so rather than read an empty file.
        assert!(
            std::net::TcpStream::connect("127.0.0.1:4317").is_err(),
            "something already listens on 127.0.0.1:4317 (a collector left running?): stop it"
        );
        let config = dir.join("otelcol.yaml");
        std::fs::write(&config, otelcol_sh(&["config", file.to_str().unwrap()])).unwrap();
        let log = std::fs::File::create(dir.join("otelcol.log")).unwrap();
        let mut child = Command::new(bin.trim())
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the collector");
        let t0 = Instant::now();
        while std::net::TcpStream::connect("127.0.0.1:4317").is_err() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the collector exited: {}",
                std::fs::read_to_string(dir.join("otelcol.log")).unwrap_or_default()
            );
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the collector did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Listening, and still running (not another's port).
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the collector exited: {}",
            std::fs::read_to_string(dir.join("otelcol.log")).unwrap_or_default()
        );
        Collector(child)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// One span as the collector's file exporter wrote it (OTLP JSON).
#[derive(Debug, Clone)]
pub(crate) struct OtlpSpan {
    pub(crate) service: String,
    pub(crate) trace_id: String,
    pub(crate) span_id: String,
    pub(crate) parent: String,
    pub(crate) name: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) attributes: BTreeMap<String, Value>,
}

impl OtlpSpan {
    /// A string attribute's value.
    pub(crate) fn attr(&self, k: &str) -> Option<&str> {
        self.attributes.get(k).and_then(Value::as_str)
    }

    pub(crate) fn duration(&self) -> i64 {
        self.end as i64 - self.start as i64
    }
}

fn nanos(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Every span of the file (one OTLP JSON object per line).
pub(crate) fn read_spans(file: &Path) -> Vec<OtlpSpan> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("OTLP JSON");
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .and_then(|a| a["value"]["stringValue"].as_str())
                .unwrap_or_default()
                .to_string();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let attributes = s["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let v = a["value"].as_object().and_then(|o| o.values().next());
                            (
                                a["key"].as_str().unwrap_or_default().to_string(),
                                v.cloned().unwrap_or(Value::Null),
                            )
                        })
                        .collect();
                    out.push(OtlpSpan {
                        service: service.clone(),
                        trace_id: s["traceId"].as_str().unwrap_or_default().into(),
                        span_id: s["spanId"].as_str().unwrap_or_default().into(),
                        parent: s["parentSpanId"].as_str().unwrap_or_default().into(),
                        name: s["name"].as_str().unwrap_or_default().into(),
                        start: nanos(&s["startTimeUnixNano"]),
                        end: nanos(&s["endTimeUnixNano"]),
                        attributes,
                    });
                }
            }
        }
    }
    out
}

/// The file's spans once `done` says what is wanted has come, or as they
/// are after `within` (the caller's checks then say what is missing).
pub(crate) fn wait_spans(
    file: &Path,
    within: Duration,
    done: impl Fn(&[OtlpSpan]) -> bool,
) -> Vec<OtlpSpan> {
    let t0 = Instant::now();
    loop {
        let spans = read_spans(file);
        if done(&spans) || t0.elapsed() > within {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The spans of one service, by span id.
pub(crate) fn by_id<'a>(spans: &'a [OtlpSpan], service: &str) -> BTreeMap<&'a str, &'a OtlpSpan> {
    spans
        .iter()
        .filter(|s| s.service == service)
        .map(|s| (s.span_id.as_str(), s))
        .collect()
}
