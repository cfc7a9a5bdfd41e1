//! `PostgreSQL` array literals (`{1,2,NULL}`), the text a query casts to an
//! array type (`$1::text::bigint[]`).
//!
//! A batch written as one text parameter per column costs the client one
//! string each; as a list, asyncpg checks every element with `isinstance`
//! against three abstract base classes before encoding it, which cost the
//! worker about 1 µs per job in the outcome write (docs/benchmarks.md,
//! "Outcomes as array literals; a cheaper rate class check").
//!
//! Strings are always quoted, so no element is ever read as `NULL` or split
//! at a comma; inside quotes only `"` and `\` need a backslash.

use std::fmt::Display;
use std::fmt::Write as _;

/// Writes the elements of one array literal.
struct ArrayLiteral {
    out: String,
    empty: bool,
}

impl ArrayLiteral {
    fn with_capacity(elements: usize, bytes_each: usize) -> Self {
        let mut out = String::with_capacity(2 + elements * (bytes_each + 1));
        out.push('{');
        ArrayLiteral { out, empty: true }
    }

    fn separate(&mut self) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
    }

    fn null(&mut self) {
        self.separate();
        self.out.push_str("NULL");
    }

    /// A number (or anything whose text needs no quotes).
    fn number(&mut self, value: impl Display) {
        self.separate();
        write!(self.out, "{value}").expect("writing to a String cannot fail");
    }

    fn text(&mut self, value: &str) {
        self.separate();
        self.out.push('"');
        for c in value.chars() {
            if c == '"' || c == '\\' {
                self.out.push('\\');
            }
            self.out.push(c);
        }
        self.out.push('"');
    }

    fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// An array literal of numbers.
pub fn numbers<T: Display + Copy>(values: &[T]) -> String {
    let mut array = ArrayLiteral::with_capacity(values.len(), 8);
    for &value in values {
        array.number(value);
    }
    array.finish()
}

/// An array literal of numbers, some missing.
pub fn optional_numbers<T: Display + Copy>(values: &[Option<T>]) -> String {
    let mut array = ArrayLiteral::with_capacity(values.len(), 4);
    for value in values {
        match value {
            Some(value) => array.number(*value),
            None => array.null(),
        }
    }
    array.finish()
}

/// An array literal of strings, some missing.
pub fn optional_texts<S: AsRef<str>>(values: &[Option<S>]) -> String {
    let mut array = ArrayLiteral::with_capacity(values.len(), 4);
    for value in values {
        match value {
            Some(value) => array.text(value.as_ref()),
            None => array.null(),
        }
    }
    array.finish()
}

/// An array literal of strings.
pub fn texts<S: AsRef<str>>(values: &[S]) -> String {
    let mut array = ArrayLiteral::with_capacity(values.len(), 10);
    for value in values {
        array.text(value.as_ref());
    }
    array.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_bare() {
        assert_eq!(
            numbers(&[1_i64, -2, 9_007_199_254_740_993]),
            "{1,-2,9007199254740993}"
        );
        assert_eq!(numbers::<i64>(&[]), "{}");
    }

    #[test]
    fn a_missing_value_is_null() {
        assert_eq!(
            optional_numbers(&[Some(0.25_f64), None, Some(3.0)]),
            "{0.25,NULL,3}"
        );
        assert_eq!(optional_texts::<&str>(&[None]), "{NULL}");
    }

    #[test]
    fn strings_are_quoted_so_none_reads_as_null_or_splits() {
        assert_eq!(
            texts(&["NULL", "a,b", "", "{x}"]),
            r#"{"NULL","a,b","","{x}"}"#
        );
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        let json = r#"{"message":"say \"hi\" \\ bye"}"#;
        assert_eq!(
            optional_texts(&[Some(json)]),
            r#"{"{\"message\":\"say \\\"hi\\\" \\\\ bye\"}"}"#
        );
    }

    #[test]
    fn floats_keep_every_digit_without_exponents() {
        assert_eq!(
            optional_numbers(&[Some(1e-7_f64), Some(0.1 + 0.2)]),
            "{0.0000001,0.30000000000000004}"
        );
    }
}
