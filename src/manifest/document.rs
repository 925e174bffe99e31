//! Reading manifest files: YAML documents into typed Features and Tasks, checked against
//! the CRD schemas and rules.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::LazyLock;

use kube::CustomResourceExt;
use regex::Regex;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::{Location, ManifestError, ObjectRef};
use super::path::FieldPath;
use super::{rules, schema};
use crate::api::{API_VERSION, Feature, Task};

/// An object read from a manifest, with where it was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    /// The object.
    pub object: T,
    /// Its file and document.
    pub location: Location,
    /// For a Feature: the file line of each task template, by template name (when found;
    /// block-style YAML). Empty for a Task.
    pub task_lines: BTreeMap<String, usize>,
}

/// Every Feature and Task read from a set of manifest files, in file and document order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifests {
    /// The Features.
    pub features: Vec<Sourced<Feature>>,
    /// The standalone Tasks.
    pub tasks: Vec<Sourced<Task>>,
}

/// Reads every file, collecting every problem rather than stopping at the first.
pub fn load_files<P: AsRef<Path>>(
    paths: &[P],
    options: &LoadOptions,
) -> (Manifests, Vec<ManifestError>) {
    let mut manifests = Manifests::default();
    let mut errors = Vec::new();
    for path in paths {
        let path = path.as_ref();
        match std::fs::read_to_string(path) {
            Ok(text) => load_str(path, &text, options, &mut manifests, &mut errors),
            Err(source) => errors.push(ManifestError::Read {
                file: path.to_owned(),
                source,
            }),
        }
    }
    reject_duplicates(&manifests, &mut errors);
    (manifests, errors)
}

/// Reads the documents of one file's text into `manifests`, pushing problems to `errors`.
pub fn load_str(
    file: &Path,
    text: &str,
    options: &LoadOptions,
    manifests: &mut Manifests,
    errors: &mut Vec<ManifestError>,
) {
    let mut document = 0;
    for chunk in split_documents(text) {
        let parsed: Result<serde_yaml_ng::Value, _> = serde_yaml_ng::from_str(chunk.text);
        if matches!(parsed, Ok(serde_yaml_ng::Value::Null)) {
            continue;
        }
        document += 1;
        let location = |line: usize| Location {
            file: file.to_owned(),
            document,
            line,
        };
        let yaml = match parsed {
            Ok(yaml) => yaml,
            Err(error) => {
                let (line, message) = match chunk.tab_indented_line() {
                    Some(index) => (
                        chunk.first_line + index,
                        "this line is indented with a tab; YAML indentation must use spaces \
                         (replace the tab with spaces)"
                            .to_owned(),
                    ),
                    None => (
                        error
                            .location()
                            .map_or(chunk.first_line, |at| chunk.first_line + at.line() - 1),
                        strip_position(&error.to_string()),
                    ),
                };
                errors.push(ManifestError::Syntax {
                    location: location(line),
                    message,
                });
                continue;
            }
        };
        let source = Source {
            location: location(chunk.object_line()),
            text: chunk.text,
            first_line: chunk.first_line,
        };
        if let Err(mut problems) = read_object(&yaml, &source, options, manifests) {
            errors.append(&mut problems);
        }
    }
    if document == 0 {
        errors.push(ManifestError::Empty {
            file: file.to_owned(),
        });
    }
}

/// One YAML document's text and the file line it starts on.
struct Chunk<'a> {
    text: &'a str,
    first_line: usize,
}

impl Chunk<'_> {
    /// The index (from 0) of the first line whose indentation holds a tab.
    fn tab_indented_line(&self) -> Option<usize> {
        self.text.lines().position(|line| {
            let content = line.trim_start_matches([' ', '\t']);
            let indentation = &line[..line.len() - content.len()];
            indentation.contains('\t') && !content.is_empty()
        })
    }

    /// The file line of the document's first content (not a comment, blank or marker).
    fn object_line(&self) -> usize {
        self.text
            .lines()
            .position(|line| {
                let line = line.trim();
                !(line.is_empty() || line.starts_with('#') || line.starts_with("---"))
            })
            .map_or(self.first_line, |index| self.first_line + index)
    }
}

/// Splits a YAML stream at its `---` document markers (a marker line starts the document).
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut first_line = 1;
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let is_marker = line == "---"
            || line.starts_with("---\n")
            || line.starts_with("---\r")
            || line.starts_with("--- ")
            || line.starts_with("---\t");
        if is_marker && offset > start {
            chunks.push(Chunk {
                text: &text[start..offset],
                first_line,
            });
            start = offset;
            first_line = index + 1;
        } else if is_marker {
            first_line = index + 1;
        }
        offset += line.len();
    }
    chunks.push(Chunk {
        text: &text[start..],
        first_line,
    });
    chunks
}

/// Removes the YAML parser's " at line L column C" (relative to the document, not the file).
fn strip_position(message: &str) -> String {
    static POSITION: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r",? at line \d+ column \d+").ok());
    match POSITION.as_ref() {
        Some(regex) => regex.replace_all(message, "").into_owned(),
        None => message.to_owned(),
    }
}

struct Source<'a> {
    /// The document's location, at its first content line.
    location: Location,
    text: &'a str,
    /// The file line of the document's first line of text.
    first_line: usize,
}

impl Source<'_> {
    fn at(&self, line: Option<usize>) -> Location {
        Location {
            line: line.unwrap_or(self.location.line),
            ..self.location.clone()
        }
    }

    /// The location of the field at `path`, or of the document when it cannot be found.
    fn at_field(&self, path: &FieldPath) -> Location {
        self.at(path.locate(self.text).map(|index| self.first_line + index))
    }

    /// The file line of each task template of a Feature document, by name.
    fn template_lines(&self, feature: &Feature) -> BTreeMap<String, usize> {
        let tasks = FieldPath::root("spec").key("tasks");
        feature
            .spec
            .tasks
            .iter()
            .enumerate()
            .filter_map(|(index, template)| {
                let path = tasks.item(index, Some(&template.name));
                let line = path.locate(self.text)?;
                Some((template.name.clone(), self.first_line + line))
            })
            .collect()
    }
}

/// Reads one document into `manifests`, or returns its problems.
fn read_object(
    yaml: &serde_yaml_ng::Value,
    source: &Source<'_>,
    options: &LoadOptions,
    manifests: &mut Manifests,
) -> Result<(), Vec<ManifestError>> {
    let (mut value, kind) = identify(yaml, source)?;
    let Some(name) = value.pointer("/metadata/name").and_then(Value::as_str) else {
        return Err(vec![ManifestError::MissingName {
            location: source.at(None),
            kind,
        }]);
    };
    let object = ObjectRef {
        kind,
        name: name.to_owned(),
    };
    if kind == "Feature" && options.agent_from_command_line {
        stand_in_agent(&mut value);
    }
    check_schema(&value, source, &object)?;
    let broken = if kind == "Feature" {
        let feature = typed::<Feature>(value, source, &object)?;
        let broken = rules::feature_rules(&feature, &object.name);
        if broken.is_empty() {
            manifests.features.push(Sourced {
                task_lines: source.template_lines(&feature),
                object: feature,
                location: source.location.clone(),
            });
        }
        broken
    } else {
        let task = typed::<Task>(value, source, &object)?;
        let broken = rules::task_rules(&task, &object.name);
        if broken.is_empty() {
            manifests.tasks.push(Sourced {
                object: task,
                location: source.location.clone(),
                task_lines: BTreeMap::new(),
            });
        }
        broken
    };
    if broken.is_empty() {
        Ok(())
    } else {
        Err(broken
            .into_iter()
            .map(|(path, problem)| ManifestError::Field {
                location: source.at_field(&path),
                object: object.clone(),
                path,
                problem,
            })
            .collect())
    }
}

/// The document as JSON and its kind, once it is an object of a kind ralph reads
/// (`Feature`, `Task`) in ralph's API version.
fn identify(
    yaml: &serde_yaml_ng::Value,
    source: &Source<'_>,
) -> Result<(Value, &'static str), Vec<ManifestError>> {
    let not_object = |message: String| {
        vec![ManifestError::NotAnObject {
            location: source.at(None),
            message,
        }]
    };
    let value = match serde_json::to_value(yaml) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => {
            return Err(not_object(
                "expected a Feature or Task object (a mapping with apiVersion, kind, metadata and spec)"
                    .into(),
            ));
        }
        Err(error) => return Err(not_object(format!("cannot read the document: {error}"))),
    };
    let kind = match value.get("kind") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => return Err(not_object("kind must be a string".into())),
        None => return Err(not_object("the document has no kind".into())),
    };
    let kind: &'static str = match kind {
        "Feature" => "Feature",
        "Task" => "Task",
        other => {
            return Err(vec![ManifestError::Kind {
                location: source.at_field(&FieldPath::root("kind")),
                found: other.to_owned(),
            }]);
        }
    };
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    if api_version != Some(API_VERSION) {
        return Err(vec![ManifestError::ApiVersion {
            location: source.at_field(&FieldPath::root("apiVersion")),
            kind: kind.to_owned(),
            found: api_version.map_or_else(|| "<none>".to_owned(), str::to_owned),
        }]);
    }
    Ok((value, kind))
}

/// Every field that breaks the CRD's schema; for a Feature also the DAG problems that can
/// be read from its raw tasks, so all are said at once.
fn check_schema(
    value: &Value,
    source: &Source<'_>,
    object: &ObjectRef,
) -> Result<(), Vec<ManifestError>> {
    let root_schema = match object.kind {
        "Feature" => &*FEATURE_SCHEMA,
        _ => &*TASK_SCHEMA,
    };
    let violations = schema::check(value, root_schema);
    if violations.is_empty() {
        return Ok(());
    }
    let mut problems: Vec<ManifestError> = violations
        .into_iter()
        .map(|violation| ManifestError::Field {
            location: source.at_field(&violation.anchor),
            object: object.clone(),
            path: violation.path,
            problem: violation.problem,
        })
        .collect();
    if object.kind == "Feature" {
        problems.extend(raw_dag_problems(value, source, &object.name));
    }
    Err(problems)
}

/// How manifests are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The agent command comes from the command line (`ralph run --agent`): a Feature may
    /// leave out `spec.agent`.
    pub agent_from_command_line: bool,
    /// The manifests are for a local run: settings it cannot honour are errors.
    pub local: bool,
}

/// Puts a stand-in `spec.agent` into a Feature that has none (its agent comes from the
/// command line).
fn stand_in_agent(value: &mut Value) {
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("agent")
            .or_insert_with(|| json!({"command": ["--agent"]}));
    }
}

/// The DAG problems of a Feature whose fields are broken, read leniently from its
/// `spec.tasks` (name, dependsOn, parent), so they are reported together with the field
/// problems.
fn raw_dag_problems(value: &Value, source: &Source<'_>, feature: &str) -> Vec<ManifestError> {
    let Some(tasks) = value.pointer("/spec/tasks").and_then(Value::as_array) else {
        return Vec::new();
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let nodes = tasks
        .iter()
        .enumerate()
        .filter_map(|(order, task)| {
            Some(crate::engine::dag::TaskNode {
                name: text(task.get("name"))?,
                depends_on: task
                    .get("dependsOn")
                    .and_then(Value::as_array)
                    .map(|d| d.iter().filter_map(|v| text(Some(v))).collect())
                    .unwrap_or_default(),
                parent: text(task.get("parent")),
                priority: 0,
                order: order as u64,
                phase: crate::engine::dag::TaskPhase::Pending,
            })
        })
        .collect();
    // Each problem at its task's line, as `ralph run` places it once the fields are fixed.
    let tasks_path = FieldPath::root("spec").key("tasks");
    let line_of = |task: &str| {
        let index = tasks
            .iter()
            .position(|t| t.get("name").and_then(Value::as_str) == Some(task))?;
        let line = tasks_path.item(index, Some(task)).locate(source.text)?;
        Some(source.first_line + line)
    };
    match crate::engine::dag::Dag::new(nodes) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .0
            .into_iter()
            .map(|error| ManifestError::Dag {
                location: source.at(super::plan::task_of(&error).and_then(line_of)),
                feature: feature.to_owned(),
                source: error,
            })
            .collect(),
    }
}

fn typed<T: DeserializeOwned>(
    value: Value,
    source: &Source<'_>,
    object: &ObjectRef,
) -> Result<T, Vec<ManifestError>> {
    serde_json::from_value(value).map_err(|error| {
        vec![ManifestError::Field {
            location: source.at(None),
            object: object.clone(),
            path: FieldPath::root("spec"),
            problem: error.to_string(),
        }]
    })
}

/// The CRD's schema for a whole manifest object: `apiVersion`, `kind` and `metadata`
/// are allowed (checked elsewhere), and `status` is accepted and ignored.
fn manifest_schema(crd_schema: Option<Value>) -> Value {
    let mut schema = crd_schema.unwrap_or_else(|| json!({"type": "object"}));
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert("apiVersion".into(), json!({"type": "string"}));
        properties.insert("kind".into(), json!({"type": "string"}));
        properties.insert(
            "metadata".into(),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        properties.insert(
            "status".into(),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    schema
}

fn crd_schema<K: CustomResourceExt>() -> Option<Value> {
    let crd = K::crd();
    let schema = crd
        .spec
        .versions
        .first()?
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?;
    serde_json::to_value(schema).ok()
}

static FEATURE_SCHEMA: LazyLock<Value> = LazyLock::new(|| manifest_schema(crd_schema::<Feature>()));
static TASK_SCHEMA: LazyLock<Value> = LazyLock::new(|| manifest_schema(crd_schema::<Task>()));

/// Reports objects of the same kind, namespace and name defined more than once.
fn reject_duplicates(manifests: &Manifests, errors: &mut Vec<ManifestError>) {
    fn check<'a, T: kube::ResourceExt + 'a>(
        kind: &'static str,
        objects: impl Iterator<Item = &'a Sourced<T>>,
        errors: &mut Vec<ManifestError>,
    ) {
        let mut seen: HashMap<(Option<String>, String), &Location> = HashMap::new();
        for sourced in objects {
            let key = (sourced.object.namespace(), sourced.object.name_any());
            if let Some(first) = seen.get(&key) {
                errors.push(ManifestError::Duplicate {
                    location: sourced.location.clone(),
                    object: ObjectRef {
                        kind,
                        name: key.1.clone(),
                    },
                    first: (*first).clone(),
                });
            } else {
                seen.insert(key, &sourced.location);
            }
        }
    }
    check("Feature", manifests.features.iter(), errors);
    check("Task", manifests.tasks.iter(), errors);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(text: &str) -> Vec<(usize, usize)> {
        split_documents(text)
            .iter()
            .map(|chunk| (chunk.first_line, chunk.object_line()))
            .collect()
    }

    #[test]
    fn a_single_document_starts_at_line_one() {
        assert_eq!(starts("a: 1\n"), [(1, 1)]);
    }

    #[test]
    fn each_marker_line_starts_a_document() {
        assert_eq!(
            starts("a: 1\n---\nb: 2\n---\nc: 3\n"),
            [(1, 1), (2, 3), (4, 5)]
        );
    }

    #[test]
    fn a_leading_marker_does_not_make_an_empty_first_document() {
        assert_eq!(starts("---\na: 1\n"), [(1, 2)]);
    }

    #[test]
    fn the_object_line_skips_comments_and_blank_lines() {
        assert_eq!(starts("# header\n\napiVersion: v1\n"), [(1, 3)]);
    }

    #[test]
    fn dashes_inside_a_line_are_not_a_marker() {
        assert_eq!(starts("a: ---\nb: x---\n").len(), 1);
    }

    #[test]
    fn the_parser_position_is_stripped_from_messages() {
        assert_eq!(
            strip_position("mapping values are not allowed in this context at line 3 column 7"),
            "mapping values are not allowed in this context"
        );
    }
}
