use super::*;

fn hand_written(name: &str) -> TaskTemplate {
    TaskTemplate {
        name: name.to_owned(),
        fields: TaskFields::default(),
    }
}

fn check(text: &str) -> Result<Answer, AnswerProblems> {
    check_with(text, 10, &[])
}

fn check_with(
    text: &str,
    max_tasks: u32,
    existing: &[TaskTemplate],
) -> Result<Answer, AnswerProblems> {
    check_answer(
        text,
        AnswerLimits {
            max_tasks,
            existing,
        },
    )
}

fn problems(text: &str) -> Vec<String> {
    match check(text) {
        Ok(answer) => panic!("accepted: {answer:?}"),
        Err(problems) => problems.messages(),
    }
}

const TWO: &str = "tasks:
  - name: a
    acceptance: [it works]
  - name: b
    dependsOn: [a]
    verify: {command: sh test.sh}
";

#[test]
fn a_task_list_with_checks_is_accepted_in_order() {
    let answer = check(TWO).expect("valid");
    let names: Vec<&str> = answer.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn a_bare_list_is_read_as_the_task_list() {
    let answer = check("- {name: a, acceptance: [x]}").expect("valid");
    assert_eq!(answer.tasks.len(), 1);
}

#[test]
fn checks_are_folded_into_the_description_the_worker_sees() {
    let templates = check(TWO).expect("valid").templates();
    assert!(
        templates[0]
            .fields
            .description
            .contains("Done when:\n- it works")
    );
    assert!(templates[1].fields.description.contains("`sh test.sh`"));
    assert_eq!(templates[0].fields.title, "a");
}

#[test]
fn prose_is_refused_as_prose() {
    let found = problems("I think we should first write the parser, then the tests.");
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("is prose, not a task list"), "{found:?}");
}

#[test]
fn an_empty_answer_is_refused() {
    assert!(problems("")[0].contains("empty"));
    assert!(problems("tasks: []")[0].contains("holds no task"));
    assert!(problems("tasks:")[0].contains("holds no task"));
}

#[test]
fn more_tasks_than_max_tasks_are_refused() {
    let found = check_with(TWO, 1, &[]).expect_err("too many").messages();
    assert_eq!(found.len(), 1);
    assert!(
        found[0].contains("2 tasks, more than maxTasks (1)"),
        "{found:?}"
    );
}

#[test]
fn a_cycle_is_refused_naming_its_tasks() {
    let found = problems(
        "tasks:
  - {name: a, dependsOn: [b], acceptance: [x]}
  - {name: b, dependsOn: [a], acceptance: [x]}",
    );
    assert!(found.iter().any(|p| p.contains("cycle")), "{found:?}");
}

#[test]
fn an_unknown_dependency_is_refused_naming_both_tasks() {
    let found = problems("tasks: [{name: a, dependsOn: [ghost], acceptance: [x]}]");
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("task a:") && found[0].contains("ghost"),
        "{found:?}"
    );
}

#[test]
fn a_name_of_a_hand_written_task_is_refused() {
    let found = check_with(
        "tasks: [{name: setup, acceptance: [x]}]",
        10,
        &[hand_written("setup")],
    )
    .expect_err("clash")
    .messages();
    assert!(
        found[0].contains("a hand-written task has this name"),
        "{found:?}"
    );
}

#[test]
fn planned_tasks_may_depend_on_hand_written_ones() {
    let answer = check_with(
        "tasks: [{name: build, dependsOn: [setup], acceptance: [x]}]",
        10,
        &[hand_written("setup")],
    );
    assert!(answer.is_ok(), "{answer:?}");
}

#[test]
fn a_task_without_a_check_is_refused() {
    let found = problems("tasks: [{name: a}]");
    assert!(found[0].contains("names no check"), "{found:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let found = problems(
        "tasks:
  - {name: Bad_Name, acceptance: [x]}
  - {name: planning, acceptance: [x]}
  - {name: c, dependOn: [a], acceptance: [x]}
  - {name: d}",
    );
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(found[0].contains("unknown field `dependOn`"), "{found:?}");
}
