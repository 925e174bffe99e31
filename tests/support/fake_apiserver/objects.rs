//! Metadata helpers and the validation the real API server applies to every write.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::errors::ApiError;
use super::resources::ResourceType;

/// The current time as a Kubernetes `Time` (RFC 3339, whole seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `seconds` from now as a Kubernetes `Time`.
pub fn rfc3339_in(seconds: i64) -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random RFC 4122-shaped uid.
pub fn new_uid() -> String {
    let hex: String = (0..32)
        .map(|_| char::from_digit(rand::random_range(0..16u32), 16).unwrap_or('0'))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The five random characters the API server appends to `generateName`.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| char::from(ALPHABET[rand::random_range(0..ALPHABET.len())]))
        .collect()
}

/// `metadata` as a mutable map, created when missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("just made an object");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// A string field of `metadata`.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// `metadata.resourceVersion` parsed, if set and non-empty.
pub fn resource_version_of(object: &Value) -> Option<&str> {
    meta_str(object, "resourceVersion").filter(|rv| !rv.is_empty())
}

/// Everything except `metadata` and `status`: what `metadata.generation` tracks.
pub fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

/// Whether the object's ownerReferences name `uid`.
pub fn is_owned_by(object: &Value, uid: &str) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        })
}

/// Whether `metadata.finalizers` is non-empty.
pub fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        .expect("valid regex")
});
static LABEL_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("valid regex")
});

/// The most bytes (keys and values) an object's annotations may hold, as the real API
/// server counts them (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The most bytes a ConfigMap's or Secret's data may hold (`MaxSecretSize`, the same for
/// ConfigMaps).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The bytes of a ConfigMap's or Secret's data as the real API server counts them: each
/// key and value of `data` (a Secret's values decoded from base64, as are `binaryData`'s).
fn data_bytes(object: &Value) -> usize {
    // The length base64 text decodes to.
    let decoded = |v: &str| {
        (v.len() / 4 * 3).saturating_sub(v.bytes().rev().take_while(|b| *b == b'=').count())
    };
    let secret = object.get("kind").and_then(Value::as_str) == Some("Secret");
    let entries = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.len(), v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    let data: usize = entries("data")
        .into_iter()
        .map(|(k, v)| k + if secret { decoded(v) } else { v.len() })
        .sum();
    let binary: usize = entries("binaryData")
        .into_iter()
        .map(|(k, v)| k + decoded(v))
        .sum();
    data + binary
}

/// Checks what the real API server checks on every write: the name is a DNS subdomain,
/// label keys and values are well formed, annotations are strings under qualified keys and
/// hold at most 256 KiB, ownerReferences are complete. The error names the field.
pub fn validate(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    super::schema::validate(rt, object)?;
    let name = meta_str(object, "name").unwrap_or_default();
    let gr = rt.group_resource();
    let invalid = |field: &str, why: String| {
        Err(ApiError::invalid(
            &gr,
            name,
            format!("{} \"{name}\" is invalid: {field}: {why}", rt.kind),
        ))
    };
    if name.len() > 253 || !DNS_SUBDOMAIN.is_match(name) {
        return invalid(
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
            ),
        );
    }
    if let Some(labels) = object.pointer("/metadata/labels") {
        let Some(labels) = labels.as_object() else {
            return invalid("metadata.labels", "must be a map of strings".into());
        };
        for (key, value) in labels {
            if !valid_qualified_name(key) {
                return invalid(
                    &format!("metadata.labels[{key:?}]"),
                    "Invalid value: a label key must be a qualified name ([prefix/]name, name at most 63 characters)".into(),
                );
            }
            let Some(value) = value.as_str() else {
                return invalid(
                    &format!("metadata.labels[{key:?}]"),
                    "must be a string".into(),
                );
            };
            if value.len() > 63 || !(value.is_empty() || LABEL_NAME.is_match(value)) {
                return invalid(
                    &format!("metadata.labels[{key:?}]"),
                    format!(
                        "Invalid value: {value:?}: a label value must be at most 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
                    ),
                );
            }
        }
    }
    if let Some(annotations) = object.pointer("/metadata/annotations") {
        let Some(annotations) = annotations.as_object() else {
            return invalid("metadata.annotations", "must be a map of strings".into());
        };
        let mut bytes = 0;
        for (key, value) in annotations {
            let Some(value) = value.as_str() else {
                return invalid("metadata.annotations", "must be a map of strings".into());
            };
            // Annotation keys are checked lowercased (apimachinery ValidateAnnotations).
            if !valid_qualified_name(&key.to_lowercase()) {
                return invalid(
                    &format!("metadata.annotations[{key:?}]"),
                    "Invalid value: an annotation key must be a qualified name ([prefix/]name, name at most 63 characters)".into(),
                );
            }
            bytes += key.len() + value.len();
        }
        if bytes > MAX_ANNOTATION_BYTES {
            return invalid(
                "metadata.annotations",
                format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"),
            );
        }
    }
    if matches!(rt.kind.as_str(), "ConfigMap" | "Secret") {
        let bytes = data_bytes(object);
        if bytes > MAX_DATA_BYTES {
            return invalid(
                "[]",
                format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
            );
        }
    }
    if let Some(refs) = object.pointer("/metadata/ownerReferences") {
        let complete = refs.as_array().is_some_and(|refs| {
            refs.iter().all(|r| {
                ["apiVersion", "kind", "name", "uid"].iter().all(|f| {
                    r.get(f)
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                })
            })
        });
        if !complete {
            return invalid(
                "metadata.ownerReferences",
                "every owner reference needs apiVersion, kind, name and uid".into(),
            );
        }
    }
    Ok(())
}

fn valid_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && DNS_SUBDOMAIN.is_match(p));
    prefix_ok && name.len() <= 63 && LABEL_NAME.is_match(name)
}
