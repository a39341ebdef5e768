//! Spans from records: the pure half of OTLP export (issue 33). The
//! exporter ([`super::export`]) only ships what this makes.
//!
//! Which span is whose parent (docs/trace.md, "OpenTelemetry spans"):
//!
//! - **A CRI call** is a server span (the runtime's side of the call, as
//!   seen on its socket). With a `traceparent` in its gRPC metadata
//!   (kubelet with tracing on) it continues that trace, under the
//!   client's span: a sibling of the runtime's own CRI server span, which
//!   has the same parent. Without one it belongs to its pod's lifecycle
//!   trace (below).
//! - **An NRI delivery** is a server span per plugin (the plugin's side,
//!   which no plugin traces itself). With a `traceparent` in the ttrpc
//!   request's metadata (containerd 2.2+ with tracing on, otelttrpc) it
//!   continues that trace under the runtime's client span for the same
//!   call, so the two can be compared. Without one it is a child of the
//!   CRI call that caused it, or, for a delivery no CRI call caused, of
//!   its pod's lifecycle.
//! - **A pod lifecycle** without trace context is one trace, its id made
//!   from the sandbox id, rooted at the pod's RunPodSandbox span: every
//!   later call of the pod (containers, stop, remove) is that span's child.
//!   After a late attach the RunPodSandbox was not seen: the calls share
//!   the trace id and have no parent.
//! - **A finding** is an event (`nri_trace.finding`, its rule id) on the
//!   span of the call its evidence names, whose status becomes an error.
//!   Spans wait [`HOLD_NS`] of capture time for findings; a finding that
//!   comes later (some rules hold for up to 30 s) becomes a span of its
//!   own under that call's span.
//! - **Kernel events** of the pod's sandbox during a teardown call
//!   (StopContainer, StopPodSandbox, ...) are that call's span events.
//!
//! Ids are hashes of what identifies a call (connection, stream, start),
//! never random: the same records give the same spans, live or replayed.

use std::collections::{HashMap, VecDeque};

use crate::{
    basic_types::{ConnId, Timestamp},
    capture::sandbox::SandboxEvent,
    decode::{
        cri::grpc::grpc_status_name,
        nri::message::{PLUGIN_SERVICE, RUNTIME_SERVICE},
    },
    engine::{
        correlate::CriSpan,
        findings::{Evidence, Violation},
        hook_latency::HookSpan,
        pod_index::PodIndex,
        record::Record,
    },
    human::sanitize,
    model::{
        cri_call::{CriCall, CriMethod, CriOutcome, TEARDOWN_METHODS},
        nri_call::{NriCall, NriOutcome},
        observation::Observation,
        TraceContext,
    },
    sinks::finding_message,
};

/// How long (capture time) a span waits for the findings about its call
/// before it goes out. Most rules decide at the call (event order,
/// subscriptions, adjustments) or within the engine's settle time.
pub(crate) const HOLD_NS: u64 = 2_000_000_000;
/// Most spans held at once; past it the oldest go out early.
const MAX_HELD: usize = 4_096;
/// Most pod lifecycles remembered (sandbox id -> trace).
const MAX_LIFECYCLES: usize = 4_096;
/// Most spans remembered after they went out, for late findings.
const MAX_PLACED: usize = 16_384;
/// Most recent kernel events kept to join teardown calls.
const MAX_KERNEL: usize = 1_024;
/// Most kernel events on one span (the rest counted in an attribute).
const MAX_KERNEL_PER_SPAN: usize = 64;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Int(i64),
    F64(f64),
    Bool(bool),
}

pub(crate) type Attributes = Vec<(&'static str, Value)>;

/// What kind of span (OTLP `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The server side of a call: CRI calls (the runtime's), NRI
    /// deliveries (the plugin's).
    Server,
    /// A finding that came after its call's span went out.
    Internal,
}

/// A span's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parent {
    pub span_id: [u8; 8],
    /// In another process's trace (a `traceparent` from the wire).
    pub remote: bool,
}

/// One span event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanEvent {
    pub name: &'static str,
    pub wall_ns: u64,
    pub attributes: Attributes,
}

/// One span, as OTLP will carry it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OtelSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<Parent>,
    pub name: String,
    pub kind: Kind,
    pub start_wall_ns: u64,
    pub end_wall_ns: u64,
    pub attributes: Attributes,
    pub events: Vec<SpanEvent>,
    /// `Some(description)`: status Error.
    pub error: Option<String>,
}

/// A call, as findings name it in their evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CallKey {
    Cri(ConnId, u32),
    /// NRI stream ids repeat across the multiplexer's two services: the
    /// start tells them apart.
    Nri(ConnId, u32, u64),
}

impl CallKey {
    fn of_cri(c: &CriCall) -> Self {
        CallKey::Cri(c.conn, c.stream_id)
    }

    fn of_nri(c: &NriCall) -> Self {
        CallKey::Nri(
            c.conn,
            c.stream_id,
            c.start.or(c.end).map_or(0, |t| t.mono_ns),
        )
    }

    fn of_evidence(e: &Evidence) -> Option<Self> {
        match e {
            Evidence::Cri {
                conn, stream_id, ..
            } => Some(CallKey::Cri(*conn, *stream_id)),
            Evidence::Nri {
                conn,
                stream_id,
                start,
                ..
            } => Some(CallKey::Nri(
                *conn,
                *stream_id,
                start.map_or(0, |t| t.mono_ns),
            )),
            Evidence::Kernel { .. } => None,
        }
    }

    fn span_id(&self) -> [u8; 8] {
        match *self {
            CallKey::Cri(c, s) => id64(&[b"cri", &c.0.to_le_bytes(), &s.to_le_bytes()]),
            CallKey::Nri(c, s, t) => id64(&[
                b"nri",
                &c.0.to_le_bytes(),
                &s.to_le_bytes(),
                &t.to_le_bytes(),
            ]),
        }
    }
}

/// FNV-1a, 64 bits, over `parts` (each followed by its length, so that
/// ("ab","c") and ("a","bc") differ): stable across builds and runs, unlike
/// std's hasher. Never 0 (an invalid OTLP id).
fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for p in parts {
        for &b in p.iter().chain(&(p.len() as u32).to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h.max(1)
}

fn id64(parts: &[&[u8]]) -> [u8; 8] {
    fnv(0, parts).to_be_bytes()
}

fn id128(parts: &[&[u8]]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0x9e37_79b9_7f4a_7c15, parts).to_be_bytes());
    out[8..].copy_from_slice(&fnv(0x243f_6a88_85a3_08d3, parts).to_be_bytes());
    out
}

/// A pod as the spans name it (Kubernetes resource attributes).
#[derive(Debug, Clone, Default)]
struct PodAttrs {
    namespace: String,
    name: String,
    uid: String,
}

impl PodAttrs {
    fn new(namespace: &str, name: &str, uid: &str) -> Self {
        PodAttrs {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        }
    }
}

/// One pod lifecycle's trace.
#[derive(Debug)]
struct Lifecycle {
    trace_id: [u8; 16],
    /// The RunPodSandbox span, when it was seen and had no trace context.
    root: Option<[u8; 8]>,
    pod: PodAttrs,
}

impl Lifecycle {
    /// Where a span of the lifecycle goes: its trace, under its root.
    fn place(&self) -> ([u8; 16], Option<Parent>) {
        (self.trace_id, self.root.map(Parent::local))
    }
}

/// A map that keeps its newest `cap` keys (the oldest inserted go first).
#[derive(Debug)]
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// The value of `k`, made by `make` when `k` is new.
    fn entry(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&k) {
            if self.map.len() >= self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
            self.order.push_back(k.clone());
        }
        self.map.entry(k).or_insert_with(make)
    }
}

#[derive(Debug)]
struct Held {
    key: CallKey,
    release_ns: u64,
    span: OtelSpan,
}

/// Records in, spans out: pure and deterministic (capture time only).
#[derive(Debug)]
pub(crate) struct SpanMaker {
    pods: PodIndex,
    /// Pod lifecycles by sandbox id.
    lifecycles: Bounded<String, Lifecycle>,
    held: VecDeque<Held>,
    /// Spans gone out: their trace and span ids, for late findings.
    placed: Bounded<CallKey, ([u8; 16], [u8; 8])>,
    /// Recent kernel events, with the sandbox their ids name.
    kernel: VecDeque<(String, SandboxEvent)>,
    now_ns: u64,
}

impl SpanMaker {
    pub(crate) fn new() -> Self {
        SpanMaker {
            pods: PodIndex::new(),
            lifecycles: Bounded::new(MAX_LIFECYCLES),
            held: VecDeque::new(),
            placed: Bounded::new(MAX_PLACED),
            kernel: VecDeque::new(),
            now_ns: 0,
        }
    }

    /// One record; spans whose hold ended go to `out`.
    pub(crate) fn record(&mut self, r: &Record, out: &mut Vec<OtelSpan>) {
        self.pods.learn(r);
        if let Some(t) = r.ts() {
            self.now_ns = self.now_ns.max(t.mono_ns);
        }
        // First what its time releases: a finding that comes after its
        // call's hold finds that span gone out.
        self.release(self.now_ns, out);
        match r {
            Record::CriSpan(s) => self.cri_span(s),
            Record::NriUncaused(u) => {
                let (trace_id, parent) = self.uncaused_parent(&u.span.call);
                let span = self.hook_span(&u.span, trace_id, parent);
                self.hold(CallKey::of_nri(&u.span.call), u.span.call.end, span);
            }
            Record::Violation(v) => self.finding(v, out),
            Record::Observed(Observation::Sandbox(e)) => {
                let sandbox = e
                    .pod_texts()
                    .into_iter()
                    .flat_map(crate::capture::sandbox::ids_in)
                    .find_map(|id| self.pods.sandbox_of(id))
                    .map(str::to_owned);
                if let Some(sandbox) = sandbox {
                    if self.kernel.len() >= MAX_KERNEL {
                        self.kernel.pop_front();
                    }
                    self.kernel.push_back((sandbox, e.clone()));
                }
            }
            Record::Observed(_) => {}
        }
    }

    /// Capture time reached `now_ns` (the engine's clock): spans held past
    /// their hold go out.
    pub(crate) fn advance(&mut self, now_ns: u64, out: &mut Vec<OtelSpan>) {
        self.now_ns = self.now_ns.max(now_ns);
        self.release(self.now_ns, out);
    }

    /// Every held span goes out (the input ended, or a live run has been
    /// quiet for longer than the hold).
    pub(crate) fn flush(&mut self, out: &mut Vec<OtelSpan>) {
        self.release(u64::MAX, out);
    }

    fn release(&mut self, now_ns: u64, out: &mut Vec<OtelSpan>) {
        while let Some(h) = self.held.front() {
            if h.release_ns > now_ns && self.held.len() <= MAX_HELD {
                break;
            }
            let h = self.held.pop_front().expect("front exists");
            *self.placed.entry(h.key, Default::default) = (h.span.trace_id, h.span.span_id);
            out.push(h.span);
        }
    }

    fn hold(&mut self, key: CallKey, end: Option<Timestamp>, span: OtelSpan) {
        let at = end.map_or(self.now_ns, |t| t.mono_ns);
        self.held.push_back(Held {
            key,
            release_ns: at.saturating_add(HOLD_NS),
            span,
        });
    }

    /// The sandbox a CRI call is about, when its ids tell.
    fn sandbox_of_cri(&self, c: &CriCall) -> Option<String> {
        c.sandbox_id
            .iter()
            .chain(&c.container_id)
            .find_map(|id| self.pods.sandbox_of(id))
            .or(c.sandbox_id.as_deref())
            .map(str::to_owned)
    }

    /// The lifecycle of `sandbox`, made when first met (after a late
    /// attach: no root).
    fn lifecycle(&mut self, sandbox: &str) -> &mut Lifecycle {
        let pods = &self.pods;
        self.lifecycles.entry(sandbox.to_owned(), || Lifecycle {
            trace_id: id128(&[b"pod lifecycle", sandbox.as_bytes()]),
            root: None,
            pod: pods
                .by_id(sandbox)
                .map(|p| PodAttrs::new(&p.namespace, &p.name, ""))
                .unwrap_or_default(),
        })
    }

    fn cri_span(&mut self, s: &CriSpan) {
        let c = &s.call;
        let sandbox = self.sandbox_of_cri(c);
        // The polling of a node's CRI client (lists, status, stats) is
        // about no pod: without trace context or hooks it would only be
        // noise, one trace per call.
        if sandbox.is_none() && c.traceparent.is_none() && s.hooks.is_empty() {
            return;
        }
        let key = CallKey::of_cri(c);
        let span_id = key.span_id();
        // The pod's names: the call's own (RunPodSandbox), kept for the
        // lifecycle's later calls.
        let pod = match (&c.pod, &sandbox) {
            (Some(p), Some(sb)) => {
                let pod = PodAttrs::new(&p.namespace, &p.name, &p.uid);
                self.lifecycle(sb).pod = pod.clone();
                pod
            }
            (Some(p), None) => PodAttrs::new(&p.namespace, &p.name, &p.uid),
            (None, Some(sb)) => self.lifecycle(sb).pod.clone(),
            (None, None) => PodAttrs::default(),
        };
        let (trace_id, parent) = match (&c.traceparent, &sandbox) {
            (Some(tp), _) => (tp.trace_id, Some(Parent::remote(*tp))),
            (None, Some(sb)) => {
                let lc = self.lifecycle(sb);
                if c.is(CriMethod::RunPodSandbox) && lc.root.is_none() {
                    lc.root = Some(span_id);
                }
                let (trace_id, parent) = lc.place();
                (trace_id, parent.filter(|p| p.span_id != span_id))
            }
            (None, None) => (id128(&[b"cri call", &span_id]), None),
        };
        let mut span = cri_call_span(c, s, trace_id, span_id, parent, &pod);
        if let (Some(sb), true) = (
            &sandbox,
            c.cri_method()
                .is_some_and(|m| TEARDOWN_METHODS.contains(&m)),
        ) {
            self.kernel_events(sb, c, &mut span);
        }
        let end = c.end;
        for h in &s.hooks {
            let (trace_id, parent) = match h.call.traceparent {
                Some(tp) => (tp.trace_id, Parent::remote(tp)),
                None => (trace_id, Parent::local(span_id)),
            };
            let hs = self.hook_span(h, trace_id, Some(parent));
            // Held as long as their CRI call: one record, one release.
            self.hold(CallKey::of_nri(&h.call), end, hs);
        }
        self.hold(key, end, span);
    }

    /// The kernel events of sandbox `sb` while teardown call `c` ran.
    fn kernel_events(&self, sb: &str, c: &CriCall, span: &mut OtelSpan) {
        let (Some(start), Some(end)) = (c.start, c.end) else {
            return;
        };
        let mut n = 0usize;
        for (s, e) in &self.kernel {
            if s != sb || e.ts.mono_ns < start.mono_ns || e.ts.mono_ns > end.mono_ns {
                continue;
            }
            n += 1;
            if n > MAX_KERNEL_PER_SPAN {
                continue;
            }
            span.events.push(SpanEvent {
                name: "nri_trace.kernel",
                wall_ns: e.ts.wall_ns,
                attributes: vec![
                    (
                        "nri_trace.kernel.event",
                        Value::Str(sanitize(&e.describe())),
                    ),
                    ("process.pid", Value::Int(i64::from(e.tgid))),
                ],
            });
        }
        if n > MAX_KERNEL_PER_SPAN {
            span.attributes.push((
                "nri_trace.kernel.events_dropped",
                Value::Int((n - MAX_KERNEL_PER_SPAN) as i64),
            ));
        }
    }

    /// An uncaused delivery's trace and parent: its own trace context, or
    /// its pod's lifecycle, or a trace of its own.
    fn uncaused_parent(&mut self, c: &NriCall) -> ([u8; 16], Option<Parent>) {
        if let Some(tp) = c.traceparent {
            return (tp.trace_id, Some(Parent::remote(tp)));
        }
        let sandbox = c
            .pod
            .as_ref()
            .map(|p| p.id.as_str())
            .filter(|id| !id.is_empty())
            .or_else(|| {
                c.container
                    .as_ref()
                    .and_then(|k| self.pods.sandbox_of(&k.id))
            })
            .map(str::to_owned);
        match sandbox {
            Some(sb) => self.lifecycle(&sb).place(),
            None => (id128(&[b"nri call", &CallKey::of_nri(c).span_id()]), None),
        }
    }

    fn hook_span(&mut self, h: &HookSpan, trace_id: [u8; 16], parent: Option<Parent>) -> OtelSpan {
        let c = &h.call;
        let pod = match &c.pod {
            Some(p) if !p.name.is_empty() => PodAttrs::new(&p.namespace, &p.name, &p.uid),
            Some(p) if !p.id.is_empty() => self.lifecycle(&p.id).pod.clone(),
            _ => PodAttrs::default(),
        };
        nri_call_span(h, trace_id, CallKey::of_nri(c).span_id(), parent, &pod)
    }

    /// A finding: an event on the held spans of its evidence, else a span
    /// of its own under the first of them that went out, else in its
    /// pod's lifecycle.
    fn finding(&mut self, v: &Violation, out: &mut Vec<OtelSpan>) {
        let event = SpanEvent {
            name: "nri_trace.finding",
            wall_ns: v.ts.wall_ns,
            attributes: finding_attributes(v),
        };
        let keys: Vec<CallKey> = v.evidence.iter().filter_map(CallKey::of_evidence).collect();
        let mut attached = false;
        for h in self.held.iter_mut().filter(|h| keys.contains(&h.key)) {
            h.span.events.push(event.clone());
            h.span.error.get_or_insert_with(|| v.rule.to_owned());
            attached = true;
        }
        if attached {
            return;
        }
        let (trace_id, parent) = match keys.iter().find_map(|k| self.placed.get(k)) {
            Some(&(trace_id, span_id)) => (trace_id, Some(Parent::local(span_id))),
            None => match v.pod.as_deref().and_then(|p| self.pods.sandbox_of(p)) {
                Some(sb) => {
                    let sb = sb.to_owned();
                    self.lifecycle(&sb).place()
                }
                None => (
                    id128(&[b"finding", v.rule.as_bytes(), &v.ts.mono_ns.to_le_bytes()]),
                    None,
                ),
            },
        };
        out.push(OtelSpan {
            trace_id,
            span_id: id64(&[b"finding", v.rule.as_bytes(), &v.ts.mono_ns.to_le_bytes()]),
            parent,
            name: format!("nri-trace finding {}", v.rule),
            kind: Kind::Internal,
            start_wall_ns: v.ts.wall_ns,
            end_wall_ns: v.ts.wall_ns,
            attributes: finding_attributes(v),
            events: vec![event],
            error: Some(v.rule.to_owned()),
        });
    }
}

impl Parent {
    fn remote(tp: TraceContext) -> Self {
        Parent {
            span_id: tp.span_id,
            remote: true,
        }
    }

    fn local(span_id: [u8; 8]) -> Self {
        Parent {
            span_id,
            remote: false,
        }
    }
}

fn finding_attributes(v: &Violation) -> Attributes {
    let mut a = vec![
        ("nri_trace.rule", Value::Str(v.rule.to_owned())),
        (
            "nri_trace.severity",
            Value::Str(format!("{:?}", v.severity).to_lowercase()),
        ),
        (
            "nri_trace.message",
            Value::Str(sanitize(&finding_message(v))),
        ),
    ];
    if let Some(p) = &v.plugin {
        a.push(("nri.plugin", Value::Str(sanitize(p))));
    }
    a
}

/// Start and end of a call, wall clock: a partial call (no start) is an
/// instant at its end.
fn wall_span(
    start: Option<Timestamp>,
    end: Option<Timestamp>,
    duration_ns: Option<u64>,
) -> (u64, u64) {
    match (start, end) {
        (Some(s), Some(e)) => (s.wall_ns, e.wall_ns.max(s.wall_ns)),
        (Some(s), None) => (s.wall_ns, s.wall_ns + duration_ns.unwrap_or(0)),
        (None, Some(e)) => (e.wall_ns, e.wall_ns),
        (None, None) => (0, 0),
    }
}

fn pod_attributes(a: &mut Attributes, pod: &PodAttrs) {
    for (k, v) in [
        ("k8s.namespace.name", &pod.namespace),
        ("k8s.pod.name", &pod.name),
        ("k8s.pod.uid", &pod.uid),
    ] {
        if !v.is_empty() {
            a.push((k, Value::Str(sanitize(v))));
        }
    }
}

fn cri_call_span(
    c: &CriCall,
    s: &CriSpan,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<Parent>,
    pod: &PodAttrs,
) -> OtelSpan {
    let method = c.method.as_ref().map_or("unknown", |m| m.name());
    let service = c.service.as_deref().unwrap_or("runtime.v1.RuntimeService");
    let rpc = format!("{service}/{method}");
    let mut a: Attributes = vec![
        ("rpc.system.name", Value::Str("grpc".into())),
        ("rpc.method", Value::Str(sanitize(&rpc))),
        (
            "rpc.response.status_code",
            Value::Str(cri_status(&c.outcome)),
        ),
    ];
    pod_attributes(&mut a, pod);
    if let Some(id) = &c.container_id {
        a.push(("container.id", Value::Str(sanitize(id))));
    }
    if let Some(k) = &c.container {
        a.push(("k8s.container.name", Value::Str(sanitize(&k.name))));
    }
    if let Some(cl) = &c.client {
        a.push(("nri_trace.client.pid", Value::Int(i64::from(cl.pid))));
        if let Some(comm) = &cl.comm {
            a.push(("nri_trace.client.comm", Value::Str(sanitize(comm))));
        }
    }
    a.push(("nri_trace.nri_s", Value::F64(s.nri_ns as f64 / 1e9)));
    let error = (!c.outcome.is_ok() && c.end.is_some()).then(|| sanitize(&c.outcome.describe()));
    let ids = (trace_id, span_id, parent);
    server_span(
        ids,
        sanitize(&rpc),
        a,
        (c.start, c.end, c.duration_ns, c.partial),
        error,
    )
}

/// When a call ran: start, end, duration, and whether its start is
/// unknown (partial).
type CallTimes = (Option<Timestamp>, Option<Timestamp>, Option<u64>, bool);

/// A call's server span.
fn server_span(
    (trace_id, span_id, parent): ([u8; 16], [u8; 8], Option<Parent>),
    name: String,
    mut attributes: Attributes,
    (start, end, duration_ns, partial): CallTimes,
    error: Option<String>,
) -> OtelSpan {
    if partial {
        attributes.push(("nri_trace.partial", Value::Bool(true)));
    }
    let (start, end) = wall_span(start, end, duration_ns);
    OtelSpan {
        trace_id,
        span_id,
        parent,
        name,
        kind: Kind::Server,
        start_wall_ns: start,
        end_wall_ns: end,
        attributes,
        events: Vec::new(),
        error,
    }
}

/// The gRPC status code name of an outcome (google.rpc.Code), or what
/// ended the call instead.
fn cri_status(o: &CriOutcome) -> String {
    match o {
        CriOutcome::Ok => "OK".into(),
        CriOutcome::Error { status, .. } => sanitize(status),
        CriOutcome::DeadlineExceeded => "DEADLINE_EXCEEDED".into(),
        CriOutcome::Cancelled => "CANCELLED".into(),
        CriOutcome::Reset { .. } => "RESET".into(),
        CriOutcome::ConnectionClosed => "CONNECTION_CLOSED".into(),
        CriOutcome::NoResponse => "NO_RESPONSE".into(),
        CriOutcome::Unknown => "UNKNOWN".into(),
        // Failed, its gRPC code hidden.
        CriOutcome::Failed => "FAILED".into(),
    }
}

fn nri_call_span(
    h: &HookSpan,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<Parent>,
    pod: &PodAttrs,
) -> OtelSpan {
    let c = &h.call;
    let service = match c.mux_conn {
        2 => RUNTIME_SERVICE,
        _ => PLUGIN_SERVICE,
    };
    let method = c.method.map_or("unknown", |m| m.name());
    let rpc = format!("{service}/{method}");
    let status = match &c.outcome {
        NriOutcome::Ok => "OK".to_owned(),
        NriOutcome::Error { code, .. } => grpc_status_name(*code as u32).to_owned(),
        NriOutcome::TimedOut => "DEADLINE_EXCEEDED".into(),
        NriOutcome::ConnectionClosed => "CONNECTION_CLOSED".into(),
        NriOutcome::NoResponse => "NO_RESPONSE".into(),
    };
    let mut a: Attributes = vec![
        ("rpc.system.name", Value::Str("ttrpc".into())),
        ("rpc.method", Value::Str(rpc.clone())),
        ("rpc.response.status_code", Value::Str(status)),
        ("nri.plugin", Value::Str(sanitize(&c.plugin.label()))),
        ("nri.hook", Value::Str(h.hook.to_string())),
    ];
    pod_attributes(&mut a, pod);
    if let Some(k) = &c.container {
        if !k.id.is_empty() {
            a.push(("container.id", Value::Str(sanitize(&k.id))));
        }
        if !k.name.is_empty() {
            a.push(("k8s.container.name", Value::Str(sanitize(&k.name))));
        }
    }
    if let Some(q) = h.queued_ns {
        a.push(("nri_trace.queued_s", Value::F64(q as f64 / 1e9)));
    }
    if !h.queued_behind.is_empty() {
        a.push((
            "nri_trace.queued_behind",
            Value::Str(sanitize(&h.queued_behind.join(","))),
        ));
    }
    if let Some(o) = h.own_ns {
        a.push(("nri_trace.own_s", Value::F64(o as f64 / 1e9)));
    }
    let error = (!c.outcome.is_ok()).then(|| sanitize(&c.outcome.describe()));
    let ids = (trace_id, span_id, parent);
    server_span(
        ids,
        rpc,
        a,
        (c.start, c.end, c.duration_ns, c.partial),
        error,
    )
}

#[cfg(test)]
mod tests;
