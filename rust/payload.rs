//! Insert limits, job kind names and the COPY text encoding.
//!
//! Every insert path (single, batch, COPY, and later staged follow-ups)
//! checks the same limits here before any SQL runs, so a bad value is a
//! `ValidationError` naming its field, never a database error.

use std::fmt::Write as _;

use crate::json::{find_long_int, find_nul, render_path, MAX_INT_DIGITS};

pub const MIN_PRIORITY: i64 = 1;
pub const MAX_PRIORITY: i64 = 4;
pub const MIN_MAX_ATTEMPTS: i64 = 1;
pub const MAX_MAX_ATTEMPTS: i64 = 1000;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 200;
/// `max_crashes` is stored as a smallint; anything larger means "never".
pub const MAX_MAX_CRASHES: i64 = 10_000;
/// The highest schema version a job's arguments can have (a smallint).
pub const MAX_SCHEMA_VERSION: i64 = i16::MAX as i64;

/// Microseconds from 1970-01-01 to 0001-01-01T00:00:00Z.
pub const MIN_TIMESTAMP_US: i64 = -62_135_596_800_000_000;
/// Microseconds from 1970-01-01 to 9999-12-31T23:59:59.999999Z.
pub const MAX_TIMESTAMP_US: i64 = 253_402_300_799_999_999;

/// A value that breaks a limit: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The longest queue name (spec 002's grammar).
pub const MAX_QUEUE_CHARS: usize = 64;

/// A queue name: 1–64 characters of `A-Z a-z 0-9 . _ -`, starting with a
/// letter or digit (`^[A-Za-z0-9][A-Za-z0-9._-]*$`, spec 002).
pub fn check_queue(value: &str) -> Result<(), Invalid> {
    check_grammar_name("queue", "a queue name", value)
}

/// A rate class name follows the queue-name grammar.
pub fn check_rate_class(value: &str) -> Result<(), Invalid> {
    check_grammar_name("rate_class", "a rate class name", value)
}

/// The longest partition key, in characters.
pub const MAX_PARTITION_KEY_CHARS: usize = 255;

/// A partition key (the tenant whose jobs share a queue fairly with
/// others'): 1–255 characters, none of them a control character (see
/// [`is_control_character`]). Any other text is a key, spaces and `/`
/// included.
pub fn check_partition_key(value: &str) -> Result<(), Invalid> {
    const FIELD: &str = "partition_key";
    let chars = value.chars().count();
    if chars == 0 {
        return Err(Invalid::new(FIELD, "must not be empty"));
    }
    if chars > MAX_PARTITION_KEY_CHARS {
        return Err(Invalid::new(
            FIELD,
            format!("must be at most {MAX_PARTITION_KEY_CHARS} characters (got {chars})"),
        ));
    }
    if let Some((index, control)) = value
        .chars()
        .enumerate()
        .find(|&(_, c)| is_control_character(c))
    {
        return Err(Invalid::new(
            FIELD,
            format!(
                "must not contain control characters (U+{:04X} at character {index})",
                u32::from(control)
            ),
        ));
    }
    Ok(())
}

/// The control characters a partition key must not hold: Unicode's `Cc`
/// (U+0000–U+001F, U+007F–U+009F), plus the line and paragraph separators
/// (U+2028, U+2029) and the interlinear annotation characters
/// (U+FFF9–U+FFFB) that some locales' `[[:cntrl:]]` counts. `awa.jobs`'s
/// check reads `[[:cntrl:]]` in the C collation (ASCII's only), so no key
/// this accepts fails it, whatever the database's locale.
pub fn is_control_character(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{FFF9}'..='\u{FFFB}')
}

fn check_grammar_name(field: &str, what: &str, value: &str) -> Result<(), Invalid> {
    let chars = value.chars().count();
    if chars == 0 {
        return Err(Invalid::new(field, "must not be empty"));
    }
    if chars > MAX_QUEUE_CHARS {
        return Err(Invalid::new(
            field,
            format!("must be at most {MAX_QUEUE_CHARS} characters (got {chars})"),
        ));
    }
    let starts_well = value.starts_with(|c: char| c.is_ascii_alphanumeric());
    let rest_ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !(starts_well && rest_ok) {
        return Err(Invalid::new(
            field,
            format!(
                "{value:?} is not {what}: use letters, digits, '.', '_' and '-', \
                 starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

/// `kind`: 1–200 characters, no NUL.
pub fn check_name(field: &str, value: &str) -> Result<(), Invalid> {
    let chars = value.chars().count();
    if chars == 0 {
        return Err(Invalid::new(field, "must not be empty"));
    }
    if chars > MAX_NAME_CHARS {
        return Err(Invalid::new(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters (got {chars})"),
        ));
    }
    if value.contains('\0') {
        return Err(Invalid::new(field, "must not contain NUL characters"));
    }
    Ok(())
}

pub fn check_priority(value: i64) -> Result<i16, Invalid> {
    in_range("priority", value, MIN_PRIORITY, MAX_PRIORITY).map(narrow)
}

pub fn check_max_attempts(value: i64) -> Result<i16, Invalid> {
    in_range("max_attempts", value, MIN_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS).map(narrow)
}

pub fn check_max_crashes(value: i64) -> Result<i16, Invalid> {
    in_range("max_crashes", value, 0, MAX_MAX_CRASHES).map(narrow)
}

/// The schema version a job's arguments were written at: 1 (the first)
/// or more.
pub fn check_schema_version(value: i64) -> Result<i16, Invalid> {
    in_range("schema_version", value, 1, MAX_SCHEMA_VERSION).map(narrow)
}

/// A value already checked against a range that fits a smallint.
fn narrow(value: i64) -> i16 {
    i16::try_from(value).expect("range-checked to fit a smallint")
}

fn in_range(field: &str, value: i64, low: i64, high: i64) -> Result<i64, Invalid> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(Invalid::new(
            field,
            format!("must be between {low} and {high} (got {value})"),
        ))
    }
}

/// At most 20 tags of 1–200 characters, no NUL.
pub fn check_tags(tags: &[String]) -> Result<(), Invalid> {
    if tags.len() > MAX_TAGS {
        return Err(Invalid::new(
            "tags",
            format!("at most {MAX_TAGS} tags are allowed (got {})", tags.len()),
        ));
    }
    for (index, tag) in tags.iter().enumerate() {
        let field = format!("tags[{index}]");
        let chars = tag.chars().count();
        if chars == 0 || chars > MAX_TAG_CHARS {
            return Err(Invalid::new(
                field,
                format!("must be 1 to {MAX_TAG_CHARS} characters (got {chars})"),
            ));
        }
        if tag.contains('\0') {
            return Err(Invalid::new(field, "must not contain NUL characters"));
        }
    }
    Ok(())
}

/// `run_at` as microseconds since the Unix epoch, UTC: years 1–9999.
pub fn check_run_at(micros: i64) -> Result<i64, Invalid> {
    check_timestamp("run_at", micros)
}

/// A job's overall deadline, as microseconds since the epoch.
pub fn check_deadline(micros: i64) -> Result<i64, Invalid> {
    check_timestamp("deadline", micros)
}

fn check_timestamp(field: &str, micros: i64) -> Result<i64, Invalid> {
    if (MIN_TIMESTAMP_US..=MAX_TIMESTAMP_US).contains(&micros) {
        Ok(micros)
    } else {
        Err(Invalid::new(
            field,
            "must fall within the years 1 to 9999 (UTC)",
        ))
    }
}

/// An attempt timeout in milliseconds: from 1 ms to about 24.8 days (what
/// an `integer` column holds).
pub fn check_timeout_ms(value: i64) -> Result<i32, Invalid> {
    in_range("timeout", value, 1, i64::from(i32::MAX))
        .map(|ms| i32::try_from(ms).expect("range-checked to fit an integer"))
}

/// JSON written by another serializer must not hold a NUL character.
pub fn check_json_has_no_nul(field: &str, json: &str) -> Result<(), Invalid> {
    match find_nul(json) {
        None => Ok(()),
        Some(path) => Err(Invalid::new(
            render_path(field, &path),
            "must not contain NUL characters",
        )),
    }
}

/// JSON written by another serializer must not hold an integer longer than
/// [`MAX_INT_DIGITS`] (the reader would refuse it).
pub fn check_json_ints(field: &str, json: &str) -> Result<(), Invalid> {
    match find_long_int(json) {
        None => Ok(()),
        Some(path) => Err(Invalid::new(
            render_path(field, &path),
            format!(
                "is an integer of more than {MAX_INT_DIGITS} digits \
                 (awa stores integers of at most {MAX_INT_DIGITS} digits)"
            ),
        )),
    }
}

/// The job kind for an argument class: `SendEmail` → `send_email`,
/// `SMTPEmail` → `smtp_email`, `HTMLToPDF` → `html_to_pdf`,
/// `ProcessV2Import` → `process_v2_import`.
pub fn derive_kind(class_name: &str) -> String {
    let chars: Vec<char> = class_name.chars().collect();
    let mut kind = String::with_capacity(class_name.len() + 4);
    for (index, &current) in chars.iter().enumerate() {
        if current.is_uppercase() && index > 0 {
            let previous = chars[index - 1];
            let next_is_lower = chars.get(index + 1).is_some_and(|c| c.is_lowercase());
            let starts_word = previous.is_lowercase()
                || previous.is_ascii_digit()
                || (previous.is_uppercase() && next_is_lower);
            if starts_word && !kind.ends_with('_') {
                kind.push('_');
            }
        }
        kind.extend(current.to_lowercase());
    }
    kind
}

/// Appends one field in `PostgreSQL`'s COPY text format: backslash, tab,
/// newline and carriage return are escaped.
pub fn copy_field(out: &mut String, value: &str) {
    let mut start = 0;
    for (index, byte) in value.bytes().enumerate() {
        let escape = match byte {
            b'\\' => "\\\\",
            b'\t' => "\\t",
            b'\n' => "\\n",
            b'\r' => "\\r",
            _ => continue,
        };
        out.push_str(&value[start..index]);
        out.push_str(escape);
        start = index + 1;
    }
    out.push_str(&value[start..]);
}

/// NULL in COPY text format.
pub const COPY_NULL: &str = "\\N";

/// A text array literal (`{"a","b"}`) for `text[]`, before COPY escaping.
pub fn text_array_literal(items: &[String]) -> String {
    let mut literal = String::from("{");
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            literal.push(',');
        }
        literal.push('"');
        for c in item.chars() {
            if c == '"' || c == '\\' {
                literal.push('\\');
            }
            literal.push(c);
        }
        literal.push('"');
    }
    literal.push('}');
    literal
}

/// Formats microseconds since the epoch as an ISO timestamp `PostgreSQL`
/// reads as UTC: `2026-11-30 16:33:51.123456+00`.
pub fn format_timestamp_us(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut text = String::with_capacity(32);
    let _ = write!(
        text,
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{fraction:06}+00",
        second_of_day / 3600,
        (second_of_day / 60) % 60,
        second_of_day % 60
    );
    text
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = u32::try_from(day_of_year - (153 * shifted_month + 2) / 5 + 1)
        .expect("a day of the month is 1 to 31");
    let month = u32::try_from(if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    })
    .expect("a month is 1 to 12");
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_class_names() {
        for (class, kind) in [
            ("SendEmail", "send_email"),
            ("SMTPEmail", "smtp_email"),
            ("HTMLToPDF", "html_to_pdf"),
            ("ProcessV2Import", "process_v2_import"),
            ("Job", "job"),
            ("already_snake", "already_snake"),
            ("ABC", "abc"),
            ("Resize2x", "resize2x"),
            ("Http2Request", "http2_request"),
        ] {
            assert_eq!(derive_kind(class), kind, "{class}");
        }
    }

    #[test]
    fn names_are_bounded_and_nul_free() {
        assert!(check_name("kind", "send_email").is_ok());
        assert_eq!(check_name("kind", "").unwrap_err().field, "kind");
        assert!(check_name("kind", &"é".repeat(200)).is_ok());
        let long = check_name("kind", &"k".repeat(201)).unwrap_err();
        assert_eq!(
            long.to_string(),
            "kind: must be at most 200 characters (got 201)"
        );
        assert!(check_name("kind", "a\0b").is_err());
    }

    #[test]
    fn queue_names_follow_the_grammar() {
        for good in [
            "default",
            "q",
            "9",
            "emails.high",
            "tenant_7-eu",
            &"q".repeat(64),
        ] {
            assert!(check_queue(good).is_ok(), "{good}");
        }
        for bad in ["", ".hidden", "-x", "_x", "a b", "a/b", "é", "a\0b", "a:b"] {
            assert_eq!(check_queue(bad).unwrap_err().field, "queue", "{bad:?}");
        }
        assert_eq!(
            check_queue(&"q".repeat(65)).unwrap_err().to_string(),
            "queue: must be at most 64 characters (got 65)"
        );
        assert_eq!(
            check_queue("a b").unwrap_err().to_string(),
            "queue: \"a b\" is not a queue name: use letters, digits, '.', '_' and '-', \
             starting with a letter or digit"
        );
    }

    #[test]
    fn partition_keys_are_1_to_255_characters_without_control_characters() {
        for good in [
            "t",
            "tenant 7/eu",
            "é",
            "😀",
            &"k".repeat(255),
            &"é".repeat(255),
        ] {
            assert!(check_partition_key(good).is_ok(), "{good:?}");
        }
        assert_eq!(
            check_partition_key("").unwrap_err().to_string(),
            "partition_key: must not be empty"
        );
        assert_eq!(
            check_partition_key(&"é".repeat(256))
                .unwrap_err()
                .to_string(),
            "partition_key: must be at most 255 characters (got 256)"
        );
        for (bad, code, at) in [
            ("a\0b", "U+0000", 1),
            ("\tx", "U+0009", 0),
            ("ab\n", "U+000A", 2),
            ("a\u{7f}", "U+007F", 1),
            ("é\u{85}", "U+0085", 1),
            ("\u{9f}", "U+009F", 0),
            ("a\u{2028}", "U+2028", 1),
            ("\u{2029}", "U+2029", 0),
            ("x\u{FFFB}", "U+FFFB", 1),
        ] {
            assert_eq!(
                check_partition_key(bad).unwrap_err().to_string(),
                format!(
                    "partition_key: must not contain control characters ({code} at character {at})"
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn numeric_limits() {
        assert_eq!(check_priority(1), Ok(1));
        assert_eq!(check_priority(4), Ok(4));
        assert_eq!(
            check_priority(0).unwrap_err().to_string(),
            "priority: must be between 1 and 4 (got 0)"
        );
        assert!(check_priority(5).is_err());
        assert!(check_max_attempts(1000).is_ok());
        assert_eq!(check_max_attempts(1001).unwrap_err().field, "max_attempts");
        assert!(check_max_attempts(0).is_err());
        assert!(check_max_crashes(0).is_ok());
        assert!(check_max_crashes(-1).is_err());
    }

    #[test]
    fn tag_limits() {
        let twenty: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        assert!(check_tags(&twenty).is_ok());
        let mut too_many = twenty.clone();
        too_many.push("x".into());
        assert_eq!(check_tags(&too_many).unwrap_err().field, "tags");
        assert_eq!(
            check_tags(&["ok".into(), "b\0ad".into()])
                .unwrap_err()
                .field,
            "tags[1]"
        );
        assert_eq!(check_tags(&[String::new()]).unwrap_err().field, "tags[0]");
    }

    #[test]
    fn run_at_must_be_within_years_1_to_9999() {
        assert!(check_run_at(0).is_ok());
        assert!(check_run_at(MIN_TIMESTAMP_US).is_ok());
        assert!(check_run_at(MAX_TIMESTAMP_US).is_ok());
        assert!(check_run_at(MIN_TIMESTAMP_US - 1).is_err());
        assert_eq!(
            check_run_at(MAX_TIMESTAMP_US + 1).unwrap_err().field,
            "run_at"
        );
    }

    #[test]
    fn timestamps_format_as_utc() {
        assert_eq!(format_timestamp_us(0), "1970-01-01 00:00:00.000000+00");
        assert_eq!(
            format_timestamp_us(1_796_056_431_123_456),
            "2026-11-30 16:33:51.123456+00"
        );
        assert_eq!(format_timestamp_us(-1), "1969-12-31 23:59:59.999999+00");
        assert_eq!(
            format_timestamp_us(MIN_TIMESTAMP_US),
            "0001-01-01 00:00:00.000000+00"
        );
        assert_eq!(
            format_timestamp_us(MAX_TIMESTAMP_US),
            "9999-12-31 23:59:59.999999+00"
        );
        assert_eq!(
            format_timestamp_us(951_782_400_000_000),
            "2000-02-29 00:00:00.000000+00"
        );
    }

    #[test]
    fn copy_fields_escape_control_characters() {
        let mut out = String::new();
        copy_field(&mut out, "a\\b\tc\nd\re");
        assert_eq!(out, "a\\\\b\\tc\\nd\\re");
    }

    #[test]
    fn text_arrays_quote_every_item() {
        assert_eq!(text_array_literal(&[]), "{}");
        assert_eq!(
            text_array_literal(&["a".into(), "b \"c\"".into(), "d\\e".into()]),
            r#"{"a","b \"c\"","d\\e"}"#
        );
    }

    #[test]
    fn json_nul_is_located() {
        let err = check_json_has_no_nul("metadata", r#"{"a": ["\u0000"]}"#).unwrap_err();
        assert_eq!(err.field, "metadata.a[0]");
        assert!(check_json_has_no_nul("args", r#"{"a": 1}"#).is_ok());
    }
}
