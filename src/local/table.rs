//! The text tables of `ralph status` and the run summary: a task column as wide as the
//! longest task name, aligned columns, and a free last column.

use std::fmt::Write as _;

/// How a column aligns its cells within its width.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Column {
    /// Left-aligned, padded to the width.
    Left(usize),
    /// Right-aligned, padded to the width.
    Right(usize),
}

/// A table being written row by row: two spaces after the first column and before the
/// last (unpadded) one, one space between the others.
#[derive(Debug)]
pub(crate) struct Table {
    columns: Vec<Column>,
    out: String,
}

impl Table {
    /// A table whose first column holds task names (at least as wide as `TASK`) and whose
    /// further padded columns are `columns`; every row has one more cell, the last, free one.
    pub(crate) fn of_tasks<'a>(
        names: impl IntoIterator<Item = &'a str>,
        columns: &[Column],
    ) -> Table {
        let width = names
            .into_iter()
            .map(str::len)
            .chain([4])
            .max()
            .unwrap_or(4);
        let mut all = vec![Column::Left(width)];
        all.extend_from_slice(columns);
        Table {
            columns: all,
            out: String::new(),
        }
    }

    /// Appends a line of free text (not aligned).
    pub(crate) fn line(&mut self, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// Appends a row: one cell per column, then the last cell.
    pub(crate) fn row(&mut self, cells: &[&dyn std::fmt::Display]) {
        let last = self.columns.len();
        for (index, cell) in cells.iter().enumerate() {
            let separator = match index {
                0 => "",
                1 => "  ",
                _ if index == last => "  ",
                _ => " ",
            };
            self.out.push_str(separator);
            let cell = cell.to_string();
            let _ = match self.columns.get(index) {
                Some(Column::Left(width)) => write!(self.out, "{cell:<width$}"),
                Some(Column::Right(width)) => write!(self.out, "{cell:>width$}"),
                None => write!(self.out, "{cell}"),
            };
        }
        self.out.push('\n');
    }

    /// The table's text.
    pub(crate) fn render(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_column_is_as_wide_as_the_longest_name_and_at_least_task() {
        let mut table = Table::of_tasks(["ab", "abcdef"], &[Column::Right(3)]);
        table.row(&[&"TASK", &"N", &"NOTE"]);
        table.row(&[&"ab", &7, &"x"]);
        assert_eq!(table.render(), "TASK      N  NOTE\nab        7  x\n");
    }

    #[test]
    fn inner_columns_are_separated_by_one_space() {
        let mut table = Table::of_tasks(["t"], &[Column::Left(3), Column::Right(2)]);
        table.row(&[&"t", &"a", &1, &"end"]);
        assert_eq!(table.render(), "t     a    1  end\n");
    }
}
