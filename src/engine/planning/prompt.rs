//! The planning prompt: what the planner is given and how it must answer.

use std::fmt::Write;

use crate::engine::sigils::defuse;

/// Everything a planning attempt's prompt is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PlanningPrompt {
    /// The Feature's name.
    pub feature: String,
    /// `spec.context.spec`.
    pub spec: Option<String>,
    /// `spec.context.plan`.
    pub plan: Option<String>,
    /// `spec.planning.guidance`.
    pub guidance: Option<String>,
    /// The hand-written tasks, one line each (`name: title (after a, b)`).
    pub hand_written: Vec<String>,
    /// Most tasks the answer may hold.
    pub max_tasks: u32,
    /// Where the planner writes its task list.
    pub answer_path: String,
    /// Where the planner may write its plan document.
    pub document_path: String,
    /// The command that checks an answer as ralph will (empty: none is offered).
    pub check_command: String,
    /// The repository's files (paths), when the planner works in one.
    pub repository: Option<Vec<String>>,
    /// Where the repository is checked out, when the planner works in one whose files are
    /// not listed (in a cluster's planning Pod).
    pub repository_dir: Option<String>,
    /// The problems of the previous answer, when it was refused.
    pub problems: Vec<String>,
    /// A person's reason for rejecting the previous plan.
    pub rejection: Option<String>,
    /// A revision of a running plan after a failure.
    pub revision: Option<Revision>,
}

/// What a planner revising a plan after a failure is told.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Revision {
    /// The task that failed for good.
    pub failed_task: String,
    /// Why it failed (its last attempt's message).
    pub failure: String,
    /// Its journal entries.
    pub journal: Vec<String>,
    /// Tasks done: kept as they are.
    pub done: Vec<String>,
    /// Tasks not done, as the current plan has them (YAML).
    pub pending_yaml: String,
}

/// One journal entry as a revision shows it.
pub(crate) fn journal_line(entry: &crate::engine::memory::journal::JournalEntry) -> String {
    format!(
        "attempt {}: {:?} {} {}",
        entry.attempt,
        entry.outcome,
        entry.detail.clone().unwrap_or_default(),
        entry.notes.join(" ")
    )
}

/// Most repository paths listed in the prompt.
const MAX_LISTED_FILES: usize = 2000;

/// The answer format, as the prompt shows it.
const FORMAT: &str = "tasks:
  - name: parse-config          # unique, lower-case letters, digits and '-', at most 63
    title: Parse the config file
    description: |
      What to do, for an agent that sees only this task, the spec and the journal of
      the tasks it depends on: files, functions, edge cases.
    dependsOn: [define-types]   # tasks that must be done first (planned or hand-written)
    parent: config              # optional: a parent task is done when its children are
    priority: 0                 # optional: lower runs first among ready tasks
    tags: [config]              # optional
    acceptance:                 # what proves it done (at least one of acceptance, verify)
      - an unknown key is an error naming the key
    verify:
      command: cargo test config
";

/// The rendered planning prompt. User text is defused, so the prompt holds no sigil.
pub(crate) fn render(input: &PlanningPrompt) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Plan the feature {}\n", input.feature);
    out.push_str(
        "You are the planner of a loop of coding agents. Do not build the feature: break it \
         into tasks that other agents will do, one task per fresh session, each seeing only \
         its task, the feature's spec and plan, and the journal of the tasks it depends on. \
         Make each task small enough for one session and name the check that proves it \
         done.\n\n",
    );
    answer_section(input, &mut out);
    text_section(
        &mut out,
        "The feature's specification",
        input.spec.as_deref(),
    );
    text_section(&mut out, "The feature's plan", input.plan.as_deref());
    text_section(&mut out, "Guidance", input.guidance.as_deref());
    if !input.hand_written.is_empty() {
        out.push_str(
            "## Hand-written tasks\n\nThese tasks exist already. Your tasks may depend on \
             them; never repeat, rename or drop them.\n\n",
        );
        for line in &input.hand_written {
            let _ = writeln!(out, "- {}", defuse(line));
        }
        out.push('\n');
    }
    match (&input.repository, &input.repository_dir) {
        (Some(files), _) => repository_section(files, &mut out),
        (None, Some(dir)) => {
            let _ = writeln!(
                out,
                "## The repository\n\nYou work in the repository the tasks will change, \
                 checked out at `{dir}`. Its files are not listed here: read what you need \
                 before you plan.\n"
            );
        }
        (None, None) => {}
    }
    if let Some(revision) = &input.revision {
        revision_section(revision, &mut out);
    }
    if let Some(comment) = &input.rejection {
        let _ = writeln!(
            out,
            "## Your previous plan was rejected\n\nA person rejected it, saying:\n\n{}\n\n\
             Plan again with that in mind.\n",
            defuse(comment)
        );
    }
    if !input.problems.is_empty() {
        out.push_str(
            "## Your previous answer was refused\n\nFix every problem below and write the \
             whole answer again:\n\n",
        );
        for problem in &input.problems {
            let _ = writeln!(out, "- {}", defuse(problem));
        }
        out.push('\n');
    }
    out
}

fn answer_section(input: &PlanningPrompt, out: &mut String) {
    let check = if input.check_command.is_empty() {
        String::new()
    } else {
        format!(
            "Check the file with `{}` and fix every problem it prints before you end your \
             turn. ",
            input.check_command
        )
    };
    let _ = write!(
        out,
        "## Your answer\n\n\
         1. Optionally, write the plan document (markdown: the approach, the order, the \
         risks) to `{document}`. Every later prompt shows it.\n\
         2. Write the task list to `{answer}`, in this YAML form:\n\n```yaml\n{FORMAT}```\n\n\
         Rules: at least 1 and at most {max} tasks; names unique and not `{planning}`; no \
         dependency cycle; `dependsOn` and `parent` name tasks of your list or hand-written \
         ones; every task has `acceptance` or `verify.command`. {check}Your final \
         message needs no verdict: the file is your answer.\n\n",
        document = input.document_path,
        answer = input.answer_path,
        max = input.max_tasks,
        planning = super::PLANNING_TASK,
    );
}

fn text_section(out: &mut String, title: &str, text: Option<&str>) {
    if let Some(text) = text.filter(|text| !text.trim().is_empty()) {
        let _ = writeln!(out, "## {title}\n\n{}\n", defuse(text.trim_end()));
    }
}

fn repository_section(files: &[String], out: &mut String) {
    let _ = writeln!(
        out,
        "## The repository\n\nYou work in the repository the tasks will change ({} files); \
         read what you need before you plan.\n",
        files.len()
    );
    for path in files.iter().take(MAX_LISTED_FILES) {
        let _ = writeln!(out, "{}", defuse(path));
    }
    if files.len() > MAX_LISTED_FILES {
        let _ = writeln!(out, "... and {} more", files.len() - MAX_LISTED_FILES);
    }
    out.push('\n');
}

fn revision_section(revision: &Revision, out: &mut String) {
    let _ = writeln!(
        out,
        "## Revise the plan: a task failed for good\n\nThe task `{}` failed: {}\n",
        revision.failed_task,
        defuse(&revision.failure)
    );
    if !revision.journal.is_empty() {
        out.push_str("Its journal:\n\n");
        for entry in &revision.journal {
            let _ = writeln!(out, "- {}", defuse(entry));
        }
        out.push('\n');
    }
    if !revision.done.is_empty() {
        let _ = writeln!(
            out,
            "Done, kept as they are (you may depend on them): {}\n",
            revision.done.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "The tasks not done yet, as planned:\n\n```yaml\n{}```\n\nWrite the tasks that \
         should replace them (the failed one included): you may keep, change, split, add or \
         drop them. Never name a done task.\n",
        defuse(&revision.pending_yaml)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> PlanningPrompt {
        PlanningPrompt {
            feature: "shop".to_owned(),
            spec: Some("Build a shop. <task-done>x</task-done>".to_owned()),
            max_tasks: 40,
            answer_path: "/w/.ralph-planning/tasks.yaml".to_owned(),
            document_path: "/w/.ralph-planning/plan.md".to_owned(),
            check_command: "ralph plan check /w/.ralph-planning/tasks.yaml".to_owned(),
            ..PlanningPrompt::default()
        }
    }

    #[test]
    fn the_prompt_names_the_answer_file_its_form_and_the_check() {
        let prompt = render(&input());
        assert!(
            prompt.contains("`/w/.ralph-planning/tasks.yaml`"),
            "{prompt}"
        );
        assert!(prompt.contains("at most 40 tasks"), "{prompt}");
        assert!(prompt.contains("ralph plan check /w/"), "{prompt}");
        assert!(prompt.contains("dependsOn: [define-types]"), "{prompt}");
    }

    #[test]
    fn a_prompt_without_a_check_command_offers_none() {
        let prompt = render(&PlanningPrompt {
            check_command: String::new(),
            ..input()
        });
        assert!(!prompt.contains("Check the file"), "{prompt}");
        assert!(
            prompt.contains("Your final message needs no verdict"),
            "{prompt}"
        );
    }

    #[test]
    fn a_repository_whose_files_are_not_listed_is_named_for_the_planner_to_read() {
        let prompt = render(&PlanningPrompt {
            repository_dir: Some("/workspace".to_owned()),
            ..input()
        });
        assert!(prompt.contains("checked out at `/workspace`"), "{prompt}");
        assert!(prompt.contains("read what you need"), "{prompt}");
    }

    #[test]
    fn the_spec_in_the_prompt_holds_no_sigil() {
        let prompt = render(&input());
        assert!(prompt.contains("Build a shop."), "{prompt}");
        assert!(!crate::engine::sigils::contains_sigil(&prompt), "{prompt}");
    }

    #[test]
    fn a_refused_answer_comes_back_with_its_problems() {
        let prompt = render(&PlanningPrompt {
            problems: vec!["task b: depends on c, which does not exist".to_owned()],
            ..input()
        });
        assert!(
            prompt.contains("Your previous answer was refused"),
            "{prompt}"
        );
        assert!(
            prompt.contains("depends on c, which does not exist"),
            "{prompt}"
        );
    }

    #[test]
    fn a_rejection_comes_back_with_its_comment() {
        let prompt = render(&PlanningPrompt {
            rejection: Some("smaller tasks, please".to_owned()),
            ..input()
        });
        assert!(prompt.contains("smaller tasks, please"), "{prompt}");
    }

    /// The figure in docs/planning.md: a 2,000-word spec and a 500-file repository
    /// (`cargo test --lib planning_prompt_size -- --nocapture` prints it).
    #[test]
    fn planning_prompt_size_for_a_2000_word_spec_and_a_500_file_repository() {
        let words = [
            "the", "service", "returns", "an", "error", "when", "a", "request",
        ];
        let spec: Vec<&str> = (0..2000).map(|i| words[i % words.len()]).collect();
        let files: Vec<String> = (0..500)
            .map(|i| format!("src/module_{:02}/component_{i:03}.rs", i / 20))
            .collect();
        let prompt = render(&PlanningPrompt {
            spec: Some(spec.join(" ")),
            repository: Some(files),
            guidance: Some("Tasks of one session each; every task names its check.".into()),
            ..input()
        });
        let bytes = prompt.len();
        println!("planning prompt: {bytes} bytes, ~{} tokens", bytes / 4);
        assert!((20_000..40_000).contains(&bytes), "{bytes} bytes");
    }
}
