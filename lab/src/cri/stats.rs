//! What the driver keeps of its calls: a [`CallRecord`] per call, and
//! the [`Summary`] of them all, with [`MethodStats`] per method.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::truth::Outcome;

// ------------------------------------------------------------------ stats

/// What the driver keeps of each call for its summary.
#[derive(Clone, Debug, Serialize)]
pub struct CallRecord {
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The container's attempt for container calls, else the pod's.
    pub attempt: u32,
    pub retry: u32,
    pub outcome: Outcome,
    pub ms: f64,
    pub deadline_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct MethodStats {
    pub calls: u64,
    pub failures: u64,
    pub total_ms: f64,
    pub max_ms: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub calls: u64,
    /// Calls that did not end Ok (expected ones on a retry path included).
    pub failures: u64,
    pub deadline_exceeded: u64,
    pub retries: u64,
    pub truth_write_errors: u64,
    pub methods: BTreeMap<String, MethodStats>,
}
