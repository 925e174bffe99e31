//! Reading Feature and Task manifests from YAML files into a validated [`Plan`].
//!
//! Each file may hold many documents (`---`). Every problem is reported, each naming the
//! file, the document (and line when known), the object and the field: unknown
//! kind/apiVersion, missing `metadata.name`, fields of the wrong type, unknown fields
//! (checked against the CRD schema, so a typo such as `dependOn` is caught even inside
//! flattened fields), broken CRD rules, a Task whose `featureRef` names no Feature in the
//! given files, and every problem of each feature's task DAG. See [`plan`] for task IDs.

pub mod answer;
mod document;
mod error;
mod path;
pub(crate) mod plan;
mod rules;
mod schema;

use std::path::Path;

pub use document::{LoadOptions, Manifests, Sourced, load_files, load_str};
pub use error::{Location, ManifestError, ManifestErrors, ObjectRef};
pub use path::{FieldPath, Segment};
pub use plan::{FeatureManifest, Plan, PlannedTask, TaskOrigin};

/// Reads the files and builds the plan of every feature in them; every problem found
/// in any file is returned.
pub fn load_plan<P: AsRef<Path>>(paths: &[P]) -> Result<Plan, ManifestErrors> {
    load_plan_with(paths, &LoadOptions::default())
}

/// [`load_plan`] with options (a local run, an agent from the command line).
pub fn load_plan_with<P: AsRef<Path>>(
    paths: &[P],
    options: &LoadOptions,
) -> Result<Plan, ManifestErrors> {
    let (manifests, mut errors) = load_files(paths, options);
    let unreadable_features = errors
        .iter()
        .filter_map(|error| match error {
            ManifestError::Field { object, .. } if object.kind == "Feature" => {
                Some(object.name.clone())
            }
            _ => None,
        })
        .collect();
    match plan::build(manifests, &unreadable_features) {
        Ok(plan) if errors.is_empty() => Ok(plan),
        Ok(_) => Err(ManifestErrors(errors)),
        Err(mut more) => {
            errors.append(&mut more);
            Err(ManifestErrors(errors))
        }
    }
}
