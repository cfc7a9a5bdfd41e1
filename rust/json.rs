//! Compact JSON writing and reading, independent of Python.
//!
//! The writer is ours: [`JsonWriter`] decides the exact text of every args
//! and metadata document, and so the canonical form behind unique keys
//! (`unique.rs`), which must never change. The reader is jiter's (the
//! parser pydantic uses): strict RFC 8259, with numbers handed over exactly
//! as written. [`parse`] walks a document with it and hands each value to a
//! [`Builder`], which builds Python objects, canonical text, or nothing.
//! Keeping both halves here lets `cargo test` cover escaping, NUL detection
//! and number handling without an interpreter.
//!
//! `PostgreSQL`'s `jsonb` refuses the NUL character (`\u0000`), so the writer
//! reports it instead of writing it, and [`find_nul`] locates one in JSON
//! produced elsewhere (for example by pydantic).

use std::fmt::Write as _;

use jiter::{Jiter, JiterError, JiterErrorType, JsonErrorType, Peek};

/// Appends compact JSON to a string.
#[derive(Default)]
pub struct JsonWriter {
    pub out: String,
}

/// Why a string could not be written.
#[derive(Debug, PartialEq, Eq)]
pub struct NulInString;

impl JsonWriter {
    pub fn with_capacity(capacity: usize) -> Self {
        JsonWriter {
            out: String::with_capacity(capacity),
        }
    }

    pub fn null(&mut self) {
        self.out.push_str("null");
    }

    pub fn bool(&mut self, value: bool) {
        self.out.push_str(if value { "true" } else { "false" });
    }

    pub fn i64(&mut self, value: i64) {
        let _ = write!(self.out, "{value}");
    }

    /// Digits of an integer too large for 64 bits, already formatted.
    pub fn raw_number(&mut self, digits: &str) {
        self.out.push_str(digits);
    }

    /// Writes a finite float so that it reads back as a float (`1.0`, not
    /// `1`). Returns false for NaN and infinities, which JSON cannot hold.
    pub fn f64(&mut self, value: f64) -> bool {
        if !value.is_finite() {
            return false;
        }
        // Debug formatting is the shortest round-trip form and keeps a
        // fractional part or an exponent.
        let _ = write!(self.out, "{value:?}");
        true
    }

    /// Writes a JSON string, or reports a NUL character.
    pub fn string(&mut self, value: &str) -> Result<(), NulInString> {
        let rollback_to = self.out.len();
        self.out.reserve(value.len() + 2);
        self.out.push('"');
        let mut start = 0;
        for (index, byte) in value.bytes().enumerate() {
            let escape = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0 => {
                    self.out.truncate(rollback_to);
                    return Err(NulInString);
                }
                0x01..=0x1f => "",
                _ => continue,
            };
            self.out.push_str(&value[start..index]);
            if escape.is_empty() {
                let _ = write!(self.out, "\\u{byte:04x}");
            } else {
                self.out.push_str(escape);
            }
            start = index + 1;
        }
        self.out.push_str(&value[start..]);
        self.out.push('"');
        Ok(())
    }

    /// JSON produced by another serializer, embedded as is.
    pub fn raw(&mut self, json: &str) {
        self.out.push_str(json);
    }

    pub fn begin_array(&mut self) {
        self.out.push('[');
    }

    pub fn end_array(&mut self) {
        self.out.push(']');
    }

    pub fn begin_object(&mut self) {
        self.out.push('{');
    }

    pub fn end_object(&mut self) {
        self.out.push('}');
    }

    pub fn comma(&mut self) {
        self.out.push(',');
    }

    pub fn colon(&mut self) {
        self.out.push(':');
    }
}

/// Writes `value` as a JSON string, replacing NUL characters (which jsonb
/// refuses) with U+FFFD. For free text the queue records itself, such as
/// error messages, where refusing would lose the record.
pub fn write_lossy_string(writer: &mut JsonWriter, value: &str) {
    if writer.string(value).is_err() {
        let cleaned = value.replace('\0', "\u{FFFD}");
        writer
            .string(&cleaned)
            .expect("NUL characters were replaced");
    }
}

/// The most decimal digits an integer may have, in both directions: the
/// writer refuses longer ones and the reader does too. It is jiter's bound
/// and `CPython`'s default `int`/`str` limit (`sys.int_info`), so every
/// stored integer can also be printed by a default interpreter; `PostgreSQL`
/// itself would take up to 131 072.
pub const MAX_INT_DIGITS: usize = 4300;

/// Where a `\u0000` escape sits in a JSON document: the path of keys and
/// indexes leading to the string that holds it (`["user", 2, "name"]`).
/// Returns `None` when the document has none. The document must be valid
/// JSON.
pub fn find_nul(json: &str) -> Option<Vec<PathPart>> {
    if !json.contains("\\u0000") {
        return None;
    }
    let mut finder = Scanner {
        stop_at_nul: true,
        path: Vec::new(),
    };
    match parse(json, &mut finder) {
        Err(ParseError::Stopped) => Some(finder.path),
        _ => None,
    }
}

/// Where an integer longer than [`MAX_INT_DIGITS`] sits in a JSON document
/// (which is otherwise valid), or `None` when it has none.
pub fn find_long_int(json: &str) -> Option<Vec<PathPart>> {
    if !has_digit_run_over(json, MAX_INT_DIGITS) {
        return None;
    }
    let mut finder = Scanner {
        stop_at_nul: false,
        path: Vec::new(),
    };
    match parse(json, &mut finder) {
        Err(ParseError::IntTooLong(_)) => Some(finder.path),
        _ => None,
    }
}

/// Whether `text` holds more than `limit` ASCII digits in a row: a cheap
/// test before looking for a long number properly.
fn has_digit_run_over(text: &str, limit: usize) -> bool {
    if text.len() <= limit {
        return false;
    }
    let mut run = 0;
    for byte in text.bytes() {
        if byte.is_ascii_digit() {
            run += 1;
            if run > limit {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// Whether `json` is one valid JSON document (`NaN`, for one, is not).
/// The JSON type a value encodes to, for "must be an object" messages.
pub fn type_name(json: &str) -> &'static str {
    match json.as_bytes().first() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

pub fn is_valid(json: &str) -> bool {
    let mut scanner = Scanner {
        stop_at_nul: false,
        path: Vec::new(),
    };
    parse(json, &mut scanner).is_ok()
}

/// One step of a path into a JSON document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathPart {
    Key(String),
    Index(usize),
}

/// Renders a path as `args.user[2].name`.
pub fn render_path(root: &str, path: &[PathPart]) -> String {
    let mut rendered = root.to_owned();
    for part in path {
        match part {
            PathPart::Key(key) => {
                rendered.push('.');
                rendered.push_str(key);
            }
            PathPart::Index(index) => {
                let _ = write!(rendered, "[{index}]");
            }
        }
    }
    rendered
}

/// A JSON number, as [`number_value`] reads its text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number<'a> {
    Int(i64),
    /// An integer outside the 64-bit range, as its decimal digits (with a
    /// leading `-` when negative).
    BigInt(&'a str),
    Float(f64),
}

/// What a number's text means: an integer when it has no fraction and no
/// exponent (of any size), else a float. `text` must already match JSON's
/// number grammar (as [`parse`] hands it over).
pub fn number_value(text: &str) -> Number<'_> {
    if text.bytes().any(|byte| matches!(byte, b'.' | b'e' | b'E')) {
        // Rust's float syntax is a superset of JSON's number grammar, and its
        // parser rounds correctly.
        Number::Float(text.parse().expect("a JSON number reads as a float"))
    } else if let Ok(value) = text.parse::<i64>() {
        Number::Int(value)
    } else {
        Number::BigInt(text)
    }
}

/// Receives the values of a JSON document as [`parse`] reads them, depth
/// first. A container is begun, filled one member at a time and ended, so a
/// builder can fill its own container type directly.
pub trait Builder {
    type Value;
    /// An array being filled.
    type Array;
    /// An object being filled.
    type Object;
    /// An object key, made before its value is read.
    type Key;

    fn null(&mut self) -> Result<Self::Value, ParseError>;
    fn bool(&mut self, value: bool) -> Result<Self::Value, ParseError>;
    /// A number exactly as written, already checked against JSON's number
    /// grammar and [`MAX_INT_DIGITS`] ([`number_value`] reads it).
    fn number(&mut self, text: &str) -> Result<Self::Value, ParseError>;
    fn string(&mut self, value: &str) -> Result<Self::Value, ParseError>;
    fn begin_array(&mut self) -> Result<Self::Array, ParseError>;
    fn push(&mut self, array: &mut Self::Array, item: Self::Value) -> Result<(), ParseError>;
    fn end_array(&mut self, array: Self::Array) -> Result<Self::Value, ParseError>;
    fn begin_object(&mut self) -> Result<Self::Object, ParseError>;
    fn key(&mut self, key: &str) -> Result<Self::Key, ParseError>;
    /// A member, in document order: a repeated key arrives again.
    fn insert(
        &mut self,
        object: &mut Self::Object,
        key: Self::Key,
        value: Self::Value,
    ) -> Result<(), ParseError>;
    fn end_object(&mut self, object: Self::Object) -> Result<Self::Value, ParseError>;
    /// Called before a member's value is read, with its key or its index
    /// (for path tracking); [`Builder::leave`] after it was read.
    fn enter(&mut self, _key: Option<&str>, _index: Option<usize>) -> Result<(), ParseError> {
        Ok(())
    }
    fn leave(&mut self) {}
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON: the byte offset where reading stopped, and why.
    Syntax { at: usize, reason: String },
    /// An integer longer than [`MAX_INT_DIGITS`], at this byte offset.
    IntTooLong(usize),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The builder asked to stop (it found what it was looking for, or it
    /// failed; it keeps the details itself).
    Stopped,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Syntax { at, reason } => write!(f, "invalid JSON at byte {at}: {reason}"),
            ParseError::IntTooLong(at) => write!(
                f,
                "invalid JSON at byte {at}: an integer of more than {MAX_INT_DIGITS} digits"
            ),
            ParseError::TooDeep => write!(f, "JSON nested more than {MAX_DEPTH} levels deep"),
            ParseError::Stopped => write!(f, "JSON reading stopped"),
        }
    }
}

impl From<JiterError> for ParseError {
    fn from(error: JiterError) -> Self {
        match error.error_type {
            JiterErrorType::JsonError(JsonErrorType::NumberOutOfRange) => {
                ParseError::IntTooLong(error.index)
            }
            reason => ParseError::Syntax {
                at: error.index,
                reason: reason.to_string(),
            },
        }
    }
}

/// Documents nested deeper than this are refused rather than risking the
/// native stack.
pub const MAX_DEPTH: usize = 512;

/// Reads one JSON document (RFC 8259, nothing more) into values made by
/// `builder`.
pub fn parse<B: Builder>(json: &str, builder: &mut B) -> Result<B::Value, ParseError> {
    let mut jiter = Jiter::new(json.as_bytes());
    let peek = jiter.peek()?;
    let value = read_value(&mut jiter, peek, builder, 0)?;
    jiter.finish()?;
    Ok(value)
}

fn read_value<B: Builder>(
    jiter: &mut Jiter<'_>,
    peek: Peek,
    builder: &mut B,
    depth: usize,
) -> Result<B::Value, ParseError> {
    match peek {
        Peek::String => {
            let text = jiter.known_str()?;
            builder.string(text)
        }
        Peek::Object => {
            let depth = descend(depth)?;
            let mut object = builder.begin_object()?;
            let mut next = jiter.known_object()?;
            while let Some(key_text) = next {
                let key = builder.key(key_text)?;
                builder.enter(Some(key_text), None)?;
                let peek = jiter.peek()?;
                let value = read_value(jiter, peek, builder, depth)?;
                builder.leave();
                builder.insert(&mut object, key, value)?;
                next = jiter.next_key()?;
            }
            builder.end_object(object)
        }
        Peek::Array => {
            let depth = descend(depth)?;
            let mut array = builder.begin_array()?;
            let mut next = jiter.known_array()?;
            let mut index = 0;
            while let Some(peek) = next {
                builder.enter(None, Some(index))?;
                let item = read_value(jiter, peek, builder, depth)?;
                builder.leave();
                builder.push(&mut array, item)?;
                index += 1;
                next = jiter.array_step()?;
            }
            builder.end_array(array)
        }
        Peek::Null => {
            jiter.known_null()?;
            builder.null()
        }
        Peek::True | Peek::False => {
            let value = jiter.known_bool(peek)?;
            builder.bool(value)
        }
        // Digits and `-` (NaN and Infinity are refused while reading).
        _ => {
            let bytes = jiter.known_number_bytes(peek)?;
            let text = std::str::from_utf8(bytes).expect("a JSON number is ASCII");
            builder.number(text)
        }
    }
}

fn descend(depth: usize) -> Result<usize, ParseError> {
    if depth >= MAX_DEPTH {
        Err(ParseError::TooDeep)
    } else {
        Ok(depth + 1)
    }
}

/// A builder that builds nothing and keeps the path to where it is; with
/// `stop_at_nul` it stops at the first string holding a NUL character.
struct Scanner {
    stop_at_nul: bool,
    path: Vec<PathPart>,
}

impl Builder for Scanner {
    type Value = ();
    type Array = ();
    type Object = ();
    type Key = ();

    fn null(&mut self) -> Result<(), ParseError> {
        Ok(())
    }
    fn bool(&mut self, _: bool) -> Result<(), ParseError> {
        Ok(())
    }
    fn number(&mut self, _: &str) -> Result<(), ParseError> {
        Ok(())
    }
    fn string(&mut self, value: &str) -> Result<(), ParseError> {
        if self.stop_at_nul && value.contains('\0') {
            Err(ParseError::Stopped)
        } else {
            Ok(())
        }
    }
    fn begin_array(&mut self) -> Result<(), ParseError> {
        Ok(())
    }
    fn push(&mut self, (): &mut (), (): ()) -> Result<(), ParseError> {
        Ok(())
    }
    fn end_array(&mut self, (): ()) -> Result<(), ParseError> {
        Ok(())
    }
    fn begin_object(&mut self) -> Result<(), ParseError> {
        Ok(())
    }
    fn key(&mut self, _: &str) -> Result<(), ParseError> {
        Ok(())
    }
    fn insert(&mut self, (): &mut (), (): (), (): ()) -> Result<(), ParseError> {
        Ok(())
    }
    fn end_object(&mut self, (): ()) -> Result<(), ParseError> {
        Ok(())
    }
    fn enter(&mut self, key: Option<&str>, index: Option<usize>) -> Result<(), ParseError> {
        if let Some(key) = key {
            if self.stop_at_nul && key.contains('\0') {
                self.path.push(PathPart::Key(key.replace('\0', "\\u0000")));
                return Err(ParseError::Stopped);
            }
            self.path.push(PathPart::Key(key.to_owned()));
        } else if let Some(index) = index {
            self.path.push(PathPart::Index(index));
        }
        Ok(())
    }
    fn leave(&mut self) {
        self.path.pop();
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the floats compared are exact by construction
mod tests {
    use super::*;

    /// A plain tree, to test the parser without Python.
    #[derive(Debug, PartialEq)]
    enum Tree {
        Null,
        Bool(bool),
        Int(i64),
        Big(String),
        Float(f64),
        Str(String),
        List(Vec<Tree>),
        Map(Vec<(String, Tree)>),
    }

    struct TreeBuilder;

    impl Builder for TreeBuilder {
        type Value = Tree;
        type Array = Vec<Tree>;
        type Object = Vec<(String, Tree)>;
        type Key = String;

        fn null(&mut self) -> Result<Tree, ParseError> {
            Ok(Tree::Null)
        }
        fn bool(&mut self, value: bool) -> Result<Tree, ParseError> {
            Ok(Tree::Bool(value))
        }
        fn number(&mut self, text: &str) -> Result<Tree, ParseError> {
            Ok(match number_value(text) {
                Number::Int(value) => Tree::Int(value),
                Number::BigInt(digits) => Tree::Big(digits.to_owned()),
                Number::Float(value) => Tree::Float(value),
            })
        }
        fn string(&mut self, value: &str) -> Result<Tree, ParseError> {
            Ok(Tree::Str(value.to_owned()))
        }
        fn begin_array(&mut self) -> Result<Vec<Tree>, ParseError> {
            Ok(Vec::new())
        }
        fn push(&mut self, array: &mut Vec<Tree>, item: Tree) -> Result<(), ParseError> {
            array.push(item);
            Ok(())
        }
        fn end_array(&mut self, array: Vec<Tree>) -> Result<Tree, ParseError> {
            Ok(Tree::List(array))
        }
        fn begin_object(&mut self) -> Result<Vec<(String, Tree)>, ParseError> {
            Ok(Vec::new())
        }
        fn key(&mut self, key: &str) -> Result<String, ParseError> {
            Ok(key.to_owned())
        }
        fn insert(
            &mut self,
            object: &mut Vec<(String, Tree)>,
            key: String,
            value: Tree,
        ) -> Result<(), ParseError> {
            object.push((key, value));
            Ok(())
        }
        fn end_object(&mut self, object: Vec<(String, Tree)>) -> Result<Tree, ParseError> {
            Ok(Tree::Map(object))
        }
    }

    fn read(json: &str) -> Result<Tree, ParseError> {
        parse(json, &mut TreeBuilder)
    }

    #[test]
    fn reads_every_kind_of_value() {
        let tree = read(r#" {"a": [1, -2.5, true, false, null], "b": "x\"y", "c": {}} "#).unwrap();
        assert_eq!(
            tree,
            Tree::Map(vec![
                (
                    "a".into(),
                    Tree::List(vec![
                        Tree::Int(1),
                        Tree::Float(-2.5),
                        Tree::Bool(true),
                        Tree::Bool(false),
                        Tree::Null
                    ])
                ),
                ("b".into(), Tree::Str("x\"y".into())),
                ("c".into(), Tree::Map(vec![])),
            ])
        );
    }

    #[test]
    fn integers_beyond_64_bits_keep_their_digits() {
        assert_eq!(
            read("123456789012345678901234567890").unwrap(),
            Tree::Big("123456789012345678901234567890".into())
        );
        assert_eq!(read("-9223372036854775808").unwrap(), Tree::Int(i64::MIN));
    }

    #[test]
    fn exponents_are_floats() {
        assert_eq!(read("1e3").unwrap(), Tree::Float(1000.0));
        assert_eq!(read("1E-2").unwrap(), Tree::Float(0.01));
    }

    #[test]
    fn unicode_escapes_and_surrogate_pairs() {
        assert_eq!(
            read(r#""\u00e9\ud83d\ude00""#).unwrap(),
            Tree::Str("é😀".into())
        );
        assert!(read(r#""\ud83d""#).is_err());
    }

    #[test]
    fn malformed_documents_are_refused() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01x",
            "tru",
            "\"a",
            "1 2",
            "-",
            "1.",
            "NaN",
            "-Infinity",
        ] {
            assert!(read(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn what_rfc_8259_refuses_is_refused() {
        // Leading zeros, and a sign inside a \u escape (Rust's integer parser
        // takes one), were read before.
        for bad in [
            "01",
            "-01",
            "00",
            "[-00]",
            r#""\u+041""#,
            r#""\u-041""#,
            r#""\u 041""#,
            r#""\x41""#,
            "+1",
            ".5",
            "1.e5",
            "1e+",
            "0x10",
            "\u{a0}1",
            "\u{c}1",
            "\u{feff}{}",
            "\"tab\tinside\"",
            r#""\udc00""#,
            r#""\ud800\u0041""#,
        ] {
            assert!(
                matches!(read(bad), Err(ParseError::Syntax { .. })),
                "{bad:?} should not parse"
            );
        }
        assert_eq!(read("-0").unwrap(), Tree::Int(0));
        assert_eq!(read(" 0e1 ").unwrap(), Tree::Float(0.0));
    }

    #[test]
    fn syntax_errors_say_where_and_why() {
        let error = read("[1, 01]").unwrap_err();
        assert!(
            matches!(error, ParseError::Syntax { at: 5, .. }),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "invalid JSON at byte 5: invalid number");
    }

    #[test]
    fn integers_are_bounded_at_4300_digits() {
        let longest = "9".repeat(MAX_INT_DIGITS);
        assert_eq!(read(&longest).unwrap(), Tree::Big(longest.clone()));
        assert_eq!(
            read(&format!("-{longest}")).unwrap(),
            Tree::Big(format!("-{longest}"))
        );
        let too_long = format!("[{longest}0]");
        assert!(matches!(read(&too_long), Err(ParseError::IntTooLong(_))));
        // The same digits inside a string are only text.
        assert!(read(&format!("\"{longest}0\"")).is_ok());
    }

    #[test]
    fn a_long_integer_is_located() {
        let long = "1".repeat(MAX_INT_DIGITS + 1);
        let json = format!(r#"{{"a": [1, {{"b": {long}}}], "s": "{long}"}}"#);
        let path = find_long_int(&json).unwrap();
        assert_eq!(render_path("args", &path), "args.a[1].b");
        assert_eq!(find_long_int(&format!(r#"{{"s": "{long}"}}"#)), None);
        assert_eq!(find_long_int(r#"{"n": 12}"#), None);
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(read(&deep), Err(ParseError::TooDeep));
        let deep_objects = r#"{"a":"#.repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
        assert_eq!(read(&deep_objects), Err(ParseError::TooDeep));
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(read(&fine).is_ok());
    }

    #[test]
    fn writer_escapes_and_refuses_nul() {
        let mut writer = JsonWriter::default();
        writer.string("a\"b\\c\nd\u{1}é").unwrap();
        assert_eq!(writer.out, r#""a\"b\\c\nd\u0001é""#);
        assert_eq!(JsonWriter::default().string("a\0b"), Err(NulInString));
    }

    #[test]
    fn lossy_strings_replace_nul() {
        let mut writer = JsonWriter::default();
        write_lossy_string(&mut writer, "a\0b");
        assert_eq!(writer.out, "\"a\u{FFFD}b\"");
    }

    #[test]
    fn floats_read_back_as_floats() {
        let mut writer = JsonWriter::default();
        assert!(writer.f64(1.0));
        writer.comma();
        assert!(writer.f64(0.1));
        writer.comma();
        assert!(writer.f64(1e300));
        assert!(!writer.f64(f64::NAN));
        assert!(!writer.f64(f64::INFINITY));
        assert_eq!(writer.out, "1.0,0.1,1e300");
        assert_eq!(read("1e300").unwrap(), Tree::Float(1e300));
    }

    #[test]
    fn validity() {
        assert!(is_valid(r#"{"a": [1, "\u0000"]}"#));
        assert!(!is_valid(r#"{"a": NaN}"#));
        assert!(!is_valid("[1,]"));
    }

    #[test]
    fn finds_the_path_to_a_nul_character() {
        let path = find_nul(r#"{"user": {"names": ["ok", "bad\u0000"]}}"#).unwrap();
        assert_eq!(render_path("args", &path), "args.user.names[1]");
        assert_eq!(find_nul(r#"{"escaped": "\\u0000"}"#), None);
        assert_eq!(find_nul(r#"{"plain": 1}"#), None);
        let key_path = find_nul(r#"{"k\u0000": 1}"#).unwrap();
        assert_eq!(render_path("metadata", &key_path), "metadata.k\\u0000");
    }
}
