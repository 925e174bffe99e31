//! Parsing of a resource URL path into what it addresses.

/// What a resource URL addresses, before it is checked against the served types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// API group; empty for `/api/v1`.
    pub group: String,
    /// Version from the URL.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Namespace from `/namespaces/{ns}/...`, if any.
    pub namespace: Option<String>,
    /// Object name, if the URL addresses one object.
    pub name: Option<String>,
    /// Subresource (`status`, ...), if any.
    pub subresource: Option<String>,
}

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`; `None` when the path is not a
/// resource path. `is_namespaced_plural` disambiguates `/api/v1/namespaces/{a}/{b}`
/// (namespace `a`'s subresource `b`, or the collection `b` in namespace `a`).
pub fn parse(path: &str, is_namespaced_plural: impl Fn(&str, &str) -> bool) -> Option<Target> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    if rest.iter().any(|s| s.is_empty()) {
        return None;
    }
    let target = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Some(Target {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
        })
    };
    match rest {
        ["namespaces", ns, plural] if is_namespaced_plural(group, plural) => {
            target(plural, Some(ns), None, None)
        }
        ["namespaces", ns, plural, name] => target(plural, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => target(plural, Some(ns), Some(name), Some(sub)),
        [plural] => target(plural, None, None, None),
        [plural, name] => target(plural, None, Some(name), None),
        [plural, name, sub] => target(plural, None, Some(name), Some(sub)),
        _ => None,
    }
}
