use super::{Build, dag, messages, task};
use crate::engine::dag::{CycleLink, CycleStep, Dag, DagError, validate};

#[test]
fn an_empty_task_set_is_valid() {
    assert_eq!(messages(vec![]), Vec::<String>::new());
}

#[test]
fn duplicate_name_is_reported_once_with_its_count() {
    let errors = messages(vec![task("a"), task("b"), task("a"), task("a")]);
    assert_eq!(errors, ["duplicate task name \"a\" (3 tasks)"]);
}

#[test]
fn unknown_dependency_names_the_task_and_the_missing_name() {
    let errors = messages(vec![task("a"), task("b").after(&["x"])]);
    assert_eq!(errors, ["task \"b\" depends on unknown task \"x\""]);
}

#[test]
fn self_dependency_is_rejected() {
    let errors = messages(vec![task("a").after(&["a"])]);
    assert_eq!(errors, ["task \"a\" depends on itself"]);
}

#[test]
fn dependency_cycle_is_reported_with_its_path() {
    let errors = messages(vec![
        task("a").after(&["b"]),
        task("b").after(&["c"]),
        task("c").after(&["a"]),
    ]);
    assert_eq!(errors, ["dependency cycle: a -> b -> c -> a"]);
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
fn each_separate_cycle_is_reported() {
    let errors = messages(vec![
        task("a").after(&["b"]),
        task("b").after(&["a"]),
        task("c"),
        task("d").after(&["e"]),
        task("e").after(&["d"]),
    ]);
    assert_eq!(
        errors,
        [
            "dependency cycle: a -> b -> a",
            "dependency cycle: d -> e -> d",
        ]
    );
}

#[test]
fn cycle_through_subtasks_names_the_subtask_links() {
    let errors = messages(vec![
        task("p"),
        task("c1").under("p").after(&["q"]),
        task("q"),
        task("d1").under("q").after(&["p"]),
    ]);
    assert_eq!(
        errors,
        ["dependency cycle: p -> subtask c1 -> q -> subtask d1 -> p"]
    );
}

#[test]
fn cycle_through_an_inherited_dependency_names_the_parent() {
    let errors = messages(vec![
        task("p").after(&["x"]),
        task("c").under("p"),
        task("x").after(&["c"]),
    ]);
    assert_eq!(errors, ["dependency cycle: c -> parent p -> x -> c"]);
}

#[test]
fn unknown_parent_names_the_task_and_the_missing_parent() {
    let errors = messages(vec![task("a").under("nope")]);
    assert_eq!(errors, ["task \"a\" has unknown parent \"nope\""]);
}

#[test]
fn self_parent_is_rejected() {
    let errors = messages(vec![task("a").under("a")]);
    assert_eq!(errors, ["task \"a\" is its own parent"]);
}

#[test]
fn parent_cycle_is_reported_with_its_path() {
    let errors = messages(vec![
        task("a").under("c"),
        task("b").under("a"),
        task("c").under("b"),
    ]);
    assert_eq!(errors, ["parent cycle: a -> c -> b -> a"]);
}

#[test]
fn subtask_depending_on_its_parent_is_rejected() {
    let errors = messages(vec![task("p"), task("c").under("p").after(&["p"])]);
    assert_eq!(
        errors,
        ["task \"c\" depends on \"p\", which contains it and cannot finish before it"]
    );
}

#[test]
fn subtask_depending_on_a_grandparent_is_rejected() {
    let errors = messages(vec![
        task("g"),
        task("p").under("g"),
        task("c").under("p").after(&["g"]),
    ]);
    assert_eq!(
        errors,
        ["task \"c\" depends on \"g\", which contains it and cannot finish before it"]
    );
}

#[test]
fn parent_depending_on_its_own_subtask_is_rejected() {
    let errors = messages(vec![task("p").after(&["c"]), task("c").under("p")]);
    assert_eq!(
        errors,
        ["task \"p\" depends on its own subtask \"c\", which waits for the dependencies of \"p\""]
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
