//! A plan in a ConfigMap (docs/planning.md): the planner's answer as the claim-keeper
//! uploads it from the planning Pod (`<attempt>-answer`, owned by the Pod), and the
//! Feature's current plan as the controller keeps it (`<feature>-plan`, owned by the
//! Feature). One layout for both: the task list and the plan document as text, gzipped into
//! `binaryData` when the text would not fit an object.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use crate::engine::planning::{DOCUMENT_FILE, TASKS_FILE};

/// Key of the plan's hash in the Feature's plan ConfigMap.
pub(crate) const HASH_KEY: &str = "hash";
/// Key of an answer ConfigMap that says why no answer could be read in the Pod.
pub(crate) const PROBLEM_KEY: &str = "problem";
/// Suffix of a gzipped file's key in `binaryData`.
const GZIP_SUFFIX: &str = ".gz";
/// Most bytes of text kept as plain `data`: an object may hold 1 MiB in all, and its
/// metadata needs room too.
pub(crate) const PLAIN_LIMIT: usize = 900 * 1024;

/// The files of a planner's answer, or of a kept plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PlanFiles {
    /// The task list (`tasks.yaml`), when one was written.
    pub(crate) tasks: Option<String>,
    /// The plan document (`plan.md`), when one was written.
    pub(crate) document: Option<String>,
}

/// Why a plan cannot be put into a ConfigMap or read from one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanMapError {
    /// Even gzipped, the plan is larger than an object may hold.
    #[error(
        "the plan is {bytes} bytes gzipped, more than an object may hold ({PLAIN_LIMIT} bytes): \
         write fewer or shorter tasks"
    )]
    TooLarge {
        /// Gzipped size.
        bytes: usize,
    },
    /// A gzipped file cannot be read back.
    #[error("ConfigMap {config_map}: {key} cannot be read: {reason}")]
    Unreadable {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: String,
        /// What went wrong.
        reason: String,
    },
}

/// A ConfigMap of `meta` holding `files` and `extra` keys (e.g. [`HASH_KEY`]): as text when
/// all of it fits [`PLAIN_LIMIT`], else the files gzipped into `binaryData`.
pub(crate) fn plan_map(
    meta: ObjectMeta,
    files: &PlanFiles,
    extra: BTreeMap<String, String>,
) -> Result<ConfigMap, PlanMapError> {
    let named = [
        (TASKS_FILE, files.tasks.as_deref()),
        (DOCUMENT_FILE, files.document.as_deref()),
    ];
    let text: usize = named.iter().filter_map(|(_, t)| t.map(str::len)).sum();
    let mut data = extra;
    let mut binary = BTreeMap::new();
    if text <= PLAIN_LIMIT {
        for (key, content) in named {
            if let Some(content) = content {
                data.insert(key.to_owned(), content.to_owned());
            }
        }
    } else {
        for (key, content) in named {
            if let Some(content) = content {
                binary.insert(format!("{key}{GZIP_SUFFIX}"), ByteString(gzip(content)));
            }
        }
        let bytes: usize = binary.values().map(|b| b.0.len()).sum();
        if bytes > PLAIN_LIMIT {
            return Err(PlanMapError::TooLarge { bytes });
        }
    }
    Ok(ConfigMap {
        metadata: meta,
        data: Some(data).filter(|d| !d.is_empty()),
        binary_data: Some(binary).filter(|b| !b.is_empty()),
        ..ConfigMap::default()
    })
}

/// The files a ConfigMap made by [`plan_map`] holds.
pub(crate) fn read_plan_map(config_map: &ConfigMap) -> Result<PlanFiles, PlanMapError> {
    Ok(PlanFiles {
        tasks: file(config_map, TASKS_FILE)?,
        document: file(config_map, DOCUMENT_FILE)?,
    })
}

/// A text key of the ConfigMap's `data` (e.g. [`HASH_KEY`], [`PROBLEM_KEY`]).
pub(crate) fn text<'a>(config_map: &'a ConfigMap, key: &str) -> Option<&'a str> {
    config_map.data.as_ref()?.get(key).map(String::as_str)
}

fn file(config_map: &ConfigMap, key: &str) -> Result<Option<String>, PlanMapError> {
    if let Some(plain) = text(config_map, key) {
        return Ok(Some(plain.to_owned()));
    }
    let gzipped = format!("{key}{GZIP_SUFFIX}");
    let Some(bytes) = config_map
        .binary_data
        .as_ref()
        .and_then(|b| b.get(&gzipped))
    else {
        return Ok(None);
    };
    gunzip(&bytes.0)
        .map(Some)
        .map_err(|reason| PlanMapError::Unreadable {
            config_map: config_map.metadata.name.clone().unwrap_or_default(),
            key: gzipped,
            reason,
        })
}

fn gzip(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(text.as_bytes());
    encoder.finish().unwrap_or_default()
}

fn gunzip(bytes: &[u8]) -> Result<String, String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("demo-plan".to_owned()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_small_plan_is_kept_as_text_and_read_back() {
        let files = PlanFiles {
            tasks: Some("tasks:\n- name: a\n".to_owned()),
            document: Some("# Plan\n".to_owned()),
        };
        let extra = BTreeMap::from([(HASH_KEY.to_owned(), "abc".to_owned())]);
        let map = plan_map(meta(), &files, extra).expect("fits");
        assert!(map.binary_data.is_none());
        assert_eq!(text(&map, HASH_KEY), Some("abc"));
        assert_eq!(read_plan_map(&map), Ok(files));
    }

    #[test]
    fn a_large_plan_is_gzipped_and_read_back() {
        let tasks: String = (0..1000)
            .map(|i| format!("- name: task-{i}\n  description: {}\n", "word ".repeat(200)))
            .collect();
        assert!(tasks.len() > PLAIN_LIMIT);
        let files = PlanFiles {
            tasks: Some(tasks),
            document: None,
        };
        let map = plan_map(meta(), &files, BTreeMap::new()).expect("fits gzipped");
        assert!(map.data.is_none());
        assert_eq!(read_plan_map(&map), Ok(files));
    }

    #[test]
    fn a_plan_too_large_even_gzipped_is_refused_with_its_size() {
        // Text that does not compress: a counter hashed into hex.
        let tasks: String = (0u64..200_000)
            .map(|i| {
                format!(
                    "{:016x}\n",
                    crate::engine::stable_hash::fnv1a(&i.to_le_bytes())
                )
            })
            .collect();
        let files = PlanFiles {
            tasks: Some(tasks),
            document: None,
        };
        let error = plan_map(meta(), &files, BTreeMap::new()).expect_err("too large");
        assert!(
            error.to_string().contains("more than an object may hold"),
            "{error}"
        );
    }
}
