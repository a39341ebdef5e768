//! kubelet's steady state, summarized: most CRI calls of a node are polls
//! (the PLEG relists ListPodSandbox and ListContainers every second, with a
//! status call per pod and container; Status every 5 s; the stats every
//! 10 s; ListImages and ImageFsInfo; exec probes: kubelet's
//! pkg/kubelet/pleg/generic.go, kuberuntime_manager.go, prober/). Text and
//! the TUI show them as one count per client and method per
//! [`POLL_WINDOW_NS`] of capture time unless `--calls all`; `-o json` keeps
//! every call.
//!
//! A poll is a call that reads and changes nothing ([`CriMethod::is_read_only`],
//! and ExecSync, a probe's command), that ended ok and caused no NRI hook.
//! A failed or hooked one is shown as any other call: it is news.

use std::collections::BTreeMap;

use super::cri_lines;
use crate::{basic_types::Timestamp, engine::CriSpan, human::duration, model::CriMethod};

/// The length of one summary's window, capture time.
pub(crate) const POLL_WINDOW_NS: u64 = 10_000_000_000;

/// Most clients counted apart in one window; the polls of any more go
/// under [`OTHER_CLIENTS`] (a loop of short-lived crictl runs, each its own
/// pid, keeps the window bounded).
const MAX_CLIENTS: usize = 64;
const OTHER_CLIENTS: &str = "other clients";

/// Whether `s` is one of the steady-state polls this module counts.
pub(crate) fn is_poll(s: &CriSpan) -> bool {
    s.hooks.is_empty()
        && s.call.outcome.is_ok()
        && s.call
            .cri_method()
            .is_some_and(|m| m.is_read_only() || m == CriMethod::ExecSync)
}

/// One client's polls of one method in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PollCount {
    pub calls: u64,
    /// The slowest of them.
    pub max_ns: u64,
}

/// The polls of one window: per client (its words, `cri_lines::client_words`)
/// and method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PollSummary {
    /// The window's first poll.
    pub first: Timestamp,
    /// Its last poll's start.
    pub last: Timestamp,
    pub counts: BTreeMap<String, BTreeMap<&'static str, PollCount>>,
}

/// One client's polls of a window, as the sinks show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientPolls<'a> {
    pub client: &'a str,
    /// Its polls, all methods.
    pub calls: u64,
    pub slowest_ns: u64,
    /// `ListContainers 10, ListPodSandbox 10, Status 2 (slowest 4.2ms)`.
    pub text: String,
}

impl PollSummary {
    /// Each client's polls, in the clients' order.
    pub(crate) fn clients(&self) -> impl Iterator<Item = ClientPolls<'_>> {
        self.counts.iter().map(|(client, methods)| {
            let slowest_ns = methods.values().map(|c| c.max_ns).max().unwrap_or(0);
            let list: Vec<String> = methods
                .iter()
                .map(|(m, c)| format!("{m} {}", c.calls))
                .collect();
            ClientPolls {
                client,
                calls: methods.values().map(|c| c.calls).sum(),
                slowest_ns,
                text: format!("{} (slowest {})", list.join(", "), duration(slowest_ns)),
            }
        })
    }
}

/// The polls of the open window, handed out once the window is over.
#[derive(Debug, Default, Clone)]
pub(crate) struct PollWindow {
    open: Option<PollSummary>,
}

impl PollWindow {
    /// Count `s` (a poll: [`is_poll`]) in the open window; when it starts
    /// a window after the open one's, that one comes back, closed.
    pub(crate) fn add(&mut self, s: &CriSpan) -> Option<PollSummary> {
        let ts = s.call.start.or(s.call.end)?;
        let closed = self.close_before(ts.mono_ns);
        let w = self.open.get_or_insert_with(|| PollSummary {
            first: ts,
            last: ts,
            counts: BTreeMap::new(),
        });
        w.last = ts;
        let mut client = s
            .call
            .client
            .as_ref()
            .map_or_else(|| "an unknown client".into(), cri_lines::client_words);
        if w.counts.len() >= MAX_CLIENTS && !w.counts.contains_key(&client) {
            client = OTHER_CLIENTS.into();
        }
        let method = s.call.cri_method().map_or("?", CriMethod::name);
        let c = w
            .counts
            .entry(client)
            .or_default()
            .entry(method)
            .or_default();
        c.calls += 1;
        c.max_ns = c.max_ns.max(s.call.duration_ns.unwrap_or(0));
        closed
    }

    /// The open window, if it began [`POLL_WINDOW_NS`] or more before
    /// `now_ns` (capture time): a record or a tick at `now_ns` closes it.
    pub(crate) fn close_before(&mut self, now_ns: u64) -> Option<PollSummary> {
        let due = self
            .open
            .as_ref()
            .is_some_and(|w| now_ns >= w.first.mono_ns.saturating_add(POLL_WINDOW_NS));
        if due {
            self.open.take()
        } else {
            None
        }
    }

    /// The open window, whatever its age (the end of the output).
    pub(crate) fn take(&mut self) -> Option<PollSummary> {
        self.open.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        engine::test_calls::cri,
        model::{CriClient, CriOutcome},
    };

    fn calls(s: &PollSummary) -> u64 {
        s.clients().map(|c| c.calls).sum()
    }

    fn span(method: &str, start_ms: u64, comm: &str) -> CriSpan {
        let mut call = cri(Some(method), "", start_ms, start_ms + 2);
        call.client = Some(CriClient {
            pid: 42,
            comm: Some(comm.into()),
            cgroup: None,
            unit: None,
        });
        CriSpan {
            call,
            hooks: vec![],
            nri_ns: 0,
            nri_permille: None,
        }
    }

    #[test]
    fn polls_are_the_quiet_read_only_calls() {
        assert!(is_poll(&span("ListPodSandbox", 0, "kubelet")));
        assert!(is_poll(&span("ExecSync", 0, "kubelet")));
        assert!(!is_poll(&span("StopPodSandbox", 0, "kubelet")));
        let mut failed = span("ListContainers", 0, "kubelet");
        failed.call.outcome = CriOutcome::DeadlineExceeded;
        assert!(!is_poll(&failed), "a failed poll is news");
    }

    #[test]
    fn one_summary_per_window_per_client_and_method() {
        let mut w = PollWindow::default();
        for i in 0..10 {
            assert_eq!(w.add(&span("ListPodSandbox", i * 1000, "kubelet")), None);
            assert_eq!(
                w.add(&span("ListContainers", i * 1000 + 1, "kubelet")),
                None
            );
        }
        assert_eq!(w.add(&span("Status", 9500, "crictl")), None);
        // The first poll 10 s after the window's first closes it.
        let closed = w.add(&span("ListPodSandbox", 10_000, "kubelet")).unwrap();
        assert_eq!(calls(&closed), 21);
        let kubelet = closed
            .counts
            .iter()
            .find(|(c, _)| c.starts_with("kubelet"))
            .map(|(_, m)| m)
            .unwrap();
        assert_eq!(kubelet["ListPodSandbox"].calls, 10);
        assert_eq!(kubelet["ListContainers"].calls, 10);
        assert_eq!(kubelet["ListContainers"].max_ns, 2_000_000);
        let words = closed
            .clients()
            .find(|c| c.client.starts_with("kubelet"))
            .unwrap();
        assert_eq!((words.calls, words.slowest_ns), (20, 2_000_000));
        assert_eq!(
            words.text,
            "ListContainers 10, ListPodSandbox 10 (slowest 2.0ms)"
        );
        assert_eq!(w.take().map(|s| calls(&s)), Some(1));
        assert_eq!(w.close_before(u64::MAX), None);
    }
}
