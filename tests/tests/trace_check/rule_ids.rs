//! The contract rules' ids, by the names the tests use (each id is its
//! rule's `RULE.id`, in the rule's own file under
//! nri-trace/src/engine/contract/).

use nri_trace::engine::contract;

pub(crate) const ADJUSTMENT_REJECTED: &str = contract::ADJUSTMENT_REJECTED.id;
pub(crate) const HOOK_OVER_BUDGET: &str = contract::HOOK_OVER_BUDGET.id;
pub(crate) const NAME_RESERVATION_RETRY: &str = contract::NAME_RESERVATION_RETRY.id;
pub(crate) const PLUGIN_TIMEOUT: &str = contract::PLUGIN_TIMEOUT.id;
pub(crate) const POD_UNKNOWN_TO_PLUGIN: &str = contract::POD_UNKNOWN_TO_PLUGIN.id;
pub(crate) const PROCESS_SURVIVES_SIGKILL: &str = contract::PROCESS_SURVIVES_SIGKILL.id;
pub(crate) const TEARDOWN_HOOK_FAILED: &str = contract::TEARDOWN_HOOK_FAILED.id;
pub(crate) const TEARDOWN_UNMOUNT_FAILED: &str = contract::TEARDOWN_UNMOUNT_FAILED.id;
pub(crate) const UNEXPLAINED_AFTER_RESTART: &str = contract::UNEXPLAINED_AFTER_RESTART.id;
