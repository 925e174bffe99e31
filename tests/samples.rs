//! `kubectl apply -f config/samples/` works: every file there holds Kubernetes objects
//! that `ralph validate` accepts, and every Feature names an image holding its agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

/// The files `kubectl apply -f config/samples/` reads (it does not recurse).
fn sample_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/samples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("config/samples is readable")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no samples in {}", dir.display());
    files
}

/// Every document of a sample file, as JSON.
fn documents(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("sample is readable");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("sample is YAML"))
        .filter(|document| !document.is_null())
        .collect()
}

#[test]
fn every_sample_document_is_a_kubernetes_object() {
    for path in sample_files() {
        let documents = documents(&path);
        assert!(!documents.is_empty(), "{} is empty", path.display());
        for document in documents {
            for field in ["apiVersion", "kind"] {
                assert!(
                    document.get(field).and_then(Value::as_str).is_some(),
                    "{}: a document has no {field}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn ralph_validate_accepts_every_sample() {
    let files = sample_files();
    if let Err(errors) = ralph::manifest::load_plan(&files) {
        panic!("{errors}");
    }
}

#[test]
fn every_sample_feature_names_the_image_of_its_agent() {
    for path in sample_files() {
        for document in documents(&path) {
            if document["kind"] != "Feature" {
                continue;
            }
            let agent = &document["spec"]["agent"];
            assert!(
                agent["image"]
                    .as_str()
                    .is_some_and(|image| !image.is_empty()),
                "{}: spec.agent.image is missing",
                path.display()
            );
            if agent["image"]
                .as_str()
                .is_some_and(|i| i.starts_with("node:"))
            {
                assert_eq!(
                    agent["command"][0],
                    "npx",
                    "{}: a node image runs the agent through npx",
                    path.display()
                );
            }
        }
    }
}

/// A file of the repository.
fn repository_file(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn the_charts_notes_apply_one_sample_not_every_paid_feature() {
    let notes = repository_file("charts/ralph-operator/templates/NOTES.txt");
    let applies: Vec<&str> = notes
        .lines()
        .filter(|line| line.contains("kubectl apply"))
        .collect();
    assert!(!applies.is_empty(), "{notes}");
    for line in applies {
        assert!(
            line.trim_end().ends_with(".yaml"),
            "applies a directory: {line}"
        );
    }
}

#[test]
fn deploy_md_lists_the_controllers_configmap_verbs_as_its_rbac_grants() {
    let rbac = repository_file("config/rbac/controller.yaml");
    let rule = rbac
        .split("- apiGroups")
        .find(|rule| rule.contains("\"configmaps\""))
        .expect("a configmaps rule");
    let verbs = rule
        .lines()
        .find_map(|line| line.trim().strip_prefix("verbs:"))
        .expect("its verbs")
        .replace(['[', ']', '"'], "");
    let verbs = verbs.trim();
    let docs = repository_file("docs/deploy.md");
    let row = docs
        .lines()
        .find(|line| line.starts_with("| `configmaps` |"))
        .expect("the configmaps row of docs/deploy.md");
    assert!(row.contains(&format!("| {verbs} |")), "{row} vs {verbs}");
}
