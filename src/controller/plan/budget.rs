//! A Feature's budget on a cluster (pure): what its Tasks spent, whether the budget is
//! spent (the engine's [`Budget::spent`]), and the condition that says when costs are
//! unknown.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::problem::Problem;
use super::run_view::run_view;
use crate::api::Feature;
use crate::api::budget::budget_of;
use crate::api::conditions::{self, STATUS_FALSE, STATUS_TRUE};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::engine::budget::{Budget, BudgetSpent, UsageTotals};
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::{RunView, attempt_id};

/// Feature condition, set while `spec.budget.maxCostUSD` is: `False` (reason
/// [`REASON_COST_UNKNOWN`]) once an attempt's cost is unknown, so the cost budget may
/// stop the feature late or never.
pub const COST_REPORTED: &str = "CostReported";
/// `CostReported=False`: some attempts reported no cost.
pub const REASON_COST_UNKNOWN: &str = "CostUnknown";
/// `CostReported=True`: every ended attempt reported its cost.
pub const REASON_COSTS_REPORTED: &str = "CostsReported";
/// `Configured=False`: `spec.budget` cannot be read (only when its CRD rules were bypassed).
pub const REASON_INVALID_BUDGET: &str = "InvalidBudget";

/// The Feature's budget; unlimited when it cannot be read ([`invalid_budget`] keeps any
/// attempt from starting then).
pub fn budget(feature: &Feature) -> Budget {
    budget_of(feature.spec.budget.as_ref()).unwrap_or_default()
}

/// The problem a budget that cannot be read shows (the CRD's rules reject it; a Feature
/// stored before they existed may still carry one).
pub fn invalid_budget(feature: &Feature) -> Option<Problem> {
    let error = budget_of(feature.spec.budget.as_ref()).err()?;
    Some(Problem {
        reason: REASON_INVALID_BUDGET,
        message: format!(
            "Feature {}/{}: {error}; no attempt starts until it is fixed",
            feature.namespace().unwrap_or_default(),
            feature.name_any()
        ),
    })
}

/// What the Tasks' statuses record: every ingested attempt, once.
pub fn recorded(tasks: &[Arc<CachedTask>]) -> UsageTotals {
    let mut totals = UsageTotals::default();
    for status in tasks.iter().filter_map(|t| t.status.as_ref()) {
        totals.add(&status.usage);
    }
    totals
}

/// What the feature spent as far as the budget is concerned: the recorded totals plus the
/// attempts that ended and are not ingested yet (their Pods' results), so that no attempt
/// starts in the same pass that ingests the one spending the budget.
pub fn spent(tasks: &[Arc<CachedTask>], pods: &BTreeMap<String, Arc<CachedPod>>) -> UsageTotals {
    let mut totals = recorded(tasks);
    for task in tasks {
        let Some(status) = task.status.as_ref() else {
            continue;
        };
        if status.phase != TaskPhase::Running || status.attempt_count == 0 {
            continue;
        }
        let pod = pods.get(&attempt_id(&task.name_any(), status.attempt_count));
        if let RunView::Ended { result, .. } = run_view(pod.map(Arc::as_ref), true, None) {
            totals.add_attempt(result.as_deref().map(|r| &r.usage));
        }
    }
    totals
}

/// The budget the Feature's attempts used up, if any: what its Tasks recorded plus the
/// attempts that ended and await ingestion ([`spent`]).
pub fn budget_spent(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
    pods: &BTreeMap<String, Arc<CachedPod>>,
) -> Option<BudgetSpent> {
    let budget = budget(feature);
    if budget.is_unlimited() {
        return None;
    }
    budget.spent(&spent(tasks, pods))
}

/// Sets or clears the [`COST_REPORTED`] condition: present only while the Feature has a
/// cost budget. Returns the warning when costs are unknown.
pub fn set_cost_condition(
    feature: &Feature,
    totals: &UsageTotals,
    conditions_: &mut Vec<Condition>,
    now: Time,
) -> Option<String> {
    let budget = budget(feature);
    if budget.max_cost.is_none() {
        conditions_.retain(|c| c.type_ != COST_REPORTED);
        return None;
    }
    let warning = budget.unknown_cost_warning(totals);
    let (status, reason, message) = match &warning {
        Some(warning) => (STATUS_FALSE, REASON_COST_UNKNOWN, warning.clone()),
        None => (
            STATUS_TRUE,
            REASON_COSTS_REPORTED,
            "every ended attempt reported its cost".to_owned(),
        ),
    };
    let c = conditions::condition(
        COST_REPORTED,
        status,
        reason,
        message,
        feature.metadata.generation,
        now,
    );
    conditions::set_condition(conditions_, c);
    warning
}

/// True when `new` turns the [`COST_REPORTED`] condition `False` (a Warning Event is due).
pub fn cost_became_unknown(old: &[Condition], new: &[Condition]) -> Option<String> {
    let is_unknown = |list: &[Condition]| {
        conditions::find(list, COST_REPORTED)
            .filter(|c| c.status == STATUS_FALSE)
            .map(|c| c.message.clone())
    };
    match (is_unknown(old), is_unknown(new)) {
        (None, Some(message)) => Some(message),
        _ => None,
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
