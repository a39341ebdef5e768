//! How a driver call fails: [`DriverError`] (no connection, a call that
//! failed, a retried call given up on, a wrong request, an answer a
//! kubelet would not accept), and the driver's [`Result`].

use std::{fmt, time::Duration};

use super::retry::describe;
use crate::truth::Outcome;

// ------------------------------------------------------------------ errors

#[derive(Debug)]
pub enum DriverError {
    /// Could not reach the socket.
    Connect(String),
    /// A call failed and was not retried.
    Call {
        method: &'static str,
        target: String,
        deadline_ms: u64,
        outcome: Outcome,
    },
    /// A retried call still failed when the budget ran out.
    GaveUp {
        method: &'static str,
        target: String,
        tries: Vec<Outcome>,
        budget: Duration,
    },
    /// The request itself is wrong (caught before sending it).
    Invalid(String),
    /// The runtime or the workload did something a kubelet would not accept.
    Unexpected(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Connect(m) => write!(f, "cannot connect: {m}"),
            DriverError::Call {
                method,
                target,
                deadline_ms,
                outcome,
            } => match outcome {
                Outcome::DeadlineExceeded => {
                    write!(
                        f,
                        "{method} {target}: deadline of {deadline_ms} ms exceeded"
                    )
                }
                o => write!(f, "{method} {target}: {}", describe(o)),
            },
            DriverError::GaveUp {
                method,
                target,
                tries,
                budget,
            } => write!(
                f,
                "{method} {target}: still failing after {} tries (retry budget {:.1} s); last: {}",
                tries.len(),
                budget.as_secs_f64(),
                tries.last().map(describe).unwrap_or_default()
            ),
            DriverError::Invalid(m) => write!(f, "invalid request: {m}"),
            DriverError::Unexpected(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for DriverError {}

impl DriverError {
    /// The outcome of the (last) failed call, if this is a call failure.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            DriverError::Call { outcome, .. } => Some(outcome),
            DriverError::GaveUp { tries, .. } => tries.last(),
            _ => None,
        }
    }
}

pub type Result<T, E = DriverError> = std::result::Result<T, E>;
