//! When a timed-out RunPodSandbox / CreateContainer is tried again
//! ([`RetryPolicy`], and the [`RetryLoop`] of one request), and how a
//! failed call's outcome reads: [`classify`] (a status into an outcome),
//! [`describe`] (an outcome in words), [`reserved_for`] (the id holding a
//! reserved name).

use std::time::{Duration, Instant};

use tonic::{Code, Status};

use crate::truth::Outcome;

// ------------------------------------------------------------------ retries

/// When and how a timed-out RunPodSandbox / CreateContainer is retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Wait before the first retry; doubles per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// No retry starts later than this after the first try started.
    pub budget: Duration,
    /// Deadline of the retries; None: the same as the first try (kubelet).
    pub retry_deadline: Option<Duration>,
    /// CreateContainer only: when the runtime keeps the name reserved for a
    /// container that a timed-out try did create (containerd leaves it
    /// CREATED), create the container again with attempt + 1, as kubelet
    /// does once its relist shows that container (restart count + 1). The
    /// orphan stays until RemovePodSandbox (kubelet's GC). false: retry the
    /// same request until the budget runs out.
    pub bump_attempt_on_orphan: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            budget: Duration::from_mins(5),
            retry_deadline: None,
            bump_attempt_on_orphan: true,
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        Self {
            budget: Duration::ZERO,
            ..Self::default()
        }
    }

    /// The wait before retry number `retry` (1 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1u32 << shift)
            .min(self.max_backoff)
    }
}

/// The state of one retried request: which deadline the next try gets,
/// whether (and after how long) to try again.
#[derive(Debug)]
pub struct RetryLoop<'a> {
    policy: &'a RetryPolicy,
    first_deadline: Duration,
    started: Instant,
    /// The retry number of the next try (0: the first try of a request).
    pub retry: u32,
    /// Tries made, over all requests of this loop.
    pub tries: u32,
    timed_out: bool,
    /// Outcomes of the failed tries so far.
    pub failures: Vec<Outcome>,
}

impl<'a> RetryLoop<'a> {
    pub fn new(policy: &'a RetryPolicy, first_deadline: Duration) -> Self {
        Self {
            policy,
            first_deadline,
            started: Instant::now(),
            retry: 0,
            tries: 0,
            timed_out: false,
            failures: vec![],
        }
    }

    /// The deadline of the next try: the first deadline for the very first
    /// try, the retry deadline for every later one.
    pub fn deadline(&self) -> Duration {
        if self.tries == 0 {
            self.first_deadline
        } else {
            self.policy.retry_deadline.unwrap_or(self.first_deadline)
        }
    }

    /// Whether any try so far hit its deadline.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Record a failed try; Some(wait) if the request is to be tried again.
    pub fn failed(&mut self, outcome: &Outcome) -> Option<Duration> {
        self.failed_at(outcome, self.started.elapsed())
    }

    /// The next try sends a new request (a bumped attempt): its retry
    /// number starts again at 0; the budget and the timeout history go on.
    pub fn new_request(&mut self) {
        self.retry = 0;
    }

    fn failed_at(&mut self, outcome: &Outcome, elapsed: Duration) -> Option<Duration> {
        self.tries += 1;
        self.failures.push(outcome.clone());
        let retryable = match outcome {
            Outcome::Ok => false,
            Outcome::DeadlineExceeded => {
                self.timed_out = true;
                true
            }
            // After a timeout the runtime may still be working on (or
            // cleaning up) the first request: "failed to reserve sandbox
            // name", "already exists", or anything else kubelet would see
            // on its next sync. A first-try error is final.
            Outcome::Error { .. } => self.timed_out,
        };
        if !retryable {
            return None;
        }
        let wait = self.policy.backoff(self.failures.len() as u32);
        if elapsed + wait > self.policy.budget {
            return None;
        }
        self.retry += 1;
        Some(wait)
    }
}

/// The sandbox id in containerd's `failed to reserve sandbox name "...":
/// name "..." is reserved for "<id>"` (also for container names).
pub fn reserved_for(message: &str) -> Option<&str> {
    let rest = &message[message.find("is reserved for \"")? + "is reserved for \"".len()..];
    let id = &rest[..rest.find('"')?];
    (!id.is_empty()).then_some(id)
}

/// How a failed call ended, from the client's side: `DeadlineExceeded` when
/// our deadline expired (tonic reports its own timeout as CANCELLED
/// "Timeout expired"; a runtime that saw the propagated deadline answers
/// DEADLINE_EXCEEDED), the gRPC status otherwise.
pub fn classify(status: &Status, elapsed: Duration, deadline: Duration) -> Outcome {
    let expired = elapsed >= deadline;
    match status.code() {
        Code::DeadlineExceeded if expired => Outcome::DeadlineExceeded,
        Code::Cancelled if expired || status.message() == "Timeout expired" => {
            Outcome::DeadlineExceeded
        }
        code => Outcome::Error {
            code: code as i32,
            message: status.message().to_owned(),
        },
    }
}

/// `Unknown (2): message` for an Error outcome.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok => "ok".into(),
        Outcome::DeadlineExceeded => "client deadline exceeded".into(),
        Outcome::Error { code, message } => format!("{:?} ({code}): {message}", Code::from(*code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..Default::default()
        };
        let b: Vec<u128> = (1..=5).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(b, [100, 200, 350, 350, 350]);
        assert_eq!(p.backoff(1000), Duration::from_millis(350));
    }

    #[test]
    fn retry_loop_retries_timeouts_and_what_follows() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            budget: Duration::from_secs(2),
            retry_deadline: Some(Duration::from_secs(9)),
            ..Default::default()
        };
        let mut lp = RetryLoop::new(&p, Duration::from_millis(5));
        assert_eq!(lp.deadline(), Duration::from_millis(5));
        assert_eq!(
            lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO),
            Some(Duration::from_millis(100))
        );
        assert_eq!(lp.retry, 1);
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(9),
            "retries get the retry deadline"
        );
        let reserved = Outcome::Error {
            code: 2,
            message: "failed to reserve sandbox name".into(),
        };
        assert_eq!(
            lp.failed_at(&reserved, Duration::from_millis(200)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            lp.failed_at(&reserved, Duration::from_millis(500)),
            Some(Duration::from_millis(400))
        );
        // 1.7 s + 0.8 s > 2 s budget
        assert_eq!(lp.failed_at(&reserved, Duration::from_millis(1700)), None);
        assert_eq!(lp.failures.len(), 4);
        assert_eq!(lp.retry, 3);
        assert_eq!(lp.tries, 4);
    }

    #[test]
    fn retry_loop_new_request_keeps_budget_and_deadline() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            budget: Duration::from_secs(10),
            retry_deadline: Some(Duration::from_secs(9)),
            ..Default::default()
        };
        let mut lp = RetryLoop::new(&p, Duration::from_millis(1));
        lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO);
        let reserved = Outcome::Error {
            code: 2,
            message: "failed to reserve container name".into(),
        };
        assert_eq!(
            lp.failed_at(&reserved, Duration::ZERO),
            Some(Duration::from_millis(200))
        );
        lp.new_request();
        assert_eq!(lp.retry, 0, "a bumped attempt is a new request");
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(9),
            "not the short first deadline again"
        );
        assert!(lp.timed_out());
        // An error on the new request's first try is still retried: the
        // chain began with a timeout.
        assert_eq!(
            lp.failed_at(&reserved, Duration::ZERO),
            Some(Duration::from_millis(400))
        );
        assert_eq!(lp.retry, 1);
    }

    #[test]
    fn retry_loop_first_error_is_final() {
        let p = RetryPolicy::default();
        let mut lp = RetryLoop::new(&p, Duration::from_secs(1));
        assert_eq!(
            lp.failed_at(
                &Outcome::Error {
                    code: 5,
                    message: "not found".into()
                },
                Duration::ZERO
            ),
            None
        );
        assert_eq!(lp.retry, 0);
        let none = RetryPolicy::none();
        let mut lp = RetryLoop::new(&none, Duration::from_secs(1));
        assert_eq!(
            lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO),
            None,
            "no budget, no retry"
        );
        let same = RetryPolicy::default();
        let mut lp = RetryLoop::new(&same, Duration::from_secs(3));
        lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO);
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(3),
            "kubelet: same deadline on retries"
        );
    }

    #[test]
    fn classify_outcomes() {
        let d = Duration::from_millis(10);
        let late = Duration::from_millis(11);
        let early = Duration::from_millis(1);
        assert_eq!(
            classify(&Status::cancelled("Timeout expired"), early, d),
            Outcome::DeadlineExceeded
        );
        assert_eq!(
            classify(
                &Status::deadline_exceeded("context deadline exceeded"),
                late,
                d
            ),
            Outcome::DeadlineExceeded
        );
        assert_eq!(
            classify(&Status::deadline_exceeded("plugin timed out"), early, d),
            Outcome::Error {
                code: Code::DeadlineExceeded as i32,
                message: "plugin timed out".into()
            }
        );
        assert_eq!(
            classify(&Status::unknown("boom"), late, d),
            Outcome::Error {
                code: 2,
                message: "boom".into()
            }
        );
        assert_eq!(
            describe(&Outcome::Error {
                code: 2,
                message: "boom".into()
            }),
            "Unknown (2): boom"
        );
    }

    #[test]
    fn reserved_name_id() {
        let m = r#"failed to reserve sandbox name "p_ns_uid_0": name "p_ns_uid_0" is reserved for "0123abcd""#;
        assert_eq!(reserved_for(m), Some("0123abcd"));
        assert_eq!(reserved_for("failed to reserve sandbox name"), None);
        assert_eq!(reserved_for(r#"is reserved for """#), None);
    }
}
