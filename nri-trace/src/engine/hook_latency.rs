//! Hook latency: how long each plugin held each pod operation, and how long
//! a delivery waited behind the plugins called before it.
//!
//! NRI calls plugins one after another, in index order, under one lock
//! (nri `pkg/adaptation/adaptation.go`: every entry point takes `r.Lock()`
//! and loops over `r.plugins`). A pod event therefore reaches plugin k only
//! when plugins 1..k-1 have answered: a delivery's *queued* time (start of
//! the first delivery of the same event to the same pod/container, up to
//! its own start) is the wait behind earlier plugins, apart from its *own*
//! time (its call's duration).
//!
//! [`HookTimer`] turns finished [`NriCall`]s into [`HookSpan`]s and keeps
//! per (plugin, hook) latency histograms (hdrhistogram). Pure and
//! deterministic: it reads only the calls' own timestamps.

use crate::model::nri_call::NriMethod;
use std::collections::{BTreeMap, HashMap};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    histogram::{record, BucketCounts, Buckets},
    window::{WindowStats, Windowed},
};
use crate::{
    decode::nri::message::Event,
    model::nri_call::{Caller, NriCall, NriOutcome},
};

/// A delivery that starts within this long after the previous delivery of
/// the same hook ended is the next plugin's turn of the same operation
/// (the runtime moves on in microseconds; a new pod operation of the same
/// kind comes from a new CRI request much later).
const SAME_OPERATION_GAP_NS: u64 = 100_000_000;
/// Timestamp jitter allowed between a response read and the next write.
const OVERLAP_SLACK_NS: u64 = 1_000_000;

/// What a delivery is, as a hook: an NRI event (RUN_POD_SANDBOX ...), or
/// a method of the plugin's lifecycle (RegisterPlugin, Configure,
/// Synchronize, Shutdown, UpdateContainers) or one nri-trace does not
/// know, by its name on the wire. JSON and text show it as that one
/// string (nri api.proto's event names; the method names on the wire),
/// and compares, orders and hashes by that string.
#[derive(Debug, Clone)]
pub enum Hook {
    Event(Event),
    Method(NriMethod),
    /// A partial call (response only): its request went before the capture.
    Unknown,
}

impl Hook {
    /// The hook of `call`: its event, else its method.
    pub fn of(call: &NriCall) -> Hook {
        match (call.event, &call.method) {
            (Some(e), _) => Hook::Event(e),
            (None, Some(m)) => Hook::Method(*m),
            (None, None) => Hook::Unknown,
        }
    }

    /// The event, for an event delivery.
    pub fn event(&self) -> Option<Event> {
        match self {
            Hook::Event(e) => Some(*e),
            _ => None,
        }
    }

    /// The event's name (RUN_POD_SANDBOX) or the method's.
    pub fn as_str(&self) -> &str {
        match self {
            Hook::Event(e) => e.as_str_name(),
            Hook::Method(m) => m.name(),
            Hook::Unknown => "?",
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that `{:<28}` lines the tables up.
        f.pad(self.as_str())
    }
}

impl PartialEq for Hook {
    fn eq(&self, other: &Hook) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Hook {}

impl std::hash::Hash for Hook {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl PartialOrd for Hook {
    fn partial_cmp(&self, other: &Hook) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Hook {
    fn cmp(&self, other: &Hook) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<str> for Hook {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Hook {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Hook {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One finished call, seen as a hook in a pod operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookSpan {
    #[serde(flatten)]
    pub call: NriCall,
    /// The hook: the event for event deliveries, else the method
    /// ("Configure", "Synchronize", "RegisterPlugin"...).
    pub hook: Hook,
    /// Time this delivery waited behind earlier plugins of the same
    /// operation (0 for the first plugin; `None` when it cannot be told).
    pub queued_ns: Option<u64>,
    /// The plugins called before this one in the same operation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queued_behind: Vec<String>,
    /// The plugin's own time: `plugin_ns` when the plugin's end was
    /// captured, else `duration_ns` (which adds the runtime's pickup delay).
    pub own_ns: Option<u64>,
}

/// One operation in progress: deliveries of one hook to one pod/container.
#[derive(Debug)]
struct Operation {
    first_start: u64,
    last_end: u64,
    plugins: Vec<String>,
}

/// One (plugin, hook)'s exported histogram and outcome counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookBuckets {
    pub plugin: String,
    pub hook: Hook,
    /// Own times of the calls whose own time is known.
    pub own: Buckets,
    /// How the calls ended: answered, answered with an error (by status
    /// code), given up at their deadline, cut by their connection's close
    /// (calls the capture ended before are in none of these).
    pub ok: u64,
    pub error_codes: BTreeMap<i32, u64>,
    pub timeouts: u64,
    pub closed: u64,
}

/// Latency of one (plugin, hook).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookSummary {
    pub plugin: String,
    pub hook: Hook,
    pub calls: u64,
    pub errors: u64,
    /// Unimplemented answers to a per-event method, each followed by the
    /// runtime's StateChange fallback ([`NriCall::is_fallback_refusal`]):
    /// the plugin predates the method; not errors.
    pub fallbacks: u64,
    pub timeouts: u64,
    /// Own time ([`HookSpan::own_ns`]) percentiles, nanoseconds.
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// 99th percentile of the time the runtime waited (`duration_ns`).
    pub runtime_p99_ns: u64,
    /// Total time spent queued behind earlier plugins.
    pub queued_total_ns: u64,
    /// Own time over the last minute of capture time (before the latest
    /// call seen).
    pub last_minute: WindowStats,
}

struct Stats {
    /// Microseconds (see [`Stats::new`]).
    own: Histogram<u32>,
    runtime: Histogram<u32>,
    /// The own times again, exactly, in the exported buckets.
    own_buckets: BucketCounts,
    calls: u64,
    /// Calls answered without an error.
    ok: u64,
    /// Error answers by their ttrpc (gRPC) status code.
    error_codes: BTreeMap<i32, u64>,
    /// Calls whose connection closed before an answer or the deadline.
    closed: u64,
    errors: u64,
    fallbacks: u64,
    timeouts: u64,
    queued_total_ns: u64,
    window: Windowed,
}

impl Stats {
    fn new() -> Self {
        Stats {
            // Microseconds, 2 significant digits (±1%), u32 counts,
            // auto-resizing: a histogram covers only the range it has seen
            // (a few KiB for ms-range hooks). A fixed 1 ns..1 h range at 3
            // digits would zero 192 KiB per (plugin, hook) up front, more
            // than decoding a whole short recording (docs/benchmarks.md).
            own: Histogram::new(2).expect("2 significant digits"),
            runtime: Histogram::new(2).expect("2 significant digits"),
            own_buckets: BucketCounts::default(),
            calls: 0,
            ok: 0,
            error_codes: BTreeMap::new(),
            closed: 0,
            errors: 0,
            fallbacks: 0,
            timeouts: 0,
            queued_total_ns: 0,
            window: Windowed::default(),
        }
    }
}

/// Hook spans and per (plugin, hook) histograms.
#[derive(Default)]
pub(crate) struct HookTimer {
    open: HashMap<(Hook, String, String), Operation>,
    stats: BTreeMap<(String, Hook), Stats>,
    /// Latest call end seen (capture time): where the window ends.
    last_ns: u64,
}

impl HookTimer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Account one finished call and describe it as a span.
    pub(crate) fn on_call(&mut self, call: NriCall) -> HookSpan {
        let hook = Hook::of(&call);
        let plugin = call.plugin.label();
        let mut queued_ns = None;
        let mut queued_behind = Vec::new();
        // Only pod/container events are operations plugins queue in; the
        // handshake (Configure, Synchronize...) is per plugin.
        let event = call.event.is_some();
        if let (Some(start), Caller::Runtime, false, true) =
            (call.start, call.caller, call.partial, event)
        {
            let start = start.mono_ns;
            // Where the call's wait ended: its response, or the close.
            let end = start + call.duration_ns.unwrap_or(0);
            let key = (
                hook.clone(),
                call.pod.as_ref().map(|p| p.id.clone()).unwrap_or_default(),
                call.container
                    .as_ref()
                    .map(|c| c.id.clone())
                    .unwrap_or_default(),
            );
            let joins = self.open.get(&key).is_some_and(|op| {
                start + OVERLAP_SLACK_NS >= op.last_end
                    && start.saturating_sub(op.last_end) <= SAME_OPERATION_GAP_NS
            });
            if joins {
                let op = self.open.get_mut(&key).expect("checked above");
                queued_ns = Some(start.saturating_sub(op.first_start));
                queued_behind.clone_from(&op.plugins);
                op.last_end = op.last_end.max(end);
                op.plugins.push(plugin.clone());
            } else {
                queued_ns = Some(0);
                self.open.insert(
                    key,
                    Operation {
                        first_start: start,
                        last_end: end,
                        plugins: vec![plugin.clone()],
                    },
                );
            }
            // Forget operations that can no longer be joined.
            self.open
                .retain(|_, op| start.saturating_sub(op.last_end) <= SAME_OPERATION_GAP_NS);
        }
        let s = self
            .stats
            .entry((plugin, hook.clone()))
            .or_insert_with(Stats::new);
        s.calls += 1;
        match call.outcome {
            NriOutcome::Ok => s.ok += 1,
            NriOutcome::Error { .. } if call.is_fallback_refusal() => s.fallbacks += 1,
            NriOutcome::Error { code, .. } => {
                s.errors += 1;
                *s.error_codes.entry(code).or_default() += 1;
            }
            NriOutcome::TimedOut => s.timeouts += 1,
            NriOutcome::ConnectionClosed => s.closed += 1,
            NriOutcome::NoResponse => {}
        }
        let own_ns = call
            .plugin_ns
            .or_else(|| call.duration_ns.filter(|_| call.end.is_some()));
        let at = call.end.or(call.start).map_or(0, |t| t.mono_ns);
        self.last_ns = self.last_ns.max(at);
        if let Some(d) = own_ns {
            record(&mut s.own, d);
            s.own_buckets.observe(d);
            s.window.record(at, d);
        }
        if let (Some(d), true) = (call.duration_ns, call.end.is_some()) {
            record(&mut s.runtime, d);
        }
        s.queued_total_ns += queued_ns.unwrap_or(0);
        HookSpan {
            call,
            hook,
            queued_ns,
            queued_behind,
            own_ns,
        }
    }

    /// Own-time buckets per (plugin, hook), with how its calls ended.
    pub(crate) fn buckets(&self) -> Vec<HookBuckets> {
        self.stats
            .iter()
            .map(|((p, h), s)| HookBuckets {
                plugin: p.clone(),
                hook: h.clone(),
                own: s.own_buckets.buckets(),
                ok: s.ok,
                error_codes: s.error_codes.clone(),
                timeouts: s.timeouts,
                closed: s.closed,
            })
            .collect()
    }

    /// Latency per (plugin, hook), sorted by plugin then hook.
    pub(crate) fn summary(&self) -> Vec<HookSummary> {
        self.stats
            .iter()
            .map(|((plugin, hook), s)| {
                let q = |p: f64| {
                    if s.own.is_empty() {
                        0
                    } else {
                        s.own.value_at_quantile(p) * 1000
                    }
                };
                HookSummary {
                    plugin: plugin.clone(),
                    hook: hook.clone(),
                    calls: s.calls,
                    errors: s.errors,
                    fallbacks: s.fallbacks,
                    timeouts: s.timeouts,
                    p50_ns: q(0.5),
                    p90_ns: q(0.9),
                    p99_ns: q(0.99),
                    max_ns: if s.own.is_empty() {
                        0
                    } else {
                        s.own.max() * 1000
                    },
                    runtime_p99_ns: if s.runtime.is_empty() {
                        0
                    } else {
                        s.runtime.value_at_quantile(0.99) * 1000
                    },
                    queued_total_ns: s.queued_total_ns,
                    last_minute: s.window.stats(self.last_ns),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_calls::hook;

    #[test]
    fn a_hook_shows_as_its_name_and_lines_up() {
        let h = Hook::Event(Event::RunPodSandbox);
        assert_eq!(format!("[{h:<18}]"), "[RUN_POD_SANDBOX   ]");
        assert_eq!(Hook::Method(NriMethod::Configure), "Configure");
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"RUN_POD_SANDBOX\"");
        assert!(Hook::Method(NriMethod::Configure) < h);
    }

    fn call(plugin: &str, idx: &str, pod: &str, start_ms: u64, dur_ms: u64) -> NriCall {
        let mut c = hook(
            Some(Event::RunPodSandbox),
            plugin,
            pod,
            start_ms,
            start_ms + dur_ms,
        )
        .call;
        c.plugin.index = Some(idx.into());
        c
    }

    #[test]
    fn queued_behind_earlier_plugins_of_the_same_operation() {
        let mut t = HookTimer::new();
        let a = t.on_call(call("a", "10", "p1", 1000, 500));
        let b = t.on_call(call("b", "20", "p1", 1500, 2));
        let c = t.on_call(call("c", "30", "p1", 1502, 1));
        assert_eq!(a.queued_ns, Some(0));
        assert_eq!(b.queued_ns, Some(500_000_000));
        assert_eq!(b.queued_behind, vec!["10-a".to_string()]);
        assert_eq!(c.queued_ns, Some(502_000_000));
        // Another pod's operation, later: not queued.
        let d = t.on_call(call("a", "10", "p2", 9000, 1));
        assert_eq!(d.queued_ns, Some(0));
        let s = t.summary();
        let a_run = s.iter().find(|s| s.plugin == "10-a").unwrap();
        assert_eq!(a_run.calls, 2);
        assert!(
            a_run.max_ns >= 495_000_000 && a_run.max_ns <= 505_000_000,
            "2 significant digits: within 1%: {}",
            a_run.max_ns
        );
        let b_run = s.iter().find(|s| s.plugin == "20-b").unwrap();
        assert_eq!(b_run.queued_total_ns, 500_000_000);
    }

    /// A plugin on an older stub refuses the per-event RunPodSandbox and
    /// gets the StateChange fallback: a fallback, not an error.
    #[test]
    fn a_refused_per_event_method_counts_as_a_fallback() {
        let mut t = HookTimer::new();
        let mut refused = call("a", "10", "p1", 1000, 1);
        refused.method = Some(NriMethod::Event(Event::RunPodSandbox));
        refused.outcome = NriOutcome::Error {
            code: crate::decode::nri::message::CODE_UNIMPLEMENTED,
            message: "not implemented".into(),
        };
        t.on_call(refused);
        t.on_call(call("a", "10", "p1", 1001, 1));
        let s = t.summary();
        let run = s.iter().find(|s| s.plugin == "10-a").unwrap();
        assert_eq!((run.calls, run.errors, run.fallbacks), (2, 0, 1));
    }
}
