//! The pod model: pods and containers as the traced calls show them
//! (identity, lifecycle phase, timeline of CRI calls with their NRI time)
//! and the findings against each. Built from the trace records only, so
//! the same records give the same model, live or replayed; views (report,
//! TUI) render it and hold no logic of their own.

use crate::model::cri_call::CriMethod;
use std::collections::BTreeMap;

use serde::Serialize;

use super::record::Record;
use crate::human::short_id;
use crate::{
    basic_types::Timestamp,
    capture::cri_state::CriState,
    model::{cri_call::CriOutcome, observation::Observation},
};

/// Most timeline entries kept per pod (the oldest go first).
pub(crate) const MAX_TIMELINE: usize = 256;
/// Most pods kept; past it the removed pods seen longest ago go first,
/// then the pods seen longest ago, down to three quarters (so eviction is
/// rare and its cost amortized).
pub(crate) const MAX_PODS: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodPhase {
    /// Seen only through calls that do not create it (it predates the trace).
    Seen,
    Ready,
    /// RunPodSandbox failed or the client gave up on it.
    Failed,
    Stopped,
    Removed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerPhase {
    Seen,
    Created,
    Running,
    Exited,
    Removed,
}

/// One CRI call on a pod's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    pub method: String,
    pub container: Option<String>,
    pub start: Option<Timestamp>,
    pub duration_ns: Option<u64>,
    pub nri_ns: u64,
    /// Plugins whose hooks ran during it, with their own time.
    pub hooks: Vec<(String, String, Option<u64>)>,
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerView {
    pub name: String,
    pub attempt: u32,
    pub phase: ContainerPhase,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub attempt: u32,
    pub sandbox_id: Option<String>,
    pub phase: PodPhase,
    pub first_seen: Option<Timestamp>,
    pub last_seen: Option<Timestamp>,
    /// Total CRI time and NRI hook time spent on it.
    pub cri_ns: u64,
    pub nri_ns: u64,
    pub containers: BTreeMap<String, ContainerView>,
    pub timeline: Vec<TimelineEntry>,
    pub findings: u32,
}

impl PodView {
    /// "namespace/name".
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The slowest call on its timeline.
    pub fn slowest(&self) -> Option<&TimelineEntry> {
        self.timeline.iter().max_by_key(|e| e.duration_ns)
    }
}

/// Pods by "namespace/name/uid/attempt", plus indexes by sandbox id.
#[derive(Debug, Default, Clone)]
pub struct PodModel {
    pods: BTreeMap<String, PodView>,
    by_sandbox: BTreeMap<String, String>,
    by_label: BTreeMap<String, String>,
    /// Container id -> (pod key, container name).
    by_container: BTreeMap<String, String>,
    /// Findings with no pod.
    pub node_findings: u32,
}

impl PodModel {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodView> {
        self.pods.values()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    fn key_of(&self, r: &Record) -> Option<String> {
        let Record::CriSpan(s) = r else {
            return None;
        };
        let c = &s.call;
        if let Some(p) = &c.pod {
            return Some(format!(
                "{}/{}/{}/{}",
                p.namespace, p.name, p.uid, p.attempt
            ));
        }
        if let Some(k) = c.sandbox_id.as_ref().and_then(|id| self.by_sandbox.get(id)) {
            return Some(k.clone());
        }
        if let Some(k) = c
            .container_id
            .as_ref()
            .and_then(|id| self.by_container.get(id))
        {
            return Some(k.clone());
        }
        c.sandbox_id.as_ref().map(|id| format!("sandbox {id}"))
    }

    /// Keep at most [`MAX_PODS`] pods (and their index entries).
    fn bound(&mut self) {
        if self.pods.len() <= MAX_PODS {
            return;
        }
        let mut order: Vec<(bool, u64, String)> = self
            .pods
            .iter()
            .map(|(k, p)| {
                (
                    p.phase != PodPhase::Removed,
                    p.last_seen.map_or(0, |t| t.mono_ns),
                    k.clone(),
                )
            })
            .collect();
        order.sort();
        for (_, _, k) in order.into_iter().take(self.pods.len() - MAX_PODS * 3 / 4) {
            self.pods.remove(&k);
        }
        let pods = &self.pods;
        self.by_sandbox.retain(|_, k| pods.contains_key(k));
        self.by_label.retain(|_, k| pods.contains_key(k));
        self.by_container.retain(|_, k| pods.contains_key(k));
    }

    /// Update the model with one record.
    pub fn on_record(&mut self, r: &Record) {
        self.bound();
        match r {
            Record::CriSpan(_) => self.on_span(r),
            Record::Observed(Observation::CriState(s)) => self.on_state(s),
            Record::Violation(v) => {
                match v
                    .pod
                    .as_ref()
                    .and_then(|l| self.by_label.get(l))
                    .and_then(|k| self.pods.get_mut(k))
                {
                    Some(p) => p.findings += 1,
                    None => self.node_findings += 1,
                }
            }
            _ => {}
        }
    }

    /// The pods the runtime listed (`cri_state`) that the model does not
    /// know yet, in the state and with the containers it listed: the pods
    /// made before the trace.
    fn on_state(&mut self, s: &CriState) {
        for p in &s.pods {
            if p.name.is_empty() || self.by_sandbox.contains_key(&p.id) {
                continue;
            }
            let key = format!("{}/{}/{}/{}", p.namespace, p.name, p.uid, p.attempt);
            let containers = s
                .containers
                .iter()
                .filter(|c| c.sandbox_id == p.id)
                .map(|c| {
                    let phase = match c.state.as_str() {
                        "created" => ContainerPhase::Created,
                        "running" => ContainerPhase::Running,
                        "exited" => ContainerPhase::Exited,
                        _ => ContainerPhase::Seen,
                    };
                    self.by_container.insert(c.id.clone(), key.clone());
                    (
                        c.id.clone(),
                        ContainerView {
                            name: c.name.clone(),
                            attempt: c.attempt,
                            phase,
                        },
                    )
                })
                .collect();
            let view = PodView {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
                attempt: p.attempt,
                sandbox_id: Some(p.id.clone()),
                // SANDBOX_NOTREADY: stopped (or its pause process died).
                phase: if p.state == "ready" {
                    PodPhase::Ready
                } else {
                    PodPhase::Stopped
                },
                first_seen: Some(s.ts),
                last_seen: Some(s.ts),
                cri_ns: 0,
                nri_ns: 0,
                containers,
                timeline: Vec::new(),
                findings: 0,
            };
            self.by_sandbox.insert(p.id.clone(), key.clone());
            self.by_label.insert(view.label(), key.clone());
            self.pods.entry(key).or_insert(view);
        }
        self.bound();
    }

    fn on_span(&mut self, r: &Record) {
        let Some(key) = self.key_of(r) else { return };
        let Record::CriSpan(s) = r else { return };
        let c = &s.call;
        let pod = self.pods.entry(key.clone()).or_insert_with(|| {
            let (namespace, name, uid, attempt) = match &c.pod {
                Some(p) => (
                    p.namespace.clone(),
                    p.name.clone(),
                    p.uid.clone(),
                    p.attempt,
                ),
                None => (
                    String::new(),
                    c.sandbox_id.clone().unwrap_or_default(),
                    String::new(),
                    0,
                ),
            };
            PodView {
                namespace,
                name,
                uid,
                attempt,
                sandbox_id: None,
                phase: PodPhase::Seen,
                first_seen: c.start,
                last_seen: c.end,
                cri_ns: 0,
                nri_ns: 0,
                containers: BTreeMap::new(),
                timeline: Vec::new(),
                findings: 0,
            }
        });
        if pod.sandbox_id.is_none() {
            pod.sandbox_id.clone_from(&c.sandbox_id);
        }
        if let Some(id) = &pod.sandbox_id {
            self.by_sandbox.insert(id.clone(), key.clone());
        }
        self.by_label.insert(pod.label(), key.clone());
        pod.last_seen = c.end.or(pod.last_seen);
        pod.cri_ns += c.duration_ns.unwrap_or(0);
        pod.nri_ns += s.nri_ns;
        let ok = c.outcome == CriOutcome::Ok;
        let method = c.method_name().unwrap_or("(unknown)").to_owned();
        match (c.cri_method(), ok) {
            (Some(CriMethod::RunPodSandbox), true) => pod.phase = PodPhase::Ready,
            (Some(CriMethod::RunPodSandbox), false) if pod.phase <= PodPhase::Failed => {
                pod.phase = PodPhase::Failed
            }
            (Some(CriMethod::StopPodSandbox), true) => pod.phase = pod.phase.max(PodPhase::Stopped),
            (Some(CriMethod::RemovePodSandbox), true) => pod.phase = PodPhase::Removed,
            _ => {}
        }
        // Containers.
        let container_name = c.container.as_ref().map(|k| k.name.clone());
        if let Some(id) = &c.container_id {
            let known = pod.containers.contains_key(id);
            let name = container_name
                .clone()
                .or_else(|| known.then(|| pod.containers[id].name.clone()))
                .unwrap_or_else(|| short_id(id).to_owned());
            let view = pod
                .containers
                .entry(id.clone())
                .or_insert_with(|| ContainerView {
                    name,
                    attempt: c.container.as_ref().map_or(0, |k| k.attempt),
                    phase: ContainerPhase::Seen,
                });
            if ok {
                view.phase = match c.cri_method() {
                    Some(CriMethod::CreateContainer) => ContainerPhase::Created,
                    Some(CriMethod::StartContainer) => ContainerPhase::Running,
                    Some(CriMethod::StopContainer) => ContainerPhase::Exited,
                    Some(CriMethod::RemoveContainer) => ContainerPhase::Removed,
                    _ => view.phase,
                };
            }
            self.by_container.insert(id.clone(), key);
        }
        let container = container_name.or_else(|| {
            c.container_id
                .as_ref()
                .and_then(|id| pod.containers.get(id))
                .map(|v| v.name.clone())
        });
        if pod.timeline.len() == MAX_TIMELINE {
            pod.timeline.remove(0);
        }
        pod.timeline.push(TimelineEntry {
            method,
            container,
            start: c.start,
            duration_ns: c.duration_ns,
            nri_ns: s.nri_ns,
            hooks: s
                .hooks
                .iter()
                .map(|h| (h.call.plugin.label(), h.hook.to_string(), h.own_ns))
                .collect(),
            ok,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::{cri::message::PodMeta, nri::message::Event},
        engine::{correlate::CriSpan, test_calls::*},
    };

    fn span(
        method: &str,
        start: u64,
        end: u64,
        pod: bool,
        hooks: Vec<crate::engine::hook_latency::HookSpan>,
    ) -> Record {
        let mut c = cri(Some(method), "s1", start, end);
        if pod {
            c.pod = Some(PodMeta {
                name: "web".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                attempt: 0,
            });
        }
        let nri_ns = hooks.iter().filter_map(|h| h.call.duration_ns).sum();
        Record::CriSpan(CriSpan {
            call: c,
            hooks,
            nri_ns,
            nri_permille: None,
        })
    }

    #[test]
    fn lifecycle_phases_and_time() {
        let mut m = PodModel::new();
        m.on_record(&span(
            "RunPodSandbox",
            0,
            100,
            true,
            vec![hook(Some(Event::RunPodSandbox), "a", "s1", 10, 60)],
        ));
        // Later calls name the sandbox id only: the same pod.
        m.on_record(&span("StopPodSandbox", 200, 230, false, vec![]));
        assert_eq!(m.len(), 1);
        let p = m.pods().next().unwrap();
        assert_eq!(p.label(), "ns/web");
        assert_eq!(p.phase, PodPhase::Stopped);
        assert_eq!(p.cri_ns, 130 * MS);
        assert_eq!(p.nri_ns, 50 * MS);
        assert_eq!(p.slowest().unwrap().method, "RunPodSandbox");
        m.on_record(&span("RemovePodSandbox", 300, 310, false, vec![]));
        assert_eq!(m.pods().next().unwrap().phase, PodPhase::Removed);
    }

    #[test]
    fn listed_pods_are_pods_before_any_call() {
        use crate::capture::cri_state::{StateContainer, StatePod};
        let mut m = PodModel::new();
        let state = CriState {
            ts: Timestamp {
                mono_ns: 5,
                wall_ns: 6,
            },
            pods: vec![StatePod {
                id: "s1".into(),
                namespace: "ns".into(),
                name: "web".into(),
                uid: "u".into(),
                attempt: 0,
                state: "ready".into(),
                created_unix_ns: 1,
            }],
            containers: vec![StateContainer {
                id: "k1".into(),
                sandbox_id: "s1".into(),
                name: "app".into(),
                attempt: 0,
                state: "running".into(),
                created_unix_ns: 2,
            }],
            truncated: false,
            bytes: 0,
            took_ns: 0,
            runtime: None,
        };
        m.on_record(&Record::Observed(Observation::CriState(state.clone())));
        let p = m.pods().next().unwrap();
        assert_eq!((p.label(), p.phase), ("ns/web".into(), PodPhase::Ready));
        assert_eq!(p.containers["k1"].phase, ContainerPhase::Running);
        // Its StopPodSandbox (named from the lists by the engine) is the
        // same pod; the lists again change nothing.
        m.on_record(&span("StopPodSandbox", 200, 230, true, vec![]));
        m.on_record(&Record::Observed(Observation::CriState(state)));
        assert_eq!(m.len(), 1);
        let p = m.pods().next().unwrap();
        assert_eq!(p.phase, PodPhase::Stopped);
        assert_eq!(p.timeline.len(), 1);
    }

    #[test]
    fn bounded_retention_drops_removed_pods_first() {
        let mut m = PodModel::new();
        let mk = |i: u64, method: &str| {
            let mut r = span(method, i * 10, i * 10 + 5, true, vec![]);
            if let Record::CriSpan(s) = &mut r {
                s.call.sandbox_id = Some(format!("s{i}"));
                s.call.pod.as_mut().unwrap().name = format!("p{i}");
            }
            r
        };
        for i in 0..(MAX_PODS as u64 + 10) {
            m.on_record(&mk(i, "RunPodSandbox"));
            if i < 20 {
                m.on_record(&mk(i, "RemovePodSandbox"));
            }
        }
        m.on_record(&mk(99_999, "RunPodSandbox"));
        assert!(m.len() <= MAX_PODS + 1);
        // The removed ones went first, then the oldest; the newest stayed.
        assert!(!m.pods().any(|p| p.name == "p0"));
        assert!(!m.pods().any(|p| p.name == "p19"));
        let newest = format!("p{}", MAX_PODS + 5);
        assert!(m.pods().any(|p| p.name == newest));
    }
}
