//! The contract rules' ids, by the names the tests use (each id is its
//! rule's `RULE.id`, in the rule's own file under
//! nri-trace/src/engine/contract/).

use nri_trace::engine::contract::{
    adjustment_rejected, hook_over_budget, name_reservation_retry, plugin_timeout,
    pod_unknown_to_plugin, process_survives_sigkill, teardown_hook_failed, teardown_path_failed,
    unexplained_after_restart,
};

pub(crate) const ADJUSTMENT_REJECTED: &str = adjustment_rejected::RULE.id;
pub(crate) const HOOK_OVER_BUDGET: &str = hook_over_budget::RULE.id;
pub(crate) const NAME_RESERVATION_RETRY: &str = name_reservation_retry::RULE.id;
pub(crate) const PLUGIN_TIMEOUT: &str = plugin_timeout::RULE.id;
pub(crate) const POD_UNKNOWN_TO_PLUGIN: &str = pod_unknown_to_plugin::RULE.id;
pub(crate) const PROCESS_SURVIVES_SIGKILL: &str = process_survives_sigkill::RULE.id;

pub(crate) const TEARDOWN_HOOK_FAILED: &str = teardown_hook_failed::RULE.id;
pub(crate) const TEARDOWN_UNMOUNT_FAILED: &str = teardown_path_failed::UNMOUNT.id;
pub(crate) const UNEXPLAINED_AFTER_RESTART: &str = unexplained_after_restart::RULE.id;
