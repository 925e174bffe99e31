//! Times as the Kubernetes API writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Unix ms as a Kubernetes time (the epoch when out of range).
pub(crate) fn time(ms: i64) -> Time {
    Time(jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}
