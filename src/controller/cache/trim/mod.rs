//! What the controller's caches keep of each object: only what a reconcile reads from
//! them. The watch streams trim every object before the store holds it, so 10,000 Tasks and
//! their finished agent Pods fit in a small controller. A field dropped here is read by no
//! reconcile from the cache (a live read fetches what a rare step needs). One file per
//! kind: [`feature`] (and its templates' applied hashes), [`pod`] (a
//! [`crate::controller::plan::cached::CachedPod`], and when the Task has recorded a Pod's
//! attempt); a claim Lease loses only what no cached object keeps ([`trim_metadata`]). A
//! Task is cached as a type of its own that holds only what is kept
//! ([`crate::controller::plan::cached::CachedTask`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

mod feature;
mod pod;

pub use feature::{TEMPLATE_HASHES_ANNOTATION, is_whole, template_hashes, trim_feature};
pub use pod::{is_recorded, trim_pod};

/// `kubectl apply`'s copy of the applied object: nothing the controller reads.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Objects per page of a list the controller reads (its watches' first lists included).
pub const LIST_PAGE: u32 = 500;

/// Features per page of the Feature watch's lists: a Feature with its prompt texts is up
/// to 1.5 MiB, held whole until it is trimmed.
pub const FEATURE_LIST_PAGE: u32 = 10;

/// What no cached object keeps: managedFields (they name every field of the object) and
/// kubectl's last-applied copy.
pub fn trim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// A string map of `entries` (labels, annotations), for the tests' objects.
#[cfg(test)]
fn string_map(entries: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, String>> {
    Some(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}
