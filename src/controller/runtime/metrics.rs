//! Prometheus metrics of the controller, served on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label: which controller (`feature` or `task`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `feature` or `task`.
    pub controller: String,
}

/// Label: a task phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// Pending, Running, Done, Failed, Blocked.
    pub phase: String,
}

/// Label: how an attempt ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// done, failed, released, blocked, crashed, exhausted, interrupted, lost, stoppedFeature.
    pub outcome: String,
}

/// The controller's metrics (cheap to clone: every metric is shared).
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles run, by controller.
    pub reconciles: Family<ControllerLabel, Counter>,
    /// Reconciles that failed, by controller.
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    /// Tasks in each phase, over all features this controller watches.
    pub tasks_by_phase: Family<PhaseLabel, Gauge>,
    /// Attempts ended, by outcome.
    pub attempts_by_outcome: Family<OutcomeLabel, Counter>,
    /// Attempts started.
    pub attempts_started: Counter,
    /// Seconds from taking a claim to the attempt's Pod running.
    pub claim_to_pod_seconds: Histogram,
    /// Seconds one Feature reconcile took.
    pub reconcile_duration_seconds: Histogram,
    /// Bytes of the heap, by kind (allocated, active, resident): set at each scrape.
    pub heap_bytes: Family<HeapLabel, Gauge>,
}

/// Label: which figure of the heap ([`super::heap::HeapFigures`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeapLabel {
    /// allocated, active or resident.
    pub kind: &'static str,
}

/// Buckets of `claim_to_pod_seconds`: image pulls and scheduling take seconds to minutes.
const CLAIM_TO_POD_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// Buckets of `reconcile_duration_seconds` (controller-runtime's range).
const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            tasks_by_phase: Family::default(),
            attempts_by_outcome: Family::default(),
            attempts_started: Counter::default(),
            claim_to_pod_seconds: Histogram::new(CLAIM_TO_POD_BUCKETS),
            reconcile_duration_seconds: Histogram::new(RECONCILE_BUCKETS),
            heap_bytes: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric (prefix `ralph`) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ralph");
        r.register(
            "reconciles",
            "Reconciles run, by controller",
            self.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconciles that failed, by controller",
            self.reconcile_errors.clone(),
        );
        r.register("tasks", "Tasks in each phase", self.tasks_by_phase.clone());
        r.register(
            "attempts_ended",
            "Attempts ended, by outcome",
            self.attempts_by_outcome.clone(),
        );
        r.register(
            "attempts_started",
            "Attempts started",
            self.attempts_started.clone(),
        );
        r.register(
            "claim_to_pod_seconds",
            "Seconds from taking a task's claim to its agent Pod running",
            self.claim_to_pod_seconds.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Seconds one Feature reconcile took",
            self.reconcile_duration_seconds.clone(),
        );
        r.register(
            "heap_bytes",
            "Bytes of the controller's heap: in live allocations (allocated), in their pages \
             (active), held resident by the allocator (resident)",
            self.heap_bytes.clone(),
        );
    }

    /// Sets the heap gauges from the allocator's figures now.
    pub fn sample_heap(&self) {
        let Some(heap) = super::heap::sample() else {
            return;
        };
        for (kind, bytes) in [
            ("allocated", heap.allocated),
            ("active", heap.active),
            ("resident", heap.resident),
        ] {
            let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
            self.heap_bytes
                .get_or_create(&HeapLabel { kind })
                .set(bytes);
        }
    }

    /// Counts one reconcile of `controller`, failed or not.
    pub fn reconciled(&self, controller: &str, failed: bool) {
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&label).inc();
        if failed {
            self.reconcile_errors.get_or_create(&label).inc();
        }
    }

    /// Counts one ended attempt.
    pub fn attempt_ended(&self, outcome: &str) {
        self.attempts_by_outcome
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}

/// A registry holding the controller's metrics, and its text encoding.
pub(crate) struct MetricsRegistry {
    registry: Registry,
    metrics: Metrics,
}

impl MetricsRegistry {
    /// A registry with `metrics` registered.
    pub(crate) fn new(metrics: &Metrics) -> Self {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        Self {
            registry,
            metrics: metrics.clone(),
        }
    }

    /// The OpenMetrics text exposition, the heap gauges read now.
    pub(crate) fn encode(&self) -> String {
        self.metrics.sample_heap();
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_reconcile_counts_as_reconcile_and_as_error() {
        let metrics = Metrics::default();
        let registry = MetricsRegistry::new(&metrics);
        metrics.reconciled("task", true);
        metrics.reconciled("task", false);
        let text = registry.encode();
        assert!(
            text.contains(r#"ralph_reconciles_total{controller="task"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ralph_reconcile_errors_total{controller="task"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn ended_attempts_are_counted_by_outcome() {
        let metrics = Metrics::default();
        let registry = MetricsRegistry::new(&metrics);
        metrics.attempt_ended("done");
        let text = registry.encode();
        assert!(
            text.contains(r#"ralph_attempts_ended_total{outcome="done"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn each_scrape_reports_the_heap_by_kind() {
        let registry = MetricsRegistry::new(&Metrics::default());
        let text = registry.encode();
        for kind in ["allocated", "active", "resident"] {
            assert!(
                text.contains(&format!("ralph_heap_bytes{{kind=\"{kind}\"}}")),
                "{text}"
            );
        }
    }
}
