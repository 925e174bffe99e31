//! Loading Feature/Task manifests: what is accepted, and how each problem is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use ralph::manifest::{ManifestError, Plan, TaskOrigin, load_plan};
use tempfile::TempDir;

const AGENT: &str = "  agent:\n    command: [claude-agent-acp]\n";
/// The tasks of a feature with one task, `a`.
const ONE_TASK: &str = "    - name: a\n";
/// The tasks of the feature `calc`: one task, `code`.
const CALC: &str = "    - name: code\n";

/// A temporary directory holding manifest files.
struct Files {
    dir: TempDir,
    paths: Vec<PathBuf>,
}

impl Files {
    fn new() -> Self {
        match TempDir::new() {
            Ok(dir) => Files {
                dir,
                paths: Vec::new(),
            },
            Err(error) => panic!("cannot create a temporary directory: {error}"),
        }
    }

    fn with(mut self, name: &str, text: &str) -> Self {
        let path = self.dir.path().join(name);
        if let Err(error) = std::fs::write(&path, text) {
            panic!("cannot write {}: {error}", path.display());
        }
        self.paths.push(path);
        self
    }

    fn plan(&self) -> Plan {
        match load_plan(&self.paths) {
            Ok(plan) => plan,
            Err(errors) => panic!("expected a valid plan, got:\n{errors}"),
        }
    }

    fn errors(&self) -> Vec<ManifestError> {
        match load_plan(&self.paths) {
            Ok(plan) => panic!(
                "expected errors, got a plan of {} features",
                plan.features.len()
            ),
            Err(errors) => errors.0,
        }
    }

    /// One file, `f.yaml`, holding `text`.
    fn manifest(text: &str) -> Self {
        Self::new().with("f.yaml", text)
    }

    fn messages(&self) -> Vec<String> {
        self.errors().iter().map(ToString::to_string).collect()
    }

    /// The one problem reported (asserting there is exactly one).
    fn only_message(&self) -> String {
        let messages = self.messages();
        assert_eq!(messages.len(), 1, "expected one problem, got {messages:#?}");
        messages.into_iter().next().unwrap_or_default()
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

fn feature(name: &str, tasks: &str) -> String {
    format!(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: {name}\nspec:\n{AGENT}  tasks:\n{tasks}"
    )
}

/// The plan of the feature `hello` with `tasks`.
fn hello_plan(tasks: &str) -> Plan {
    Files::manifest(&feature("hello", tasks)).plan()
}

#[test]
fn a_valid_feature_becomes_a_plan_with_template_names_as_task_ids() {
    let plan = hello_plan("    - name: a\n    - name: b\n      dependsOn: [a]\n");
    assert_eq!(plan.features.len(), 1);
    let ids: Vec<&str> = plan.features[0]
        .tasks
        .iter()
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(plan.features[0].tasks[1].object_name, "hello-b");
}

#[test]
fn the_plan_dag_lists_what_is_ready_now() {
    let plan = hello_plan(
        "    - name: a\n      priority: 2\n    - name: b\n      priority: 1\n    - name: c\n      dependsOn: [a]\n",
    );
    let ready: Vec<&str> = plan.features[0].dag.ready().collect();
    assert_eq!(ready, ["b", "a"]);
}

#[test]
fn defaults_are_applied_to_missing_fields() {
    let plan = hello_plan(ONE_TASK);
    let spec = &plan.features[0].feature.spec;
    assert_eq!(spec.parallelism, 1);
    assert_eq!(spec.lease_duration_seconds, 60);
    assert_eq!(spec.retry.max_retries, 3);
    assert_eq!(spec.retry.backoff_base_seconds, 10);
    assert_eq!(spec.retry.backoff_max_seconds, 600);
    assert!(!spec.suspend && spec.verify.is_off());
}

#[test]
fn documents_of_one_file_and_many_files_are_all_read() {
    let files = Files::new()
        .with(
            "one.yaml",
            &format!(
                "{}---\n{}",
                feature("f1", ONE_TASK),
                feature("f2", ONE_TASK)
            ),
        )
        .with("two.yaml", &format!("---\n{}", feature("f3", ONE_TASK)));
    let names: Vec<String> = files.plan().features.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["f1", "f2", "f3"]);
}

#[test]
fn empty_documents_and_comments_are_skipped() {
    let files = Files::manifest(&format!(
        "# header\n---\n---\n{}---\n# trailing\n",
        feature("f1", ONE_TASK)
    ));
    assert_eq!(files.plan().features.len(), 1);
}

#[test]
fn a_feature_without_tasks_is_valid() {
    let text = format!(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: empty\nspec:\n{AGENT}"
    );
    let plan = Files::manifest(&text).plan();
    assert!(plan.features[0].tasks.is_empty());
}

#[test]
fn out_of_range_values_are_reported() {
    let text = feature("hello", "    - name: a\n      maxRetries: 101\n").replace(
        "  tasks:",
        "  parallelism: 0\n  leaseDurationSeconds: 5\n  tasks:",
    );
    let messages = Files::manifest(&text).messages();
    let joined = messages.join("\n");
    assert_eq!(messages.len(), 3, "{joined}");
    assert!(
        joined.contains("spec.parallelism: 0 is below the minimum 1"),
        "{joined}"
    );
    assert!(
        joined.contains("spec.leaseDurationSeconds: 5 is below the minimum 15"),
        "{joined}"
    );
    assert!(
        joined.contains("spec.tasks[a].maxRetries: 101 is above the maximum 100"),
        "{joined}"
    );
}

#[test]
fn a_missing_file_is_reported() {
    let missing = Path::new("/nonexistent/ralph/f.yaml");
    let errors = match load_plan(&[missing]) {
        Err(errors) => errors.0,
        Ok(_) => panic!("a missing file must not load"),
    };
    assert!(matches!(&errors[..], [ManifestError::Read { .. }]));
}

#[test]
fn problems_in_every_file_are_all_reported() {
    let files = Files::new()
        .with(
            "a.yaml",
            &feature("a", "    - name: x\n      dependOn: []\n"),
        )
        .with(
            "b.yaml",
            &feature("b", "    - name: x\n      dependsOn: [y]\n"),
        );
    let messages = files.messages();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(messages[0].starts_with(&files.file("a.yaml")));
    assert!(messages[1].starts_with(&files.file("b.yaml")));
    assert!(messages[1].ends_with("Feature b: task \"x\" depends on unknown task \"y\""));
}

#[test]
fn a_feature_defined_twice_is_reported_with_both_places() {
    let files = Files::new()
        .with("a.yaml", &feature("same", "    - name: x\n"))
        .with("b.yaml", &feature("same", "    - name: x\n"));
    let message = files.only_message();
    assert_eq!(
        message,
        format!(
            "{}:1 (document 1): Feature same is defined twice (first at {}:1 (document 1))",
            files.file("b.yaml"),
            files.file("a.yaml")
        )
    );
}

fn standalone(name: &str, feature_ref: &str, rest: &str) -> String {
    format!(
        "---\napiVersion: ralph.dev/v1alpha1\nkind: Task\nmetadata:\n  name: {name}\nspec:\n  featureRef: {feature_ref}\n{rest}"
    )
}

/// The feature `calc` followed by the standalone `tasks`.
fn calc_and(tasks: &[String]) -> String {
    format!("{}{}", feature("calc", CALC), tasks.concat())
}

/// A standalone task of `calc` that depends on its template task `code` by object name.
fn calc_bench() -> String {
    standalone("calc-bench", "calc", "  dependsOn: [calc-code]\n")
}

#[test]
fn a_standalone_task_joins_its_feature_after_the_templates() {
    let plan = Files::manifest(&calc_and(&[calc_bench()])).plan();
    let tasks = &plan.features[0].tasks;
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[1].id, "calc-bench");
    assert!(matches!(tasks[1].origin, TaskOrigin::Standalone(_)));
}

#[test]
fn a_standalone_task_dependency_on_a_template_object_maps_to_the_template_id() {
    let plan = Files::manifest(&calc_and(&[calc_bench()])).plan();
    assert_eq!(plan.features[0].tasks[1].fields.depends_on, ["code"]);
    let ready: Vec<&str> = plan.features[0].dag.ready().collect();
    assert_eq!(ready, ["code"]);
}

#[test]
fn a_standalone_task_may_depend_on_another_standalone_task() {
    let text = calc_and(&[
        standalone("extra-one", "calc", ""),
        standalone("extra-two", "calc", "  dependsOn: [extra-one]\n"),
    ]);
    let plan = Files::manifest(&text).plan();
    assert_eq!(plan.features[0].tasks[2].fields.depends_on, ["extra-one"]);
}

#[test]
fn a_task_in_another_file_finds_its_feature() {
    let files = Files::new()
        .with("f.yaml", &feature("calc", CALC))
        .with("t.yaml", &standalone("calc-docs", "calc", ""));
    assert_eq!(files.plan().features[0].tasks.len(), 2);
}

fn with_verify(verify: &str) -> String {
    feature("hello", ONE_TASK).replace("  tasks:", &format!("  verify:\n{verify}  tasks:"))
}

#[test]
fn verify_takes_an_agent_and_a_command_with_its_limits() {
    let text = with_verify(
        "    agent: true\n    command: cargo test\n    commandTimeoutSeconds: 120\n    outputTailBytes: 512\n",
    );
    let plan = Files::manifest(&text).plan();
    let verify = &plan.features[0].feature.spec.verify;
    assert!(verify.agent);
    assert_eq!(verify.command.as_deref(), Some("cargo test"));
    assert_eq!(
        (verify.command_timeout_seconds(), verify.output_tail_bytes()),
        (120, 512)
    );
}
/// What the one problem reported for a manifest must say.
enum Problem {
    /// The whole message: the file's path, then this.
    At(&'static str),
    /// The message begins with the file's path, then this.
    StartsAt(&'static str),
    EndsWith(&'static str),
    Contains(&'static str),
}

impl Files {
    /// Asserts that exactly one problem is reported and that it says `expected`.
    fn assert_only_problem(&self, expected: Problem) {
        let message = self.only_message();
        let at_file = message.strip_prefix(&self.file("f.yaml"));
        let holds = match expected {
            Problem::At(rest) => at_file == Some(rest),
            Problem::StartsAt(rest) => at_file.is_some_and(|text| text.starts_with(rest)),
            Problem::EndsWith(end) => message.ends_with(end),
            Problem::Contains(part) => message.contains(part),
        };
        assert!(holds, "{message}");
    }
}

/// One `#[test]` per row: the file `f.yaml` holding the text reports exactly one problem, as
/// the [`Problem`] says.
macro_rules! one_problem_tests {
    ($($test:ident: $text:expr => $problem:expr;)*) => {
        $(
            #[test]
            fn $test() {
                Files::manifest(&$text).assert_only_problem($problem);
            }
        )*
    };
}

one_problem_tests! {
    a_typo_in_a_task_field_names_the_field_the_task_and_the_line:
        feature("hello", "    - name: a\n    - name: b\n      dependOn: [a]\n")
        => Problem::At(":11 (document 1): Feature hello: spec.tasks[b].dependOn: \
            unknown field \"dependOn\" (did you mean \"dependsOn\"?)");
    an_unknown_field_outside_the_tasks_is_reported:
        feature("hello", ONE_TASK).replace("  tasks:", "  paralelism: 2\n  tasks:")
        => Problem::Contains("spec.paralelism: unknown field \"paralelism\" \
            (did you mean \"parallelism\"?)");
    an_unknown_field_in_a_kubernetes_type_is_reported:
        feature("hello", ONE_TASK).replace(
            "    command: [claude-agent-acp]\n",
            "    command: [x]\n    env:\n      - name: A\n        valu: b\n",
        )
        => Problem::Contains("spec.agent.env[A].valu: unknown field");
    a_field_of_the_wrong_type_names_expected_and_found:
        feature("hello", "    - name: a\n      priority: high\n")
        => Problem::EndsWith("Feature hello: spec.tasks[a].priority: expected an integer, \
            found a string (\"high\")");
    a_missing_agent_is_reported_as_required:
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: hello\nspec:\n  \
            tasks: []\n"
        => Problem::EndsWith("Feature hello: spec.agent: is required");
    an_unknown_kind_is_reported_with_file_and_document:
        format!(
            "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            feature("hello", ONE_TASK)
        )
        => Problem::At(":12 (document 2): unknown kind \"ConfigMap\", expected \"Feature\" or \
            \"Task\"");
    an_unsupported_api_version_is_reported:
        feature("hello", ONE_TASK).replace("ralph.dev/v1alpha1", "ralph.dev/v1")
        => Problem::EndsWith("Feature: unsupported apiVersion \"ralph.dev/v1\", expected \
            \"ralph.dev/v1alpha1\"");
    a_missing_name_is_reported:
        feature("hello", ONE_TASK).replace("  name: hello\n", "  labels: {}\n")
        => Problem::EndsWith("Feature has no metadata.name");
    invalid_yaml_is_reported_at_its_file_line:
        format!(
            "{}---\napiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: x\n   \
                bad: indent\nspec: {{}}\n",
            feature("hello", ONE_TASK)
        )
        => Problem::StartsAt(":15 (document 2): invalid YAML: ");
    a_file_without_documents_is_reported:
        "# nothing here\n" => Problem::At(": the file holds no Feature or Task");
    a_dependency_cycle_is_reported_with_its_path:
        feature("c", "    - name: a\n      dependsOn: [b]\n    - name: b\n      dependsOn: [a]\n")
        => Problem::EndsWith("Feature c: dependency cycle: a -> b -> a");
    a_self_dependency_is_reported_naming_the_task:
        feature("c", "    - name: a\n      dependsOn: [a]\n")
        => Problem::EndsWith("task \"a\" depends on itself");
    a_task_naming_no_feature_is_reported:
        standalone("lonely", "nowhere", "")
        => Problem::EndsWith("Task lonely: spec.featureRef: no Feature named \"nowhere\" in \
            the given files");
    a_standalone_task_named_like_a_template_task_is_reported:
        calc_and(&[standalone("calc-code", "calc", "")])
        => Problem::EndsWith("Task calc-code: clashes with the Task created for template \
            \"code\" of Feature calc");
    a_task_of_a_broken_feature_is_not_reported_as_orphaned:
        format!(
            "{}{}",
            feature("calc", "    - name: code\n      priority: x\n"),
            standalone("calc-docs", "calc", "")
        )
        => Problem::Contains("spec.tasks[code].priority");
    backoff_base_above_max_breaks_the_crd_rule:
        feature("hello", ONE_TASK)
            .replace("  tasks:", "  retry:\n    backoffBaseSeconds: 700\n  tasks:")
        => Problem::EndsWith("Feature hello: spec.retry: backoffBaseSeconds (700) must not \
            exceed backoffMaxSeconds (600)");
    a_command_timeout_without_a_command_breaks_the_crd_rule:
        with_verify("    agent: true\n    commandTimeoutSeconds: 120\n")
        => Problem::EndsWith("Feature hello: spec.verify: commandTimeoutSeconds and \
            outputTailBytes apply to verify.command: set command, or remove them");
    a_blank_verify_command_is_reported:
        with_verify("    command: \"  \"\n") => Problem::Contains("spec.verify.command");
    an_output_tail_beyond_what_a_result_holds_is_reported:
        with_verify("    command: make check\n    outputTailBytes: 4096\n")
        => Problem::Contains("spec.verify.outputTailBytes");
    a_wrong_type_points_at_the_line_of_the_field:
        feature("hello", "    - name: a\n    - name: b\n      priority: high\n")
        => Problem::StartsAt(":11 (document 1): ");
    a_missing_field_points_at_the_line_of_its_parent:
        feature("hello", ONE_TASK).replace("    command: [claude-agent-acp]\n", "    image: x\n")
        => Problem::At(":6 (document 1): Feature hello: spec.agent.command: is required");
    a_dag_problem_points_at_the_line_of_the_task:
        feature("hello", "    - name: a\n    - name: b\n      dependsOn: [zz]\n")
        => Problem::At(":10 (document 1): Feature hello: task \"b\" depends on unknown task \
            \"zz\"");
    a_dag_problem_of_a_standalone_task_points_at_its_document:
        calc_and(&[standalone("calc-bench", "calc", "  dependsOn: [nothing]\n")])
        => Problem::At(":11 (document 2): Feature calc: task \"calc-bench\" depends on unknown \
            task \"nothing\"");
}
