//! Errors of manifest loading: each names the file, the document and the object, and
//! where possible the line and the field.

use std::fmt;
use std::path::PathBuf;

use super::path::FieldPath;
use crate::engine::dag::DagError;
use crate::engine::dag::write_one_per_line;

/// Where in the input a problem is: a file, a document in it, and a line when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The manifest file, as given.
    pub file: PathBuf,
    /// Index of the YAML document in the file, from 1.
    pub document: usize,
    /// Line in the file, from 1: of the problem when known, else where the document starts.
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} (document {})",
            self.file.display(),
            self.line,
            self.document
        )
    }
}

/// A Feature or a Task, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// `Feature` or `Task`.
    pub kind: &'static str,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// One problem found in the manifests.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file cannot be read.
    #[error("{}: cannot read the file: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no document at all.
    #[error("{}: the file holds no Feature or Task", file.display())]
    Empty {
        /// The file.
        file: PathBuf,
    },
    /// A document is not valid YAML.
    #[error("{location}: invalid YAML: {message}")]
    Syntax {
        /// Where.
        location: Location,
        /// The parser's message.
        message: String,
    },
    /// A document is not a mapping with `apiVersion`, `kind` and `metadata`.
    #[error("{location}: {message}")]
    NotAnObject {
        /// Where.
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// A document has an `apiVersion` other than `ralph.dev/v1alpha1`.
    #[error(
        "{location}: {kind}: unsupported apiVersion {found:?}, expected \"ralph.dev/v1alpha1\""
    )]
    ApiVersion {
        /// Where.
        location: Location,
        /// The document's kind.
        kind: String,
        /// The apiVersion found.
        found: String,
    },
    /// A document has a kind other than Feature or Task.
    #[error("{location}: unknown kind {found:?}, expected \"Feature\" or \"Task\"")]
    Kind {
        /// Where.
        location: Location,
        /// The kind found.
        found: String,
    },
    /// A document has no `metadata.name`.
    #[error("{location}: {kind} has no metadata.name")]
    MissingName {
        /// Where.
        location: Location,
        /// The document's kind.
        kind: &'static str,
    },
    /// A field is wrong: unknown, of the wrong type, out of range, or breaking a rule.
    #[error("{location}: {object}: {path}: {problem}")]
    Field {
        /// Where.
        location: Location,
        /// The object.
        object: ObjectRef,
        /// The field, e.g. `spec.tasks[write-test].dependOn`.
        path: FieldPath,
        /// What is wrong.
        problem: String,
    },
    /// Two objects of the same kind have the same name (in the same namespace).
    #[error("{location}: {object} is defined twice (first at {first})")]
    Duplicate {
        /// Where the second one is.
        location: Location,
        /// The object.
        object: ObjectRef,
        /// Where the first one is.
        first: Location,
    },
    /// A Task's `featureRef` names no Feature in the given files.
    #[error(
        "{location}: Task {task}: spec.featureRef: no Feature named {feature:?} in the given files"
    )]
    UnknownFeature {
        /// Where.
        location: Location,
        /// The Task's name.
        task: String,
        /// The Feature it names.
        feature: String,
    },
    /// A standalone Task has the name of the Task the controller creates for a template.
    #[error(
        "{location}: Task {task}: clashes with the Task created for template {template:?} of Feature {feature}"
    )]
    NameClash {
        /// Where.
        location: Location,
        /// The Task's name.
        task: String,
        /// The Feature.
        feature: String,
        /// The template whose Task has the same name.
        template: String,
    },
    /// The feature's task DAG is invalid (cycle, unknown or duplicate task, ...).
    #[error("{location}: Feature {feature}: {source}")]
    Dag {
        /// Where the Feature is.
        location: Location,
        /// The Feature's name.
        feature: String,
        /// The DAG problem, naming the task.
        source: DagError,
    },
}

/// Every problem found in the manifests, one per line when displayed.
#[derive(Debug, thiserror::Error)]
pub struct ManifestErrors(pub Vec<ManifestError>);

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_one_per_line(f, &self.0)
    }
}
