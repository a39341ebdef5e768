//! Which pod a record is about, learned from the ids the records show.
//!
//! Most CRI calls name their pod only by sandbox or container id
//! (StopPodSandbox carries the sandbox id, StopContainer the container
//! id; CRI api.proto). The pod's namespace and name come with
//! RunPodSandbox (request metadata, sandbox id in the response),
//! CreateContainer (the sandbox id, the container id in the response), and
//! every NRI event (its `PodSandbox` has id, name and namespace; nri
//! api.proto), and, for pods made before the trace, the runtime's own
//! lists (`cri_state` observations: ListPodSandbox and ListContainers,
//! capture/cri_state.rs). [`PodIndex`] remembers those so a later call
//! that names an id is known by its pod, and a kernel event by the
//! container id in its cgroup path. Pure: it reads only the records, in
//! order, so live and replayed runs resolve the same way.

use std::{
    collections::{HashMap, VecDeque},
    fmt,
};

use serde::Serialize;

use super::record::Record;
use crate::{
    capture::{cri_state::CriState, sandbox::ids_in},
    decode::cri::message::{ContainerMeta, PodMeta},
    model::{cri_call::CriCall, nri_call::NriCall, observation::Observation},
};

/// Most sandboxes (and containers) remembered; the oldest go first.
pub(crate) const MAX_IDS: usize = 16_384;

/// A pod by its Kubernetes name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) struct PodName {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodName {
    /// `namespace/name`, as kubectl writes it (the name alone without a
    /// namespace).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// Sandbox and container ids to pods.
#[derive(Debug, Default, Clone)]
pub(crate) struct PodIndex {
    pods: HashMap<String, PodName>,
    /// Container id -> sandbox id.
    sandbox_of: HashMap<String, String>,
    /// Ids in the order first learnt (sandboxes and containers), to bound.
    order: VecDeque<String>,
    /// The runtime's last lists (a `cri_state` observation): each
    /// sandbox's pod metadata, each container's sandbox and metadata, as
    /// a call's `pod` and `container` carry them. Replaced by the next
    /// lists; bounded by theirs (`cri_state::MAX_OBJECTS`).
    listed_pods: HashMap<String, PodMeta>,
    listed_containers: HashMap<String, (String, ContainerMeta)>,
}

impl PodIndex {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn learn_pod(&mut self, sandbox_id: &str, pod: PodName) {
        if sandbox_id.is_empty() || pod.name.is_empty() {
            return;
        }
        if self.pods.insert(sandbox_id.to_string(), pod).is_none() {
            self.order.push_back(sandbox_id.to_string());
        }
        self.bound();
    }

    fn learn_container(&mut self, container_id: &str, sandbox_id: &str) {
        if container_id.is_empty() || sandbox_id.is_empty() {
            return;
        }
        if self
            .sandbox_of
            .insert(container_id.to_string(), sandbox_id.to_string())
            .is_none()
        {
            self.order.push_back(container_id.to_string());
        }
        self.bound();
    }

    fn bound(&mut self) {
        while self.order.len() > 2 * MAX_IDS {
            if let Some(id) = self.order.pop_front() {
                self.pods.remove(&id);
                self.sandbox_of.remove(&id);
            }
        }
    }

    fn learn_nri(&mut self, c: &NriCall) {
        if let Some(p) = &c.pod {
            self.learn_pod(
                &p.id,
                PodName {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                },
            );
            if let Some(k) = &c.container {
                self.learn_container(&k.id, &p.id);
            }
        }
    }

    /// Learn the runtime's lists: every pod and container it has, named.
    pub(crate) fn learn_state(&mut self, s: &CriState) {
        self.listed_pods.clear();
        self.listed_containers.clear();
        for p in &s.pods {
            self.learn_pod(
                &p.id,
                PodName {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                },
            );
            self.listed_pods.insert(
                p.id.clone(),
                PodMeta {
                    name: p.name.clone(),
                    namespace: p.namespace.clone(),
                    uid: p.uid.clone(),
                    attempt: p.attempt,
                },
            );
        }
        for c in &s.containers {
            self.learn_container(&c.id, &c.sandbox_id);
            self.listed_containers.insert(
                c.id.clone(),
                (
                    c.sandbox_id.clone(),
                    ContainerMeta {
                        name: c.name.clone(),
                        attempt: c.attempt,
                    },
                ),
            );
        }
    }

    /// Fill in what `call` does not say of its pod and container from the
    /// runtime's lists: a StopPodSandbox of a pod made before the trace
    /// names only its sandbox id (CRI api.proto), the lists name the pod,
    /// as an earlier RunPodSandbox would have (`model::cri_call` fills
    /// those from the calls it saw).
    pub(crate) fn fill_from_state(&self, call: &mut CriCall) {
        let listed = call
            .container_id
            .as_ref()
            .and_then(|id| self.listed_containers.get(id));
        if let Some((sandbox, meta)) = listed {
            if call.container.is_none() {
                call.container = Some(meta.clone());
            }
            if call.sandbox_id.is_none() && !sandbox.is_empty() {
                call.sandbox_id = Some(sandbox.clone());
            }
        }
        if call.pod.is_none() {
            call.pod = call
                .sandbox_id
                .as_ref()
                .and_then(|id| self.listed_pods.get(id))
                .filter(|m| !m.name.is_empty())
                .cloned();
        }
    }

    /// Learn what `r` shows of ids and pods.
    pub(crate) fn learn(&mut self, r: &Record) {
        match r {
            Record::Observed(Observation::CriState(s)) => self.learn_state(s),
            Record::CriSpan(s) => {
                let c = &s.call;
                if let (Some(p), Some(id)) = (&c.pod, &c.sandbox_id) {
                    self.learn_pod(
                        id,
                        PodName {
                            namespace: p.namespace.clone(),
                            name: p.name.clone(),
                        },
                    );
                }
                if let (Some(k), Some(id)) = (&c.container_id, &c.sandbox_id) {
                    self.learn_container(k, id);
                }
                for h in &s.hooks {
                    self.learn_nri(&h.call);
                }
            }
            Record::NriUncaused(u) => self.learn_nri(&u.span.call),
            Record::Observed(Observation::NriPending(c)) => self.learn_nri(c),
            _ => {}
        }
    }

    /// The pod of a sandbox id, or of a container id.
    pub(crate) fn by_id(&self, id: &str) -> Option<&PodName> {
        self.pods.get(id).or_else(|| {
            self.sandbox_of
                .get(id)
                .and_then(|sandbox| self.pods.get(sandbox))
        })
    }

    /// The sandbox id of a sandbox or container id, when known (a
    /// sandbox id is its own).
    pub(crate) fn sandbox_of<'a>(&'a self, id: &'a str) -> Option<&'a str> {
        if self.pods.contains_key(id) || self.listed_pods.contains_key(id) {
            return Some(id);
        }
        self.sandbox_of
            .get(id)
            .or_else(|| self.listed_containers.get(id).map(|(s, _)| s))
            .map(String::as_str)
    }

    fn of_cri(&self, c: &CriCall) -> Option<PodName> {
        if let Some(p) = &c.pod {
            return Some(PodName {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            });
        }
        c.sandbox_id
            .iter()
            .chain(&c.container_id)
            .find_map(|id| self.by_id(id))
            .cloned()
    }

    fn of_nri(&self, c: &NriCall) -> Option<PodName> {
        let p = c.pod.as_ref()?;
        if !p.name.is_empty() {
            return Some(PodName {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            });
        }
        self.by_id(&p.id).cloned()
    }

    /// The pod `r` is about, when its ids (or names) tell.
    pub(crate) fn pod_of(&self, r: &Record) -> Option<PodName> {
        match r {
            Record::CriSpan(s) => self
                .of_cri(&s.call)
                .or_else(|| s.hooks.iter().find_map(|h| self.of_nri(&h.call))),
            Record::Observed(Observation::CriPending(c)) => self.of_cri(c),
            Record::NriUncaused(u) => self.of_nri(&u.span.call),
            Record::Observed(Observation::NriPending(c)) => self.of_nri(c),
            Record::Violation(v) => {
                let pod = v.pod.as_deref()?;
                match pod.split_once('/') {
                    Some((namespace, name)) => Some(PodName {
                        namespace: namespace.into(),
                        name: name.into(),
                    }),
                    // A sandbox id (the checker knew no name), or a name.
                    None => self.by_id(pod).cloned().or_else(|| {
                        Some(PodName {
                            namespace: String::new(),
                            name: pod.into(),
                        })
                    }),
                }
            }
            // A signal is about its target (its sender is the runtime's);
            // other events about the caller's cgroup and their path.
            Record::Observed(Observation::Sandbox(e)) => e
                .pod_texts()
                .into_iter()
                .flat_map(ids_in)
                .find_map(|id| self.by_id(id))
                .cloned(),
            Record::Observed(_) => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        capture::{
            cri_state::{StateContainer, StatePod},
            Timestamp,
        },
        engine::test_calls::{cri, span},
    };

    /// A pod `default/web-7f9c` (sandbox `bc2c`) with container `k1`.
    pub(crate) fn state() -> CriState {
        CriState {
            ts: Timestamp {
                mono_ns: 1,
                wall_ns: 2,
            },
            pods: vec![StatePod {
                id: "bc2c".into(),
                namespace: "default".into(),
                name: "web-7f9c".into(),
                uid: "u1".into(),
                attempt: 3,
                state: "ready".into(),
                created_unix_ns: 5,
            }],
            containers: vec![StateContainer {
                id: "k1".into(),
                sandbox_id: "bc2c".into(),
                name: "nginx".into(),
                attempt: 1,
                state: "running".into(),
                created_unix_ns: 6,
            }],
            truncated: false,
            bytes: 0,
            took_ns: 0,
            runtime: None,
        }
    }

    #[test]
    fn listed_pods_name_calls_that_give_only_ids() {
        let mut ix = PodIndex::new();
        ix.learn(&Record::Observed(Observation::CriState(state())));
        // StopPodSandbox: the sandbox id alone.
        let mut stop = cri(Some("StopPodSandbox"), "bc2c", 0, 1);
        ix.fill_from_state(&mut stop);
        assert_eq!(
            stop.pod,
            Some(PodMeta {
                name: "web-7f9c".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                attempt: 3,
            })
        );
        assert_eq!(stop.pod.as_ref().unwrap().to_string(), "default/web-7f9c");
        // StopContainer: the container id alone.
        let mut c = cri(Some("StopContainer"), "x", 0, 1);
        c.sandbox_id = None;
        c.container_id = Some("k1".into());
        ix.fill_from_state(&mut c);
        assert_eq!(c.sandbox_id.as_deref(), Some("bc2c"));
        assert_eq!(c.container.as_ref().map(|k| k.name.as_str()), Some("nginx"));
        assert_eq!(c.pod.as_ref().map(|p| p.name.as_str()), Some("web-7f9c"));
        // The sinks' index names both from the state record too.
        let name = PodName {
            namespace: "default".into(),
            name: "web-7f9c".into(),
        };
        assert_eq!(ix.pod_of(&span(stop.clone(), vec![])), Some(name.clone()));
        assert_eq!(ix.by_id("k1"), Some(&name));
        // A call that says its pod keeps it; an unknown id stays unnamed.
        let mut other = cri(Some("StopPodSandbox"), "zz", 0, 1);
        ix.fill_from_state(&mut other);
        assert_eq!(other.pod, None);
    }

    #[test]
    fn the_next_lists_replace_the_last() {
        let mut ix = PodIndex::new();
        ix.learn_state(&state());
        let mut later = state();
        later.pods.clear();
        later.containers.clear();
        ix.learn_state(&later);
        let mut c = cri(Some("StopContainer"), "x", 0, 1);
        c.sandbox_id = None;
        c.container_id = Some("k1".into());
        ix.fill_from_state(&mut c);
        assert_eq!((c.pod, c.container, c.sandbox_id), (None, None, None));
    }
}
