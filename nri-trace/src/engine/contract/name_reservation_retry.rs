//! `cri-name-reservation-retry`: a pod or container is not requested
//! again with the same name and attempt after the client's deadline: the
//! retry runs into the runtime's name reservation until the first request
//! ends (cri-o/cri-o issue 4221). A streak of such tries is one finding,
//! with how long the pod was held up.

use super::{cri_evidence, ts0, ContractChecker, Rule};
use crate::model::cri_call::CriMethod;
use crate::{
    basic_types::Timestamp,
    engine::findings::{Detail, Severity, Violation},
    human::duration,
    model::cri_call::{CriCall, CriOutcome},
};

pub const RULE: Rule = Rule {
    id: "cri-name-reservation-retry",
    severity: Severity::Warning,
    statement: "a pod or container is not requested again with the same name and attempt after the client's deadline (it runs into the runtime's name reservation until the first request ends); says how long the pod was held up. Told when a try ends the streak (ok, or another error); a streak the runtime answered \"name is reserved\" that nothing ends (the client adopted the sandbox the runtime lists, as on containerd 2.1) is told at the end",
    source: "cri-o/cri-o issue 4221 (CRI-O should be smarter about context timeouts); containerd internal/cri/server/sandbox_run.go and container_create.go (sandboxNameIndex, containerNameIndex Reserve)",
};

impl ContractChecker {
    pub(super) fn check_retry(&mut self, c: &CriCall, out: &mut Vec<Violation>) {
        if !matches!(
            c.cri_method(),
            Some(CriMethod::RunPodSandbox | CriMethod::CreateContainer)
        ) {
            return;
        }
        let m = c.method_name().unwrap_or("");
        let Some(pod) = &c.pod else { return };
        let key = format!(
            "{m} {}/{} {} {} {:?}",
            pod.namespace,
            pod.name,
            pod.uid,
            pod.attempt,
            c.container.as_ref().map(|k| (&k.name, k.attempt))
        );
        let gave_up = c.outcome.deadline_expired() || c.outcome == CriOutcome::Cancelled;
        if let Some((first, calls)) = self.retries.get_mut(&key) {
            calls.push(c.clone());
            if c.outcome.is_ok() || !(gave_up || is_reserved(&c.outcome)) {
                let (first, calls) = (*first, std::mem::take(calls));
                self.retries.remove(&key);
                out.extend(self.retry_violation(first, &calls));
            }
        } else if gave_up {
            let start = c.start.unwrap_or_else(ts0);
            self.retries.insert(key, (start, vec![c.clone()]));
        }
    }

    /// The name-reservation finding of one retry streak: `calls`, the
    /// first of which gave up at `first`'s deadline; the last one ends it.
    /// `None` only for an empty streak or one of another method, which
    /// [`Self::check_retry`] never makes.
    fn retry_violation(&self, first: Timestamp, calls: &[CriCall]) -> Option<Violation> {
        let c = calls.last()?;
        let m = c.cri_method()?;
        let pod = c.pod.as_ref();
        let end = c.end.map_or(0, |t| t.mono_ns);
        let reserved = calls.iter().filter(|x| is_reserved(&x.outcome)).count();
        Some(Violation {
            rule: RULE.id,
            severity: Severity::Warning,
            certainty: self.certainty(None),
            ts: c.end.unwrap_or_else(ts0),
            pod: pod.map(|p| format!("{}/{}", p.namespace, p.name)),
            plugin: None,
            detail: Detail::NameReservationRetry {
                method: m,
                attempt: pod.map_or(0, |p| p.attempt),
                requests: calls.len(),
                reserved,
                held_ns: end.saturating_sub(first.mono_ns),
            },
            evidence: calls.iter().map(cri_evidence).collect(),
        })
    }

    /// Retry streaks still open at the end that the runtime answered
    /// "name is reserved": the client asked again after its deadline and
    /// ran into the reservation, and then never asked again (it adopted
    /// the sandbox the runtime listed, as cri-driver does on containerd
    /// 2.1, whose RunPodSandbox lists the sandbox READY while its NRI hook
    /// is still held; docs/lab.md). The finding stands on the reserved
    /// answer alone; told at the end, oldest first.
    pub(super) fn finish_retries(&mut self, out: &mut Vec<Violation>) {
        let mut open: Vec<(Timestamp, Vec<CriCall>)> = self
            .retries
            .drain()
            .map(|(_, v)| v)
            .filter(|(_, calls)| calls.len() > 1 && calls.iter().any(|x| is_reserved(&x.outcome)))
            .collect();
        open.sort_by_key(|(first, _)| first.mono_ns);
        for (first, calls) in open {
            out.extend(self.retry_violation(first, &calls));
        }
    }
}

fn is_reserved(o: &CriOutcome) -> bool {
    matches!(o, CriOutcome::Error { message, .. } if message.contains("reserve"))
}

/// `method` of `pod` was asked again `requests` times after the client's
/// deadline.
pub(super) fn sentence(
    pod: &str,
    method: CriMethod,
    attempt: u32,
    requests: usize,
    reserved: usize,
    held_ns: u64,
) -> String {
    format!(
        "{} of {pod} (attempt {attempt}) was requested {requests} times after the client's \
         deadline ({reserved} answered 'name reserved'); the pod was held up {}",
        method.name(),
        duration(held_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::cri::message::PodMeta,
        engine::{contract::test_records::*, record::Record, test_calls::*},
    };

    #[test]
    fn retry_after_client_deadline_is_found_with_hold_up() {
        let pod = PodMeta {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod);
        first.outcome = CriOutcome::DeadlineExceeded;
        let mut reserved = first.clone();
        (reserved.start, reserved.end) = (ts(1200), ts(1201));
        reserved.outcome = CriOutcome::Error {
            code: 2,
            status: "UNKNOWN".into(),
            message: "failed to reserve sandbox name".into(),
        };
        let mut ok = first.clone();
        (ok.start, ok.end) = (ts(1500), ts(3100));
        ok.outcome = CriOutcome::Ok;
        // Another attempt is a new request, not a retry.
        let mut other = ok.clone();
        other.pod.as_mut().unwrap().attempt = 1;
        let records: Vec<Record> = [first, reserved, ok, other]
            .into_iter()
            .map(|c| span(c, vec![]))
            .collect();
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 3,
                    reserved: 1,
                    held_ns: 3_100_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        assert_eq!(v[0].evidence.len(), 3);
    }

    /// CRI-O (1.33, 1.36) holds a retry for the name reservation until the
    /// request's context ends, then answers DEADLINE_EXCEEDED with "name is
    /// reserved" in its message; that status can reach the socket before
    /// the client's own expiry, on the first try too: still the deadline
    /// running out, so it starts the streak as the client's expiry does.
    #[test]
    fn server_deadline_exceeded_status_starts_a_retry_streak() {
        let pod = PodMeta {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod);
        first.outcome = CriOutcome::Error {
            code: crate::model::cri_call::GRPC_DEADLINE_EXCEEDED,
            status: "DEADLINE_EXCEEDED".into(),
            message: "kubelet may be retrying requests that are timing out in CRI-O due to \
                      system load: context deadline exceeded: error reserving pod name \
                      k8s_web_ns_u_0 for id x: name is reserved"
                .into(),
        };
        let mut ok = first.clone();
        (ok.start, ok.end) = (ts(1250), ts(1300));
        ok.outcome = CriOutcome::Ok;
        let v = check(&[span(first, vec![]), span(ok, vec![])]);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 2,
                    reserved: 1,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }

    /// containerd 2.1: the retry is answered "name is reserved" and the
    /// client adopts the listed sandbox instead of asking again: the streak
    /// never closes, the finding is told at the end. A streak of deadlines
    /// alone that never closes is not (the client may have given up).
    #[test]
    fn retry_answered_reserved_then_abandoned_is_found_at_the_end() {
        let pod = |name: &str| PodMeta {
            name: name.into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod("web"));
        first.outcome = CriOutcome::DeadlineExceeded;
        let mut reserved = first.clone();
        (reserved.start, reserved.end) = (ts(1200), ts(1201));
        reserved.outcome = CriOutcome::Error {
            code: 9,
            status: "FAILED_PRECONDITION".into(),
            message: "failed to reserve sandbox name \"web_ns_u_0\": name is reserved".into(),
        };
        let mut lone = first.clone();
        lone.pod = Some(pod("db"));
        let mut again = lone.clone();
        (again.start, again.end) = (ts(1100), ts(2100));
        let records: Vec<Record> = [first, lone, reserved, again]
            .into_iter()
            .map(|c| span(c, vec![]))
            .collect();
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert_eq!(v[0].pod.as_deref(), Some("ns/web"));
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 2,
                    reserved: 1,
                    held_ns: 1_201_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }
}
