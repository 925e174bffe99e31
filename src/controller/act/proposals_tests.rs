use super::*;
use crate::api::TaskTemplate;

fn template(name: &str) -> TaskTemplate {
    serde_yaml_ng::from_str(&format!("{{name: {name}, title: T}}")).expect("a task")
}

fn proposal(task: &str, yaml: &str) -> (String, Result<String, String>) {
    (task.to_owned(), Ok(yaml.to_owned()))
}

#[test]
fn a_valid_proposal_may_depend_on_every_task_of_the_feature() {
    let existing = [template("schema"), template("api")];
    let judged = judge(
        vec![proposal(
            "api",
            "tasks:\n  - {name: docs, dependsOn: [api, schema], acceptance: [written]}",
        )],
        &existing,
        &[],
        5,
    );
    assert_eq!(judged.proposers, ["api"]);
    assert_eq!(judged.accepted.len(), 1);
    assert!(judged.refused.is_empty());
}

#[test]
fn a_later_proposal_is_checked_against_the_ones_accepted_before_it() {
    let judged = judge(
        vec![
            proposal("api", "tasks:\n  - {name: docs, acceptance: [written]}"),
            proposal(
                "schema",
                "tasks:\n  - {name: site, dependsOn: [docs], acceptance: [served]}",
            ),
            proposal("cli", "tasks:\n  - {name: docs, acceptance: [again]}"),
        ],
        &[template("api")],
        &[],
        5,
    );
    assert_eq!(judged.proposers, ["api", "schema"]);
    assert_eq!(judged.refused.len(), 1);
    assert_eq!(judged.refused[0].0, "cli");
}

#[test]
fn proposals_share_the_room_max_tasks_leaves() {
    let judged = judge(
        vec![
            proposal("api", "tasks:\n  - {name: a, acceptance: [x]}"),
            proposal(
                "cli",
                "tasks:\n  - {name: b, acceptance: [x]}\n  - {name: c, acceptance: [x]}",
            ),
        ],
        &[template("api"), template("cli")],
        &[],
        2,
    );
    assert_eq!(judged.proposers, ["api"]);
    let (task, problems) = &judged.refused[0];
    assert_eq!(task, "cli");
    assert!(
        problems.iter().any(|p| p.contains("maxTasks (1)")),
        "{problems:?}"
    );
}

#[test]
fn a_cycle_or_an_unknown_dependency_is_refused_with_its_problems() {
    let judged = judge(
        vec![proposal(
            "api",
            "tasks:\n  - {name: a, dependsOn: [b], acceptance: [x]}\n  - {name: b, dependsOn: [a], acceptance: [x]}\n  - {name: c, dependsOn: [ghost], acceptance: [x]}",
        )],
        &[template("api")],
        &[],
        10,
    );
    assert!(judged.accepted.is_empty());
    let problems = judged.refused[0].1.join("\n");
    assert!(problems.contains("cycle"), "{problems}");
    assert!(problems.contains("ghost"), "{problems}");
}

#[test]
fn a_proposal_the_plan_already_holds_as_proposed_is_skipped_silently() {
    let judged = judge(
        vec![proposal("api", "tasks:\n  - {name: docs, acceptance: [x]}")],
        &[template("api"), template("docs")],
        &["docs".to_owned()],
        10,
    );
    assert_eq!(judged, Judged::default());
}

#[test]
fn a_proposal_that_could_not_be_uploaded_is_refused_with_why() {
    let judged = judge(
        vec![(
            "api".to_owned(),
            Err("the proposed tasks cannot be uploaded".to_owned()),
        )],
        &[template("api")],
        &[],
        10,
    );
    assert_eq!(
        judged.refused,
        [(
            "api".to_owned(),
            vec!["the proposed tasks cannot be uploaded".to_owned()]
        )]
    );
}

#[test]
fn a_lost_extension_is_dropped_from_the_plan_its_tasks_not_created() {
    let feature: Feature = serde_yaml_ng::from_str(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata: {name: demo, namespace: team, uid: f-1}\n\
         spec: {agent: {image: agent:1, command: [agent]}, planning: {}}\n",
    )
    .expect("a Feature");
    let task = |name: &str| -> Arc<CachedTask> {
        Arc::new(
            serde_yaml_ng::from_str::<Task>(&format!(
                "apiVersion: ralph.dev/v1alpha1\nkind: Task\nmetadata: {{name: {name}, namespace: team}}\n\
                 spec: {{featureRef: demo, title: T}}\n"
            ))
            .expect("a Task")
            .into(),
        )
    };
    let limits = AnswerLimits {
        max_tasks: 10,
        existing: &[],
    };
    let mut plan = check_answer(
        "tasks:\n  - {name: count, acceptance: [x]}\n  - {name: polish, dependsOn: [count], acceptance: [x]}\n",
        limits,
    )
    .expect("a plan");
    without_lost_extension(&mut plan, &feature, &[task("demo-count")]);
    let names: Vec<&str> = plan.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["count"]);
}
