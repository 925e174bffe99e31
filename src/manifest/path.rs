//! Field paths inside a manifest (`spec.tasks[write-test].dependsOn`), and finding the line
//! a path points at in the document's text.

use std::fmt;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A mapping key.
    Key(String),
    /// A list entry: its index, and its `name` when it has one.
    Item {
        /// Index in the list, from 0.
        index: usize,
        /// The entry's `name` field.
        name: Option<String>,
    },
}

/// Where a field is in an object, e.g. `spec.tasks[write-test].dependsOn`. A list entry
/// with a `name` is shown by name, otherwise by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<Segment>);

impl FieldPath {
    /// The path of a top-level field.
    pub fn root(key: &str) -> Self {
        FieldPath(vec![Segment::Key(key.to_owned())])
    }

    /// This path followed by a mapping key.
    pub fn key(&self, key: &str) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Key(key.to_owned()));
        path
    }

    /// This path followed by a list entry.
    pub fn item(&self, index: usize, name: Option<&str>) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Item {
            index,
            name: name.filter(|n| !n.is_empty()).map(str::to_owned),
        });
        path
    }

    /// The path without its last step.
    pub fn parent(&self) -> Self {
        let mut path = self.clone();
        path.0.pop();
        path
    }

    /// The last mapping key of the path.
    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(Segment::Key(key)) => Some(key),
            _ => None,
        }
    }

    /// The 0-based index of the line of `text` (one block-style YAML document) holding
    /// this path's field, or else the closest enclosing field that can be found (flow
    /// style `[a, b]` and `{k: v}` is not looked into); None when not even the first
    /// step is found.
    pub fn locate(&self, text: &str) -> Option<usize> {
        let lines: Vec<&str> = text.lines().collect();
        let mut block = Block {
            start: 0,
            column: 0,
            item: false,
        };
        let mut found = None;
        for segment in &self.0 {
            let step = match segment {
                Segment::Key(key) => find_key(&lines, &block, key).map(|line| (line, line)),
                Segment::Item {
                    name: Some(name), ..
                } => find_named_item(&lines, &block, name),
                Segment::Item { index, name: None } => find_nth_item(&lines, &block, *index),
            };
            let Some((line, item_start)) = step else {
                break;
            };
            found = Some(line);
            let next = match segment {
                Segment::Key(_) => child_block(&lines, line),
                Segment::Item { .. } => Some(Block {
                    start: item_start,
                    column: block.column,
                    item: true,
                }),
            };
            match next {
                Some(next) => block = next,
                None => break,
            }
        }
        found
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if index == 0 => write!(f, "{key}")?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Item {
                    name: Some(name), ..
                } => write!(f, "[{name}]")?,
                Segment::Item { index, name: None } => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// The lines holding the keys of one mapping: from `start`, keys at exactly `column`.
/// For a list entry (`item`), the block ends at the next entry's `- ` line.
#[derive(Debug, Clone, Copy)]
struct Block {
    start: usize,
    column: usize,
    item: bool,
}

/// A content line's key column and text, after any `- ` list markers; None for blank and
/// comment lines.
fn key_part(line: &str) -> Option<(usize, &str)> {
    let mut column = line.len() - line.trim_start().len();
    let mut rest = line.trim_start();
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    while let Some(after) = rest.strip_prefix("- ") {
        let trimmed = after.trim_start();
        column += rest.len() - trimmed.len();
        rest = trimmed;
    }
    Some((column, rest))
}

fn is_list_entry(line: &str) -> bool {
    line.trim_start().starts_with("- ")
}

fn is_key(rest: &str, key: &str) -> bool {
    let quoted = [key.to_owned(), format!("\"{key}\""), format!("'{key}'")];
    quoted.iter().any(|candidate| {
        rest.strip_prefix(candidate.as_str())
            .is_some_and(|after| after.trim_start().starts_with(':'))
    })
}

/// The line of `key:` in `block`.
fn find_key(lines: &[&str], block: &Block, key: &str) -> Option<usize> {
    for (index, line) in lines.iter().enumerate().skip(block.start) {
        let Some((column, rest)) = key_part(line) else {
            continue;
        };
        if column < block.column
            || (block.item && index > block.start && column == block.column && is_list_entry(line))
        {
            return None;
        }
        if column == block.column && is_key(rest, key) {
            return Some(index);
        }
    }
    None
}

/// The block of the value of the key on line `line`: the mapping or list below it.
fn child_block(lines: &[&str], line: usize) -> Option<Block> {
    let (parent_column, _) = key_part(lines[line])?;
    let parent_indent = lines[line].len() - lines[line].trim_start().len();
    let (index, column) = lines
        .iter()
        .enumerate()
        .skip(line + 1)
        .find_map(|(index, text)| key_part(text).map(|(column, _)| (index, column)))?;
    let nested = column > parent_column
        || (is_list_entry(lines[index])
            && lines[index].len() - lines[index].trim_start().len() >= parent_indent);
    nested.then_some(Block {
        start: index,
        column,
        item: false,
    })
}

/// In a list block, the entry number `n` (from 0): its first line, twice (the entry's
/// line and where it starts).
fn find_nth_item(lines: &[&str], block: &Block, n: usize) -> Option<(usize, usize)> {
    let mut seen = 0;
    for (index, line) in lines.iter().enumerate().skip(block.start) {
        let Some((column, _)) = key_part(line) else {
            continue;
        };
        if column < block.column {
            return None;
        }
        if column == block.column && is_list_entry(line) {
            if seen == n {
                return Some((index, index));
            }
            seen += 1;
        }
    }
    None
}

/// In a list block, the entry whose `name:` is `name`: the line of that key and the line
/// the entry starts on.
fn find_named_item(lines: &[&str], block: &Block, name: &str) -> Option<(usize, usize)> {
    let mut item_start = block.start;
    for (index, line) in lines.iter().enumerate().skip(block.start) {
        let Some((column, rest)) = key_part(line) else {
            continue;
        };
        if column < block.column {
            return None;
        }
        if column != block.column {
            continue;
        }
        if is_list_entry(line) {
            item_start = index;
        }
        if is_key(rest, "name") {
            let value = rest
                .split_once(':')
                .map(|(_, value)| value.split(" #").next().unwrap_or("").trim())
                .map(|value| value.trim_matches(|c| c == '"' || c == '\''));
            if value == Some(name) {
                return Some((index, item_start));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
apiVersion: ralph.dev/v1alpha1
kind: Feature
metadata:
  name: hello
spec:
  agent:
    command: [x]
    env:
      - name: A
        value: b
  tasks:
    - name: write
      priority: high
    - name: test
      dependsOn: [write]
      priority: 2
  parallelism: 2
";

    fn spec() -> FieldPath {
        FieldPath::root("spec")
    }

    #[test]
    fn display_shows_named_entries_by_name_and_others_by_index() {
        let path = spec()
            .key("tasks")
            .item(1, Some("test"))
            .key("dependsOn")
            .item(0, None);
        assert_eq!(path.to_string(), "spec.tasks[test].dependsOn[0]");
    }

    #[test]
    fn locate_finds_a_top_level_key() {
        assert_eq!(FieldPath::root("kind").locate(DOC), Some(1));
    }

    #[test]
    fn locate_finds_a_field_of_a_named_list_entry() {
        let path = spec().key("tasks").item(1, Some("test")).key("priority");
        assert_eq!(path.locate(DOC), Some(15));
    }

    #[test]
    fn locate_does_not_take_a_field_of_the_next_entry() {
        let path = spec().key("tasks").item(0, Some("write")).key("dependsOn");
        assert_eq!(path.locate(DOC), Some(11), "falls back to the entry");
    }

    #[test]
    fn locate_finds_the_entry_itself_at_its_name() {
        let path = spec().key("agent").key("env").item(0, Some("A"));
        assert_eq!(path.locate(DOC), Some(8));
    }

    #[test]
    fn locate_finds_a_key_after_a_nested_block() {
        assert_eq!(spec().key("parallelism").locate(DOC), Some(16));
    }

    #[test]
    fn locate_does_not_find_metadata_name_under_spec() {
        assert_eq!(
            spec().key("name").locate(DOC),
            Some(4),
            "falls back to spec"
        );
    }

    #[test]
    fn locate_finds_an_entry_by_index() {
        let doc = "spec:\n  command:\n    - a\n    - b\n";
        assert_eq!(spec().key("command").item(1, None).locate(doc), Some(3));
    }

    #[test]
    fn locate_falls_back_to_a_flow_list_for_its_entries() {
        assert_eq!(
            spec().key("agent").key("command").item(0, None).locate(DOC),
            Some(6)
        );
    }

    #[test]
    fn locate_finds_nothing_when_the_first_step_is_missing() {
        assert_eq!(FieldPath::root("status").locate(DOC), None);
    }

    #[test]
    fn locate_finds_entries_of_a_list_at_the_key_indentation() {
        let doc = "spec:\n  tasks:\n  - name: a\n    priority: 1\n  - name: b\n    priority: 2\n";
        let path = spec().key("tasks").item(1, Some("b")).key("priority");
        assert_eq!(path.locate(doc), Some(5));
    }

    #[test]
    fn locate_finds_a_key_written_before_the_name_of_its_entry() {
        let doc = "spec:\n  tasks:\n    - title: x\n      name: a\n";
        let path = spec().key("tasks").item(0, Some("a")).key("title");
        assert_eq!(path.locate(doc), Some(2));
    }

    #[test]
    fn locate_falls_back_to_the_outer_field_in_flow_style() {
        let doc = "kind: X\nspec: {tasks: [{name: a, priority: x}]}\n";
        let path = spec().key("tasks").item(0, Some("a")).key("priority");
        assert_eq!(path.locate(doc), Some(1));
    }
}
