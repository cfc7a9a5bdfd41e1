//! Compact JSON writing and reading, independent of Python.
//!
//! The binding module walks Python objects and writes them through
//! [`JsonWriter`]; it reads JSON back by handing [`parse`] a [`Builder`]
//! that makes Python objects. Keeping both halves here lets `cargo test`
//! cover escaping, NUL detection and number handling without an
//! interpreter.
//!
//! `PostgreSQL`'s `jsonb` refuses the NUL character (`\u0000`), so the writer
//! reports it instead of writing it, and [`find_nul`] locates one in JSON
//! produced elsewhere (for example by pydantic).

use std::fmt::Write as _;

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

/// Whether `json` is one valid JSON document (`NaN`, for one, is not).
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

/// Receives the values of a JSON document as [`parse`] reads them,
/// depth first. Containers are built by the builder from the values it was
/// handed since the matching `begin_*` call.
pub trait Builder {
    type Value;
    fn null(&mut self) -> Result<Self::Value, ParseError>;
    fn bool(&mut self, value: bool) -> Result<Self::Value, ParseError>;
    fn int(&mut self, value: i64) -> Result<Self::Value, ParseError>;
    /// An integer outside the 64-bit range, as its decimal digits.
    fn big_int(&mut self, digits: &str) -> Result<Self::Value, ParseError>;
    fn float(&mut self, value: f64) -> Result<Self::Value, ParseError>;
    fn string(&mut self, value: &str) -> Result<Self::Value, ParseError>;
    /// A number exactly as written (already checked against JSON's number
    /// grammar). By default it goes to [`Builder::int`], [`Builder::big_int`]
    /// or [`Builder::float`]; a builder that keeps numbers verbatim
    /// overrides this.
    fn number(&mut self, text: &str) -> Result<Self::Value, ParseError> {
        if text.contains(['.', 'e', 'E']) {
            // Rust's float syntax is a superset of JSON's number grammar.
            let value: f64 = text.parse().expect("a JSON number reads as a float");
            self.float(value)
        } else if let Ok(value) = text.parse::<i64>() {
            self.int(value)
        } else {
            self.big_int(text)
        }
    }
    fn array(&mut self, items: Vec<Self::Value>) -> Result<Self::Value, ParseError>;
    fn object(&mut self, entries: Vec<(String, Self::Value)>) -> Result<Self::Value, ParseError>;
    /// Called before a container's members are read (for path tracking).
    fn enter(&mut self, _key: Option<&str>, _index: Option<usize>) -> Result<(), ParseError> {
        Ok(())
    }
    fn leave(&mut self) {}
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed JSON, with the byte offset where reading stopped.
    Syntax(usize),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The builder asked to stop (it found what it was looking for, or it
    /// failed; it keeps the details itself).
    Stopped,
}

/// Documents nested deeper than this are refused rather than risking the
/// native stack.
pub const MAX_DEPTH: usize = 512;

/// Reads one JSON document into values made by `builder`.
pub fn parse<B: Builder>(json: &str, builder: &mut B) -> Result<B::Value, ParseError> {
    let mut parser = Parser {
        bytes: json.as_bytes(),
        text: json,
        pos: 0,
        depth: 0,
    };
    parser.skip_whitespace();
    let value = parser.value(builder)?;
    parser.skip_whitespace();
    if parser.pos != parser.bytes.len() {
        return Err(ParseError::Syntax(parser.pos));
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn value<B: Builder>(&mut self, builder: &mut B) -> Result<B::Value, ParseError> {
        match self.peek() {
            Some(b'{') => self.object(builder),
            Some(b'[') => self.array(builder),
            Some(b'"') => {
                let text = self.string()?;
                builder.string(&text)
            }
            Some(b't') => self.literal("true").and_then(|()| builder.bool(true)),
            Some(b'f') => self.literal("false").and_then(|()| builder.bool(false)),
            Some(b'n') => self.literal("null").and_then(|()| builder.null()),
            Some(b'-' | b'0'..=b'9') => self.number(builder),
            _ => Err(self.syntax()),
        }
    }

    fn object<B: Builder>(&mut self, builder: &mut B) -> Result<B::Value, ParseError> {
        self.descend()?;
        self.pos += 1;
        let mut entries = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return builder.object(entries);
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.syntax());
            }
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':')?;
            self.skip_whitespace();
            builder.enter(Some(&key), None)?;
            let value = self.value(builder)?;
            builder.leave();
            entries.push((key, value));
            self.skip_whitespace();
            match self.next() {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return Err(ParseError::Syntax(self.pos.saturating_sub(1))),
            }
        }
        self.depth -= 1;
        builder.object(entries)
    }

    fn array<B: Builder>(&mut self, builder: &mut B) -> Result<B::Value, ParseError> {
        self.descend()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return builder.array(items);
        }
        loop {
            self.skip_whitespace();
            builder.enter(None, Some(items.len()))?;
            let item = self.value(builder)?;
            builder.leave();
            items.push(item);
            self.skip_whitespace();
            match self.next() {
                Some(b',') => {}
                Some(b']') => break,
                _ => return Err(ParseError::Syntax(self.pos.saturating_sub(1))),
            }
        }
        self.depth -= 1;
        builder.array(items)
    }

    fn descend(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        Ok(())
    }

    fn number<B: Builder>(&mut self, builder: &mut B) -> Result<B::Value, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits_start = self.pos;
        self.skip_digits();
        if self.pos == digits_start {
            return Err(self.syntax());
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let fraction_start = self.pos;
            self.skip_digits();
            if self.pos == fraction_start {
                return Err(self.syntax());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            let exponent_start = self.pos;
            self.skip_digits();
            if self.pos == exponent_start {
                return Err(self.syntax());
            }
        }
        builder.number(&self.text[start..self.pos])
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1;
        let mut out = String::new();
        let mut start = self.pos;
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.syntax());
            };
            match byte {
                b'"' => {
                    out.push_str(&self.text[start..self.pos]);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(&self.text[start..self.pos]);
                    self.pos += 1;
                    self.escape(&mut out)?;
                    start = self.pos;
                }
                0x00..=0x1f => return Err(self.syntax()),
                _ => self.pos += 1,
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let decoded = match self.next() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => self.unicode_escape()?,
            _ => return Err(ParseError::Syntax(self.pos.saturating_sub(1))),
        };
        out.push(decoded);
        Ok(())
    }

    fn unicode_escape(&mut self) -> Result<char, ParseError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) {
            // A high surrogate must be followed by an escaped low surrogate.
            if self.next() != Some(b'\\') || self.next() != Some(b'u') {
                return Err(self.syntax());
            }
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.syntax());
            }
            let combined = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
            return char::from_u32(combined).ok_or_else(|| self.syntax());
        }
        char::from_u32(first).ok_or_else(|| self.syntax())
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let end = self.pos + 4;
        let digits = self.text.get(self.pos..end).ok_or_else(|| self.syntax())?;
        let value = u32::from_str_radix(digits, 16).map_err(|_| self.syntax())?;
        self.pos = end;
        Ok(value)
    }

    fn literal(&mut self, word: &str) -> Result<(), ParseError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.syntax())
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ParseError> {
        if self.next() == Some(byte) {
            Ok(())
        } else {
            Err(ParseError::Syntax(self.pos.saturating_sub(1)))
        }
    }

    fn skip_digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn syntax(&self) -> ParseError {
        ParseError::Syntax(self.pos)
    }
}

/// A builder that builds nothing; with `stop_at_nul` it stops at the first
/// string holding a NUL character, remembering where it was.
struct Scanner {
    stop_at_nul: bool,
    path: Vec<PathPart>,
}

impl Builder for Scanner {
    type Value = ();
    fn null(&mut self) -> Result<(), ParseError> {
        Ok(())
    }
    fn bool(&mut self, _: bool) -> Result<(), ParseError> {
        Ok(())
    }
    fn int(&mut self, _: i64) -> Result<(), ParseError> {
        Ok(())
    }
    fn big_int(&mut self, _: &str) -> Result<(), ParseError> {
        Ok(())
    }
    fn float(&mut self, _: f64) -> Result<(), ParseError> {
        Ok(())
    }
    fn string(&mut self, value: &str) -> Result<(), ParseError> {
        if self.stop_at_nul && value.contains('\0') {
            Err(ParseError::Stopped)
        } else {
            Ok(())
        }
    }
    fn array(&mut self, _: Vec<()>) -> Result<(), ParseError> {
        Ok(())
    }
    fn object(&mut self, _: Vec<(String, ())>) -> Result<(), ParseError> {
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
        fn null(&mut self) -> Result<Tree, ParseError> {
            Ok(Tree::Null)
        }
        fn bool(&mut self, value: bool) -> Result<Tree, ParseError> {
            Ok(Tree::Bool(value))
        }
        fn int(&mut self, value: i64) -> Result<Tree, ParseError> {
            Ok(Tree::Int(value))
        }
        fn big_int(&mut self, digits: &str) -> Result<Tree, ParseError> {
            Ok(Tree::Big(digits.to_owned()))
        }
        fn float(&mut self, value: f64) -> Result<Tree, ParseError> {
            Ok(Tree::Float(value))
        }
        fn string(&mut self, value: &str) -> Result<Tree, ParseError> {
            Ok(Tree::Str(value.to_owned()))
        }
        fn array(&mut self, items: Vec<Tree>) -> Result<Tree, ParseError> {
            Ok(Tree::List(items))
        }
        fn object(&mut self, entries: Vec<(String, Tree)>) -> Result<Tree, ParseError> {
            Ok(Tree::Map(entries))
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
        ] {
            assert!(read(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(read(&deep), Err(ParseError::TooDeep));
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
