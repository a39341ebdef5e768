//! `-n NAMESPACE`, `--pod NAME`, `--plugin NAME`: which records reach the
//! sinks.
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

use crate::engine::{
    pod_index::{PodIndex, PodName},
    record::Record,
};
use crate::model::{nri_call::PluginId, observation::Observation};

/// The filters of one run.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub plugin: Option<String>,
    pods: PodIndex,
}

impl Filter {
    pub fn new(namespace: Option<String>, pod: Option<String>, plugin: Option<String>) -> Self {
        Filter {
            namespace,
            pod,
            plugin,
            pods: PodIndex::new(),
        }
    }

    /// Whether any filter is set.
    pub fn is_set(&self) -> bool {
        self.namespace.is_some() || self.pod.is_some() || self.plugin.is_some()
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
