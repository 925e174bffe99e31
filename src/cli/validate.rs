//! `ralph validate`: checks Feature/Task manifests and prints each feature's plan as a tree.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use super::exit::Exit;
use crate::manifest::{FeatureManifest, Plan, TaskOrigin, load_plan_with};

/// Options of `ralph validate`.
#[derive(Debug, clap::Args)]
#[command(after_help = Exit::table())]
pub struct Args {
    /// Manifest files (YAML, one or more documents each) holding Features and Tasks.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The agent command `ralph run --agent` will give: a Feature may then leave out
    /// `spec.agent`, as for `ralph run`.
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
}

/// Runs `ralph validate`: exit 0 and the plan on stdout when every file is valid; exit 3
/// (invalid input, as `ralph run`) and every problem on stderr otherwise.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = crate::manifest::LoadOptions {
        agent_from_command_line: args.agent.is_some(),
        local: false,
    };
    match load_plan_with(&args.files, &options) {
        Ok(plan) => {
            print!("{}", render(&plan));
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            for error in &errors.0 {
                eprintln!("error: {error}");
            }
            let count = errors.0.len();
            eprintln!(
                "{count} problem{} found; nothing is valid until all are fixed",
                if count == 1 { "" } else { "s" }
            );
            Ok(Exit::InvalidInput.into())
        }
    }
}

/// The plan as text: per feature a header, then its tasks as a tree (subtasks indented
/// under their parent). Ready tasks carry `ready #N` (N = run order) and come first
/// among their siblings; a parent comes as early as its earliest ready subtask.
pub(crate) fn render(plan: &Plan) -> String {
    let mut out = String::new();
    for (index, feature) in plan.features.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        render_feature(feature, &mut out);
    }
    out
}

fn render_feature(feature: &FeatureManifest, out: &mut String) {
    let ready: HashMap<&str, usize> = feature
        .dag
        .ready()
        .enumerate()
        .map(|(rank, id)| (id, rank + 1))
        .collect();
    let _ = writeln!(
        out,
        "Feature {} ({}): {} task{}, {} ready now",
        feature.name(),
        feature.location.file.display(),
        feature.tasks.len(),
        if feature.tasks.len() == 1 { "" } else { "s" },
        ready.len()
    );
    if let Some(planning) = &feature.feature.spec.planning {
        let _ = writeln!(
            out,
            "  (spec.planning: `ralph run` plans up to {} more tasks from the spec first; \
             docs/planning.md)",
            planning.max_tasks
        );
    }
    if feature.tasks.is_empty() && feature.feature.spec.planning.is_none() {
        let _ = writeln!(
            out,
            "  (no tasks: the feature would end with outcome NoPlan)"
        );
        return;
    }
    if feature.tasks.is_empty() {
        return;
    }
    let tree = Tree::new(feature, &ready);
    let width = tree.name_width();
    for root in tree.sorted(tree.roots.clone()) {
        tree.render(root, 1, width, out);
    }
}

/// The tasks of one feature, by index, with their children and ready ranks.
struct Tree<'a> {
    feature: &'a FeatureManifest,
    ready: &'a HashMap<&'a str, usize>,
    roots: Vec<usize>,
    children: Vec<Vec<usize>>,
}

impl<'a> Tree<'a> {
    fn new(feature: &'a FeatureManifest, ready: &'a HashMap<&'a str, usize>) -> Self {
        let index: HashMap<&str, usize> = feature
            .tasks
            .iter()
            .enumerate()
            .map(|(i, task)| (task.id.as_str(), i))
            .collect();
        let mut roots = Vec::new();
        let mut children = vec![Vec::new(); feature.tasks.len()];
        for (i, task) in feature.tasks.iter().enumerate() {
            match task.fields.parent.as_deref().and_then(|p| index.get(p)) {
                Some(&parent) => children[parent].push(i),
                None => roots.push(i),
            }
        }
        Tree {
            feature,
            ready,
            roots,
            children,
        }
    }

    /// The earliest ready rank in the subtree of `task`.
    fn first_ready(&self, task: usize) -> Option<usize> {
        let own = self
            .ready
            .get(self.feature.tasks[task].id.as_str())
            .copied();
        self.children[task]
            .iter()
            .filter_map(|&child| self.first_ready(child))
            .chain(own)
            .min()
    }

    fn sorted(&self, mut tasks: Vec<usize>) -> Vec<usize> {
        tasks.sort_by_key(|&task| (self.first_ready(task).unwrap_or(usize::MAX), task));
        tasks
    }

    fn name_width(&self) -> usize {
        fn width(tree: &Tree<'_>, task: usize, depth: usize) -> usize {
            let own = 2 * depth + tree.feature.tasks[task].id.len();
            tree.children[task]
                .iter()
                .map(|&child| width(tree, child, depth + 1))
                .fold(own, usize::max)
        }
        self.roots
            .iter()
            .map(|&root| width(self, root, 1))
            .max()
            .unwrap_or(0)
    }

    fn render(&self, task: usize, depth: usize, width: usize, out: &mut String) {
        let planned = &self.feature.tasks[task];
        let label = format!("{}{}", "  ".repeat(depth), planned.id);
        let _ = write!(out, "{label:<width$}  priority {}", planned.fields.priority);
        if !planned.fields.depends_on.is_empty() {
            let _ = write!(out, "  dependsOn: {}", planned.fields.depends_on.join(", "));
        }
        if let TaskOrigin::Standalone(_) = planned.origin {
            let _ = write!(out, "  (Task {})", planned.object_name);
        }
        if let Some(rank) = self.ready.get(planned.id.as_str()) {
            let _ = write!(out, "  <- ready #{rank}");
        }
        if !planned.fields.title.is_empty() {
            let _ = write!(out, "  \"{}\"", planned.fields.title);
        }
        out.push('\n');
        for child in self.sorted(self.children[task].clone()) {
            self.render(child, depth + 1, width, out);
        }
    }
}
