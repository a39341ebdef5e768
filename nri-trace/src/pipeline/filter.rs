//! `-n NAMESPACE`, `--pod NAME`, `--plugin NAME`, `--client NAME`: which
//! records reach the sinks.
//!
//! The engine sees every observation whatever the filters (a correlation
//! or a finding needs the whole stream); the filters only choose what is
//! shown, so a filtered run gives the same records as the unfiltered one,
//! fewer of them. A record is kept when it matches every filter given:
//!
//! - `-n` / `--pod`: the pod the record is about (its own metadata, or
//!   what earlier records showed of its sandbox or container id:
//!   [`PodIndex`]) has that namespace / name. Records about no pod (a
//!   plugin connecting, capture loss, a runtime restart) are left out.
//! - `--plugin`: an NRI call to that plugin (its `IDX-NAME` or its name),
//!   a CRI call with a hook of that plugin, a finding about it, the
//!   plugin connecting or going. The latency table keeps its rows.
//! - `--client`: a CRI call made by that client (its comm, or the systemd
//!   unit its cgroup names: `CriClient::is_named`) with its hooks, the
//!   client's CRI connections, and findings whose evidence holds a call
//!   of one of those connections. The latency tables keep their rows.

use std::collections::BTreeSet;

use crate::basic_types::ConnId;
use crate::engine::{
    findings::Evidence,
    pod_index::{PodIndex, PodName},
    record::Record,
};
use crate::model::{cri_client::CriClient, nri_call::PluginId, observation::Observation};

/// Most connections of the `--client` remembered (for its findings'
/// evidence); past it the oldest are forgotten. crictl opens one per
/// invocation, kubelet one for its life.
const MAX_CLIENT_CONNS: usize = 4096;

/// The filters of one run.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub plugin: Option<String>,
    pub client: Option<String>,
    pods: PodIndex,
    /// The CRI connections of the `--client` seen so far.
    client_conns: BTreeSet<ConnId>,
}

impl Filter {
    pub fn new(namespace: Option<String>, pod: Option<String>, plugin: Option<String>) -> Self {
        Filter {
            namespace,
            pod,
            plugin,
            ..Filter::default()
        }
    }

    /// With `--client NAME`.
    #[must_use]
    pub fn with_client(mut self, client: Option<String>) -> Self {
        self.client = client;
        self
    }

    /// Whether any filter is set.
    pub fn is_set(&self) -> bool {
        self.namespace.is_some()
            || self.pod.is_some()
            || self.plugin.is_some()
            || self.client.is_some()
    }

    /// Whether `r` reaches the sinks. Every record passes through here in
    /// order (kept or not): the pod index learns from all of them.
    pub fn keeps(&mut self, r: &Record) -> bool {
        if !self.is_set() {
            return true;
        }
        self.pods.learn(r);
        if self.namespace.is_some() || self.pod.is_some() {
            match self.pods.pod_of(r) {
                Some(p) if self.pod_matches(&p) => {}
                _ => return false,
            }
        }
        if self.client.is_some() && !self.keeps_client(r) {
            return false;
        }
        match &self.plugin {
            None => true,
            Some(want) => match r {
                Record::CriSpan(s) => s.hooks.iter().any(|h| plugin_is(&h.call.plugin, want)),
                Record::NriUncaused(u) => plugin_is(&u.span.call.plugin, want),
                Record::Violation(v) => v.plugin.as_deref().is_some_and(|p| self.keeps_plugin(p)),
                Record::Observed(
                    Observation::NriPlugin { plugin, .. }
                    | Observation::NriPluginGone { plugin, .. },
                ) => plugin_is(plugin, want),
                Record::Observed(Observation::NriPending(c)) => plugin_is(&c.plugin, want),
                Record::Observed(_) => false,
            },
        }
    }

    /// `--client`: whether `r` is about that client; learns its
    /// connections from its calls and connection records.
    fn keeps_client(&mut self, r: &Record) -> bool {
        let Some(want) = self.client.as_deref() else {
            return true;
        };
        let (conn, named) =
            match r {
                Record::CriSpan(s) => (
                    s.call.conn,
                    s.call.client.as_ref().is_some_and(|c| c.is_named(want)),
                ),
                Record::Observed(Observation::CriPending(c)) => {
                    (c.conn, c.client.as_ref().is_some_and(|c| c.is_named(want)))
                }
                Record::Observed(Observation::CriConnection {
                    conn,
                    client,
                    client_process,
                    ..
                }) => (
                    *conn,
                    match client_process {
                        Some(c) => c.is_named(want),
                        // A record file older than the client: its label's comm.
                        None => client
                            .as_deref()
                            .and_then(CriClient::comm_of_label)
                            .is_some_and(|comm| comm == want),
                    },
                ),
                Record::Observed(Observation::CriConnectionGone { conn, .. }) => {
                    return self.client_conns.contains(conn)
                }
                Record::Violation(v) => return v.evidence.iter().any(
                    |e| matches!(e, Evidence::Cri { conn, .. } if self.client_conns.contains(conn)),
                ),
                _ => return false,
            };
        if named {
            self.client_conns.insert(conn);
            while self.client_conns.len() > MAX_CLIENT_CONNS {
                self.client_conns.pop_first();
            }
        }
        named
    }

    fn pod_matches(&self, p: &PodName) -> bool {
        self.namespace.as_ref().is_none_or(|n| *n == p.namespace)
            && self.pod.as_ref().is_none_or(|n| *n == p.name)
    }

    /// Whether a plugin label (`IDX-NAME`, or a process name) is the one
    /// `--plugin` names (no `--plugin`: every one).
    pub fn keeps_plugin(&self, label: &str) -> bool {
        self.plugin.as_ref().is_none_or(|want| {
            label == want || label.split_once('-').is_some_and(|(_, name)| name == want)
        })
    }
}

fn plugin_is(p: &PluginId, want: &str) -> bool {
    p.label() == want || p.name.as_deref() == Some(want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        capture::Peer,
        engine::{
            correlate::CriSpan,
            findings::{Certainty, Detail, Severity, Violation},
            test_calls::{cri, ts},
        },
    };

    fn client(comm: &str, cgroup: &str) -> CriClient {
        CriClient::of_peer(&Peer {
            pid: 7,
            uid: 0,
            comm: Some(comm.into()),
            cmdline: vec![],
            env: Default::default(),
            cgroup: Some(cgroup.into()),
        })
    }

    fn span(conn: u64, by: Option<CriClient>) -> Record {
        let mut call = cri(Some("StopPodSandbox"), "sb1", 10, 20);
        call.conn = ConnId(conn);
        call.client = by;
        Record::CriSpan(CriSpan {
            call,
            hooks: vec![],
            nri_ns: 0,
            nri_permille: None,
        })
    }

    fn connection(conn: u64, label: &str, by: Option<CriClient>) -> Record {
        Record::Observed(Observation::CriConnection {
            conn: ConnId(conn),
            ts: ts(1).expect("a time"),
            client: Some(label.into()),
            client_process: by,
        })
    }

    fn finding_on(conn: u64) -> Record {
        Record::Violation(Violation {
            rule: "some-rule",
            severity: Severity::Warning,
            certainty: Certainty::Certain,
            ts: ts(30).expect("a time"),
            pod: None,
            plugin: None,
            detail: Detail::EventOrder { seen: vec![] },
            evidence: vec![Evidence::Cri {
                conn: ConnId(conn),
                stream_id: 1,
                method: None,
                start: ts(10),
                outcome: crate::model::cri_call::CriOutcome::Ok,
            }],
        })
    }

    /// `--client` keeps a client's calls, its connections and the findings
    /// about its calls, by comm or by unit, and nothing else.
    #[test]
    fn client_filter_keeps_that_clients_records() {
        let crictl = client("crictl", "/user.slice/user-0.slice/session-3.scope");
        let kubelet = client("kubelet", "/system.slice/kubelet.service");
        let records = [
            connection(1, "kubelet[7]", Some(kubelet.clone())),
            connection(2, "crictl[7]", Some(crictl.clone())),
            span(1, Some(kubelet)),
            span(2, Some(crictl)),
            span(3, None),
            finding_on(2),
            finding_on(1),
            Record::Observed(Observation::CaptureLoss(crate::capture::Loss::default())),
            // A record file older than `client_process`: the label's comm.
            connection(4, "crictl[9]", None),
        ];
        let kept = |want: &str| -> Vec<usize> {
            let mut f = Filter::default().with_client(Some(want.into()));
            assert!(f.is_set());
            (0..records.len())
                .filter(|&i| f.keeps(&records[i]))
                .collect()
        };
        assert_eq!(kept("crictl"), [1, 3, 5, 8]);
        assert_eq!(kept("session-3.scope"), [1, 3, 5]);
        assert_eq!(kept("session-3"), [1, 3, 5]);
        assert_eq!(kept("kubelet"), [0, 2, 6]);
        assert_eq!(kept("kubelet.service"), [0, 2, 6]);
        assert!(kept("containerd").is_empty());
        // With another filter: both must keep it.
        let mut f = Filter::new(None, None, Some("10-a".into())).with_client(Some("crictl".into()));
        assert!(records.iter().all(|r| !f.keeps(r)));
    }
}
