//! Label and field selectors as the API server parses them from query strings.

use serde_json::Value;

use super::errors::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector` (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        split_top_level(text)
            .into_iter()
            .map(|term| parse_label_term(term.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms.retain(|t| !t.trim().is_empty());
    terms
}

fn parse_label_term(term: &str) -> Result<LabelRequirement, ApiError> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {term:?}"));
    if let Some((key, rest)) = split_set_operator(term, " notin ") {
        return Ok(LabelRequirement::NotIn(
            key,
            parse_set(rest).ok_or_else(bad)?,
        ));
    }
    if let Some((key, rest)) = split_set_operator(term, " in ") {
        return Ok(LabelRequirement::In(key, parse_set(rest).ok_or_else(bad)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            k.trim().into(),
            v.trim().into(),
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(k.trim().into(), v.trim().into()));
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(key.trim().into()));
    }
    if term.contains([' ', '(', ')']) {
        return Err(bad());
    }
    Ok(LabelRequirement::Exists(term.into()))
}

fn split_set_operator<'a>(term: &'a str, operator: &str) -> Option<(String, &'a str)> {
    term.split_once(operator)
        .map(|(key, rest)| (key.trim().to_owned(), rest))
}

fn parse_set(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

/// A parsed `fieldSelector`: `path=value` / `path!=value` terms on dotted field paths
/// (`metadata.name`, `metadata.namespace`, `status.phase`, `spec.nodeName`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,status.phase!=Running`.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        text.split(',')
            .filter(|t| !t.trim().is_empty())
            .map(|term| {
                let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                    (p, false, v)
                } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('='))
                {
                    (p, true, v)
                } else {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector term {term:?}: expected field=value or field!=value"
                    )));
                };
                Ok((path.trim().to_owned(), equal, value.trim().to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether the object's fields satisfy the selector (a missing field reads as "").
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let pointer = format!("/{}", path.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}
