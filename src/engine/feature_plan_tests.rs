use super::*;
use crate::engine::dag::TaskNode;
use crate::engine::lifecycle::AttemptView;

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

const NOW: i64 = 1_000_000;

/// A ready task in `phase` whose last attempt is `attempts`, under the gate `slots` offer it.
fn view(slots: &Slots, phase: TaskPhase, attempts: u32) -> TaskView {
    let may_start = may_start(phase, true, None, NOW);
    TaskView {
        name: "t".to_owned(),
        phase,
        ready: phase == TaskPhase::Pending,
        generation: 1,
        next_attempt_after_ms: None,
        attempt: (attempts > 0).then_some(AttemptView {
            number: attempts,
            generation: 1,
        }),
        gate: slots.offer(may_start),
    }
}

fn claim(holder: &str, renewed_at_ms: i64) -> ClaimView {
    ClaimView {
        holder: holder.to_owned(),
        renewed_at_ms,
        duration_ms: 30_000,
    }
}

/// Offers the next ready, unclaimed, Pending task its slot; whether it starts.
fn start_next(slots: &mut Slots) -> bool {
    let task = view(slots, TaskPhase::Pending, 0);
    let actions = slots.decide(&task, None, &RunView::NotStarted, NOW);
    starts_next_attempt(&task, &actions)
}

#[test]
fn slots_go_to_the_first_tasks_that_start_up_to_the_parallelism() {
    let mut slots = Slots::new(gate(), usize::MAX);
    let started: Vec<_> = (0..3).map(|_| start_next(&mut slots)).collect();
    assert_eq!(started, vec![true, true, false]);
    assert_eq!(slots.handed_out(), 2);
    assert_eq!(slots.next(), FeatureGate::AtCapacity);
}

#[test]
fn the_start_limit_caps_the_slots_below_the_parallelism() {
    let mut slots = Slots::new(gate(), 1);
    assert!(start_next(&mut slots));
    assert!(!start_next(&mut slots));
}

#[test]
fn the_iterations_left_cap_the_slots() {
    let mut slots = Slots::new(
        Gate {
            iterations_used: 4,
            max_iterations: Some(5),
            ..gate()
        },
        usize::MAX,
    );
    assert!(start_next(&mut slots));
    assert_eq!(slots.next(), FeatureGate::AtCapacity);
}

#[test]
fn a_task_that_asks_for_no_slot_sees_the_standing_gate() {
    let suspended = Slots::new(
        Gate {
            suspended: true,
            ..gate()
        },
        usize::MAX,
    );
    assert_eq!(suspended.offer(false), FeatureGate::Suspended);
    let full = Slots::new(
        Gate {
            running: 2,
            ..gate()
        },
        usize::MAX,
    );
    assert_eq!(full.offer(false), FeatureGate::Open);
    assert_eq!(full.offer(true), FeatureGate::AtCapacity);
}

#[test]
fn offering_a_slot_hands_nothing_out() {
    let slots = Slots::new(gate(), usize::MAX);
    assert_eq!(slots.offer(true), FeatureGate::Open);
    assert_eq!(slots.offer(true), FeatureGate::Open);
    assert_eq!(slots.handed_out(), 0);
}

#[test]
fn a_ready_task_whose_claim_someone_else_holds_takes_no_slot() {
    let mut slots = Slots::new(
        Gate {
            parallelism: 1,
            ..gate()
        },
        usize::MAX,
    );
    let task = view(&slots, TaskPhase::Pending, 0);
    let held = claim("someone-else", NOW);
    let actions = slots.decide(&task, Some(&held), &RunView::NotStarted, NOW);
    assert_eq!(actions, vec![Action::RequeueAt(held.expires_at_ms())]);
    assert_eq!(slots.handed_out(), 0);
    assert!(start_next(&mut slots), "the next ready task gets the slot");
}

#[test]
fn a_ready_task_taking_over_an_expired_claim_starts_and_takes_a_slot() {
    let mut slots = Slots::new(gate(), usize::MAX);
    let task = view(&slots, TaskPhase::Pending, 1);
    let expired = claim("t-a1", NOW - 60_000);
    let actions = slots.decide(&task, Some(&expired), &RunView::Missing, NOW);
    assert!(starts_next_attempt(&task, &actions), "{actions:?}");
    assert_eq!(slots.handed_out(), 1);
}

#[test]
fn an_attempt_started_again_takes_no_slot() {
    let mut slots = Slots::new(gate(), usize::MAX);
    let task = view(&slots, TaskPhase::Running, 1);
    let own = claim("t-a1", NOW);
    let actions = slots.decide(&task, Some(&own), &RunView::NotStarted, NOW);
    assert!(
        actions.contains(&Action::StartAttempt { attempt: 1 }),
        "{actions:?}"
    );
    assert_eq!(slots.handed_out(), 0);
}

#[test]
fn a_claim_renewed_while_its_run_waits_takes_no_slot() {
    let mut slots = Slots::new(gate(), usize::MAX);
    let task = view(&slots, TaskPhase::Running, 1);
    let own = claim("t-a1", NOW - 20_000);
    let actions = slots.decide(&task, Some(&own), &RunView::pending(), NOW);
    assert!(actions.contains(&Action::RenewClaim), "{actions:?}");
    assert_eq!(slots.handed_out(), 0);
}

#[test]
fn a_task_waiting_for_its_backoff_does_not_ask_for_a_slot() {
    assert!(may_start(TaskPhase::Pending, true, Some(100), 100));
    assert!(!may_start(TaskPhase::Pending, true, Some(101), 100));
    assert!(!may_start(TaskPhase::Pending, false, None, 100));
    assert!(!may_start(TaskPhase::Running, true, None, 100));
}
