use super::{Build, dag, messages, ready, task};
use crate::engine::dag::{CycleLink, CycleStep, Dag, DagError, TaskNode, validate};
use crate::engine::testing::named_cases;

/// Asserts that `Dag::new` rejects `nodes` with exactly these messages, in order.
fn assert_rejected(nodes: Vec<TaskNode>, expected: &[&str]) {
    assert_eq!(messages(nodes), expected);
}

#[test]
fn an_empty_task_set_is_valid() {
    assert_eq!(messages(vec![]), Vec::<String>::new());
}

named_cases! { assert_rejected;
    duplicate_name_is_reported_once_with_its_count
        (vec![task("a"), task("b"), task("a"), task("a")], &["duplicate task name \"a\" (3 tasks)"]);
    unknown_dependency_names_the_task_and_the_missing_name
        (vec![task("a"), task("b").after(&["x"])], &["task \"b\" depends on unknown task \"x\""]);
    self_dependency_is_rejected(vec![task("a").after(&["a"])], &["task \"a\" depends on itself"]);
    dependency_cycle_is_reported_with_its_path
        (vec![task("a").after(&["b"]), task("b").after(&["c"]), task("c").after(&["a"])], &["dependency cycle: a -> b -> c -> a"]);
    each_separate_cycle_is_reported
        (vec![task("a").after(&["b"]), task("b").after(&["a"]), task("c"), task("d").after(&["e"]), task("e").after(&["d"])], &["dependency cycle: a -> b -> a", "dependency cycle: d -> e -> d"]);
    cycle_through_subtasks_names_the_subtask_links
        (vec![task("p"), task("c1").under("p").after(&["q"]), task("q"), task("d1").under("q").after(&["p"])], &["dependency cycle: p -> subtask c1 -> q -> subtask d1 -> p"]);
    cycle_through_an_inherited_dependency_names_the_parent
        (vec![task("p").after(&["x"]), task("c").under("p"), task("x").after(&["c"])], &["dependency cycle: c -> parent p -> x -> c"]);
    unknown_parent_names_the_task_and_the_missing_parent
        (vec![task("a").under("nope")], &["task \"a\" has unknown parent \"nope\""]);
    self_parent_is_rejected(vec![task("a").under("a")], &["task \"a\" is its own parent"]);
    parent_cycle_is_reported_with_its_path
        (vec![task("a").under("c"), task("b").under("a"), task("c").under("b")], &["parent cycle: a -> c -> b -> a"]);
    subtask_depending_on_its_parent_is_rejected
        (vec![task("p"), task("c").under("p").after(&["p"])], &["task \"c\" depends on \"p\", which contains it and cannot finish before it"]);
    subtask_depending_on_a_grandparent_is_rejected
        (vec![task("g"), task("p").under("g"), task("c").under("p").after(&["g"])], &["task \"c\" depends on \"g\", which contains it and cannot finish before it"]);
    parent_depending_on_its_own_subtask_is_rejected
        (vec![task("p").after(&["c"]), task("c").under("p")], &["task \"p\" depends on its own subtask \"c\", which waits for the dependencies of \"p\""]);
}

#[test]
fn dependency_cycle_carries_its_steps_as_data() {
    let Err(errors) = Dag::new(vec![task("a").after(&["b"]), task("b").after(&["a"])]) else {
        panic!("a two-task cycle was accepted");
    };
    let step = |task: &str| CycleStep {
        link: CycleLink::DependsOn,
        task: task.to_owned(),
    };
    assert_eq!(
        errors.0,
        [DagError::DependencyCycle {
            start: "a".to_owned(),
            steps: vec![step("b"), step("a")],
        }]
    );
}

#[test]
fn subtask_may_depend_on_a_sibling() {
    let dag = dag(vec![
        task("p"),
        task("a").under("p"),
        task("b").under("p").after(&["a"]),
    ]);
    assert_eq!(dag.len(), 3);
}

#[test]
fn every_problem_is_reported_at_once_one_per_line() {
    let Err(errors) = Dag::new(vec![
        task("a").after(&["missing"]),
        task("a"),
        task("b").after(&["b"]),
        task("c").under("ghost"),
    ]) else {
        panic!("an invalid task set was accepted");
    };
    assert_eq!(
        errors.to_string(),
        "duplicate task name \"a\" (2 tasks)\n\
         task \"a\" depends on unknown task \"missing\"\n\
         task \"b\" depends on itself\n\
         task \"c\" has unknown parent \"ghost\""
    );
}

#[test]
fn repeated_dependency_counts_once() {
    let dag = dag(vec![task("a"), task("b").after(&["a", "a"])]);
    let deps: Option<Vec<&str>> = dag.dependencies("b").map(Iterator::collect);
    assert_eq!(deps, Some(vec!["a"]));
}

#[test]
fn validate_reports_the_same_problems_as_new() {
    let nodes = vec![task("a").after(&["b"]), task("b").after(&["a"])];
    let Err(from_new) = Dag::new(nodes.clone()) else {
        panic!("a cycle was accepted");
    };
    assert_eq!(validate(&nodes), Err(from_new));
}

#[test]
fn validate_accepts_a_valid_set() {
    let nodes = vec![task("a"), task("b").after(&["a"]), task("c").under("b")];
    assert_eq!(validate(&nodes), Ok(()));
}

/// Tasks `t0` to `t<n-1>`, each but the first linked to the one before it by `link`.
fn chain(n: usize, link: impl Fn(TaskNode, &str) -> TaskNode) -> Vec<TaskNode> {
    (0..n)
        .map(|i| {
            let node = task(&format!("t{i}"));
            match i.checked_sub(1) {
                None => node,
                Some(previous) => link(node, &format!("t{previous}")),
            }
        })
        .collect()
}

#[test]
fn a_very_long_dependency_chain_is_validated_without_recursion() {
    let nodes = chain(50_000, |node, previous| node.after(&[previous]));
    assert_eq!(dag(nodes).ready_count(), 1);
}

#[test]
fn a_very_deep_hierarchy_is_validated_without_recursion() {
    let n = 50_000;
    let dag = dag(chain(n, |node, previous| node.under(previous)));
    assert_eq!(ready(&dag), [format!("t{}", n - 1)]);
}

#[test]
fn a_very_long_cycle_is_reported() {
    let n = 50_000;
    let nodes = (0..n)
        .map(|i| task(&format!("t{i}")).after(&[&format!("t{}", (i + 1) % n)]))
        .collect();
    let errors = messages(nodes);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("dependency cycle: t0 -> t1 -> t2 -> "));
}
