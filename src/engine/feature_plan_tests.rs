use super::*;
use crate::engine::dag::TaskNode;

fn gate() -> Gate {
    Gate {
        suspended: false,
        stopped: false,
        parallelism: 2,
        running: 0,
        iterations_used: 0,
        max_iterations: None,
        budget_spent: false,
    }
}

fn node(name: &str, depends_on: &[&str], order: u64) -> TaskNode {
    TaskNode {
        name: name.to_owned(),
        depends_on: depends_on.iter().map(|d| (*d).to_owned()).collect(),
        parent: None,
        priority: 0,
        order,
        phase: TaskPhase::Pending,
    }
}

#[test]
fn ready_tasks_come_first_then_the_others_in_input_order() {
    let dag = Dag::new(vec![
        node("b", &["a"], 0),
        node("a", &[], 1),
        node("c", &[], 2),
    ])
    .unwrap();
    let order: Vec<_> = ready_first(&dag).collect();
    assert_eq!(order, vec![(1, true), (2, true), (0, false)]);
}

#[test]
fn slots_go_to_the_first_tasks_that_ask_up_to_the_parallelism() {
    let mut slots = Slots::new(gate(), usize::MAX);
    let gates: Vec<_> = [true, false, true, true].map(|ask| slots.take(ask)).into();
    use FeatureGate::{AtCapacity, Open};
    assert_eq!(gates, vec![Open, Open, Open, AtCapacity]);
    assert_eq!(slots.handed_out(), 2);
}

#[test]
fn the_start_limit_caps_the_slots_below_the_parallelism() {
    let mut slots = Slots::new(gate(), 1);
    assert_eq!(slots.take(true), FeatureGate::Open);
    assert_eq!(slots.take(true), FeatureGate::AtCapacity);
}

#[test]
fn a_task_that_asks_for_no_slot_sees_the_standing_gate() {
    let mut slots = Slots::new(
        Gate {
            suspended: true,
            ..gate()
        },
        usize::MAX,
    );
    assert_eq!(slots.take(false), FeatureGate::Suspended);
    let mut full = Slots::new(
        Gate {
            running: 2,
            ..gate()
        },
        usize::MAX,
    );
    assert_eq!(full.take(false), FeatureGate::Open);
    assert_eq!(full.take(true), FeatureGate::AtCapacity);
}

#[test]
fn a_task_waiting_for_its_backoff_does_not_ask_for_a_slot() {
    assert!(may_start(TaskPhase::Pending, true, Some(100), 100));
    assert!(!may_start(TaskPhase::Pending, true, Some(101), 100));
    assert!(!may_start(TaskPhase::Pending, false, None, 100));
    assert!(!may_start(TaskPhase::Running, true, None, 100));
}
