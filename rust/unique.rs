//! Unique keys: the identity of a job for `unique_opts` inserts.
//!
//! A unique key is the first 16 bytes of a SHA-256 digest over the job's
//! kind and, as the options ask, its queue, its arguments in canonical form
//! and the period it was inserted in. The database holds the key; a second
//! insert with the same key, while the first job is in one of the states the
//! options name, is a conflict.
//!
//! Arguments are compared in canonical form ([`canonical_json`]), so two
//! argument objects that differ only in key order are the same job.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use crate::json::{self, find_nul, render_path, Builder, JsonWriter, ParseError};
use crate::payload::Invalid;

/// Bytes of a unique key.
pub const UNIQUE_KEY_BYTES: usize = 16;

/// The smallest and largest `unique_opts` states mask: one bit per job state.
pub const MIN_STATES_MASK: i64 = 1;
pub const MAX_STATES_MASK: i64 = 255;

/// The longest `unique_opts.by_period`, in seconds: the most whole seconds
/// whose microseconds fit 64 bits (about 292 000 years; any longer period
/// would hold every moment of years 1–9999 anyway).
pub const MAX_PERIOD_S: i64 = i64::MAX / 1_000_000;

/// `unique_opts` as the Python layer passes them.
#[derive(Clone, Copy, Debug)]
pub struct UniqueOpts {
    /// The args (in canonical form) are part of the key.
    pub by_args: bool,
    /// The queue is part of the key.
    pub by_queue: bool,
    /// The period, in seconds, whose number is part of the key (`None`: any
    /// time).
    pub period_s: Option<i64>,
    /// The job states, one bit each, in which an existing job conflicts.
    pub states: i64,
}

impl UniqueOpts {
    /// Checks the options and returns the job's unique key and states mask.
    /// `now_us` (microseconds since the epoch) chooses the period and is
    /// required with one. Errors name `unique_opts.states`,
    /// `unique_opts.by_period` or, for args that are not valid JSON, `args`.
    pub fn key(
        &self,
        kind: &str,
        queue: &str,
        args_json: &str,
        now_us: Option<i64>,
    ) -> Result<([u8; UNIQUE_KEY_BYTES], i16), Invalid> {
        if !(MIN_STATES_MASK..=MAX_STATES_MASK).contains(&self.states) {
            return Err(Invalid::new(
                "unique_opts.states",
                format!(
                    "must be a mask from {MIN_STATES_MASK} to {MAX_STATES_MASK} (got {})",
                    self.states
                ),
            ));
        }
        let states = i16::try_from(self.states).expect("range-checked to fit a smallint");
        let bucket = match self.period_s {
            None => None,
            Some(period_s) if !(1..=MAX_PERIOD_S).contains(&period_s) => {
                return Err(Invalid::new(
                    "unique_opts.by_period",
                    format!("must be from 1 to {MAX_PERIOD_S} seconds (got {period_s})"),
                ));
            }
            Some(period_s) => {
                let now_us = now_us.ok_or_else(|| {
                    Invalid::new(
                        "unique_opts.by_period",
                        "needs now_us, the time that chooses the period",
                    )
                })?;
                // The period's start (in seconds), not its number: minute 5
                // and hour 5 must not share a key.
                Some(period_bucket(now_us, period_s).saturating_mul(period_s))
            }
        };
        let canonical_args = if self.by_args {
            Some(canonical_json(args_json)?)
        } else {
            None
        };
        let key = unique_key(
            kind,
            self.by_queue.then_some(queue),
            canonical_args.as_deref(),
            bucket,
        );
        Ok((key, states))
    }
}

/// Re-emits the JSON document `json` in canonical form: compact, object keys
/// sorted by their decoded text (byte order) at every level, a repeated key
/// keeping its last value, numbers copied as written and strings escaped as
/// [`JsonWriter`] escapes them.
///
/// Errors name the field `args`, the document this canonicalizes: invalid
/// JSON, nesting beyond [`json::MAX_DEPTH`], or a NUL character (with its
/// path, `args.user.name`).
pub fn canonical_json(json: &str) -> Result<String, Invalid> {
    match json::parse(json, &mut Canonical) {
        Ok(text) => Ok(text),
        Err(ParseError::Syntax { at, reason }) => Err(Invalid::new(
            "args",
            format!("is not valid JSON (at byte {at}: {reason})"),
        )),
        Err(ParseError::IntTooLong(_)) => {
            let path = json::find_long_int(json).unwrap_or_default();
            Err(Invalid::new(
                render_path("args", &path),
                format!("is an integer of more than {} digits", json::MAX_INT_DIGITS),
            ))
        }
        Err(ParseError::TooDeep) => Err(Invalid::new(
            "args",
            format!("is nested more than {} levels deep", json::MAX_DEPTH),
        )),
        Err(ParseError::Stopped) => {
            let path = find_nul(json).unwrap_or_default();
            Err(Invalid::new(
                render_path("args", &path),
                "must not contain NUL characters",
            ))
        }
    }
}

/// The unique key of a job: the first 16 bytes of SHA-256 over `kind` and
/// whichever of `queue`, `canonical_args` and `period_bucket` are present.
///
/// Every field is tagged present or absent and every text is prefixed with
/// its length, so no two different inputs share an encoding: `("ab", "c")`
/// differs from `("a", "bc")`, and an absent queue from an empty one.
pub fn unique_key(
    kind: &str,
    queue: Option<&str>,
    canonical_args: Option<&str>,
    period_bucket: Option<i64>,
) -> [u8; UNIQUE_KEY_BYTES] {
    let mut hasher = Sha256::new();
    // A version tag, so a future encoding cannot collide with this one.
    hasher.update(b"awa.unique.v1");
    text(&mut hasher, Some(kind));
    text(&mut hasher, queue);
    text(&mut hasher, canonical_args);
    match period_bucket {
        None => hasher.update([0]),
        Some(bucket) => {
            hasher.update([1]);
            hasher.update(bucket.to_be_bytes());
        }
    }
    let digest = hasher.finalize();
    let mut key = [0; UNIQUE_KEY_BYTES];
    key.copy_from_slice(&digest[..UNIQUE_KEY_BYTES]);
    key
}

fn text(hasher: &mut Sha256, value: Option<&str>) {
    match value {
        None => hasher.update([0]),
        Some(value) => {
            hasher.update([1]);
            hasher.update((value.len() as u64).to_be_bytes());
            hasher.update(value.as_bytes());
        }
    }
}

/// The number of the `period_s`-second period holding `now_us`
/// (microseconds since the Unix epoch): floor division, so instants before
/// the epoch fall in negative periods. `period_s` must be at least 1
/// (smaller values count as 1).
pub fn period_bucket(now_us: i64, period_s: i64) -> i64 {
    let micros_per_period = period_s.max(1).saturating_mul(1_000_000);
    now_us.div_euclid(micros_per_period)
}

/// Which rows of an insert that skips duplicates were written, by position,
/// given the keys the database reports inserted. A row without a key is
/// always written; of the rows sharing a key, only the first can have been,
/// and only if its key is among `inserted`.
pub fn rows_written(
    keys: &[Option<[u8; UNIQUE_KEY_BYTES]>],
    inserted: &[[u8; UNIQUE_KEY_BYTES]],
) -> Vec<usize> {
    let mut remaining: HashSet<&[u8; UNIQUE_KEY_BYTES]> = inserted.iter().collect();
    keys.iter()
        .enumerate()
        .filter(|(_, key)| match key {
            None => true,
            // Removed on first sight: a later row with the key was skipped.
            Some(key) => remaining.remove(key),
        })
        .map(|(row, _)| row)
        .collect()
}

/// Builds canonical JSON text bottom-up: each value is its own text.
struct Canonical;

impl Canonical {
    fn string_text(value: &str) -> Result<String, ParseError> {
        let mut writer = JsonWriter::with_capacity(value.len() + 2);
        writer.string(value).map_err(|_| ParseError::Stopped)?;
        Ok(writer.out)
    }
}

impl Builder for Canonical {
    type Value = String;
    type Array = Vec<String>;
    type Object = Vec<(String, String)>;
    type Key = String;

    fn null(&mut self) -> Result<String, ParseError> {
        Ok("null".into())
    }
    fn bool(&mut self, value: bool) -> Result<String, ParseError> {
        Ok(if value { "true" } else { "false" }.into())
    }
    fn number(&mut self, text: &str) -> Result<String, ParseError> {
        Ok(text.to_owned())
    }
    fn string(&mut self, value: &str) -> Result<String, ParseError> {
        Self::string_text(value)
    }
    fn begin_array(&mut self) -> Result<Vec<String>, ParseError> {
        Ok(Vec::new())
    }
    fn push(&mut self, array: &mut Vec<String>, item: String) -> Result<(), ParseError> {
        array.push(item);
        Ok(())
    }
    fn end_array(&mut self, items: Vec<String>) -> Result<String, ParseError> {
        Ok(format!("[{}]", items.join(",")))
    }
    fn begin_object(&mut self) -> Result<Vec<(String, String)>, ParseError> {
        Ok(Vec::new())
    }
    fn key(&mut self, key: &str) -> Result<String, ParseError> {
        Ok(key.to_owned())
    }
    fn insert(
        &mut self,
        object: &mut Vec<(String, String)>,
        key: String,
        value: String,
    ) -> Result<(), ParseError> {
        object.push((key, value));
        Ok(())
    }
    fn end_object(&mut self, mut entries: Vec<(String, String)>) -> Result<String, ParseError> {
        // A stable sort keeps repeated keys in document order; the last wins.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::from("{");
        let mut first = true;
        for (index, (key, value)) in entries.iter().enumerate() {
            if entries.get(index + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&Self::string_text(key)?);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_written_keeps_unkeyed_rows_and_the_first_of_each_inserted_key() {
        let (a, b, c) = ([1; 16], [2; 16], [3; 16]);
        let keys = [None, Some(a), Some(b), Some(a), None, Some(c), Some(b)];
        // a was inserted, b was already held by an older job, c was inserted.
        assert_eq!(rows_written(&keys, &[c, a]), vec![0, 1, 4, 5]);
        assert_eq!(rows_written(&keys, &[]), vec![0, 4]);
        assert_eq!(rows_written(&[], &[a]), Vec::<usize>::new());
    }

    fn canonical(json: &str) -> String {
        canonical_json(json).unwrap()
    }

    #[test]
    fn key_order_does_not_matter() {
        assert_eq!(canonical(r#"{"b": 1, "a": 2}"#), r#"{"a":2,"b":1}"#);
        assert_eq!(
            canonical(r#"{"b":1,"a":2}"#),
            canonical(r#"{ "a" : 2 , "b" : 1 }"#)
        );
    }

    #[test]
    fn nested_objects_and_arrays_are_sorted_at_every_level() {
        let one = r#"{"z": [{"y": 1, "x": [true, null]}, "s"], "a": {"d": {}, "c": []}}"#;
        let two = r#"{"a": {"c": [], "d": {}}, "z": [{"x": [true, null], "y": 1}, "s"]}"#;
        assert_eq!(canonical(one), canonical(two));
        assert_eq!(
            canonical(one),
            r#"{"a":{"c":[],"d":{}},"z":[{"x":[true,null],"y":1},"s"]}"#
        );
        // Array order is meaningful and kept.
        assert_ne!(canonical("[1,2]"), canonical("[2,1]"));
    }

    #[test]
    fn keys_sort_by_their_decoded_bytes() {
        // "\u0041" is "A", which sorts before "a"; "é" (0xC3 0xA9) after "z".
        assert_eq!(
            canonical(r#"{"z": 1, "é": 2, "a": 3, "\u0041": 4}"#),
            r#"{"A":4,"a":3,"z":1,"é":2}"#
        );
    }

    #[test]
    fn numbers_are_copied_as_written() {
        assert_eq!(
            canonical("[1.0, 1e3, -0, 12345678901234567890123, 2.50]"),
            "[1.0,1e3,-0,12345678901234567890123,2.50]"
        );
        // Exponents keep their case and sign (pydantic writes `1e+300`).
        assert_eq!(
            canonical("[1E5, 1e+300, -2.5e-7, 0.0]"),
            "[1E5,1e+300,-2.5e-7,0.0]"
        );
    }

    #[test]
    fn strings_are_escaped_like_the_writer() {
        assert_eq!(
            canonical(r#"{"k\/": "\u00e9\t\"\\\u0001"}"#),
            "{\"k/\":\"é\\t\\\"\\\\\\u0001\"}"
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value() {
        assert_eq!(canonical(r#"{"a": 1, "b": 0, "a": 2}"#), r#"{"a":2,"b":0}"#);
    }

    #[test]
    fn bad_documents_are_refused() {
        assert_eq!(canonical_json("{").unwrap_err().field, "args");
        let deep = "[".repeat(json::MAX_DEPTH + 1) + &"]".repeat(json::MAX_DEPTH + 1);
        assert!(canonical_json(&deep).is_err());
        let nul = canonical_json(r#"{"a": ["ok", "\u0000"]}"#).unwrap_err();
        assert_eq!(nul.field, "args.a[1]");
        let leading_zero = canonical_json(r#"{"a": 01}"#).unwrap_err();
        assert_eq!(leading_zero.field, "args");
        assert!(leading_zero.message.contains("invalid number"));
        let long = format!(r#"{{"a": [{}]}}"#, "7".repeat(json::MAX_INT_DIGITS + 1));
        assert_eq!(canonical_json(&long).unwrap_err().field, "args.a[0]");
    }

    #[test]
    fn keys_are_16_bytes_and_deterministic() {
        let key = unique_key("send_email", Some("email"), Some("{}"), Some(3));
        assert_eq!(key.len(), UNIQUE_KEY_BYTES);
        assert_eq!(
            key,
            unique_key("send_email", Some("email"), Some("{}"), Some(3))
        );
    }

    #[test]
    fn keys_differ_by_every_field() {
        let base = unique_key("k", Some("q"), Some("{}"), Some(1));
        assert_ne!(base, unique_key("k2", Some("q"), Some("{}"), Some(1)));
        assert_ne!(base, unique_key("k", Some("q2"), Some("{}"), Some(1)));
        assert_ne!(
            base,
            unique_key("k", Some("q"), Some(r#"{"a":1}"#), Some(1))
        );
        assert_ne!(base, unique_key("k", Some("q"), Some("{}"), Some(2)));
        assert_ne!(base, unique_key("k", Some("q"), Some("{}"), None));
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        assert_ne!(
            unique_key("ab", Some("c"), None, None),
            unique_key("a", Some("bc"), None, None)
        );
        assert_ne!(
            unique_key("k", Some("{}"), None, None),
            unique_key("k", None, Some("{}"), None)
        );
        assert_ne!(
            unique_key("k", None, None, None),
            unique_key("k", Some(""), None, None)
        );
        assert_ne!(
            unique_key("k", None, None, None),
            unique_key("k", None, Some(""), None)
        );
        assert_ne!(
            unique_key("k", None, None, Some(0)),
            unique_key("k", None, None, None)
        );
    }

    fn opts(by_args: bool, by_queue: bool, period_s: Option<i64>) -> UniqueOpts {
        UniqueOpts {
            by_args,
            by_queue,
            period_s,
            states: 0b1111,
        }
    }

    #[test]
    fn options_choose_the_fields_of_the_key() {
        let key = |opts: UniqueOpts, queue: &str, args: &str| {
            opts.key("k", queue, args, Some(90_000_000)).unwrap().0
        };
        let all = opts(true, true, Some(60));
        assert_eq!(
            key(all, "q", r#"{"a":1,"b":2}"#),
            key(all, "q", r#"{"b":2,"a":1}"#)
        );
        assert_ne!(key(all, "q", r#"{"a":1}"#), key(all, "q2", r#"{"a":1}"#));
        assert_ne!(key(all, "q", r#"{"a":1}"#), key(all, "q", r#"{"a":2}"#));
        let kind_only = opts(false, false, None);
        assert_eq!(
            key(kind_only, "q", r#"{"a":1}"#),
            key(kind_only, "q2", "{}")
        );
        assert_eq!(key(kind_only, "q", "{}"), unique_key("k", None, None, None));
        assert_eq!(
            key(all, "q", "{}"),
            unique_key("k", Some("q"), Some("{}"), Some(60))
        );
        // The same period number under different lengths is a different key.
        let hourly = opts(true, true, Some(3600));
        assert_ne!(
            hourly
                .key("k", "q", "{}", Some(5 * 3_600_000_000))
                .unwrap()
                .0,
            all.key("k", "q", "{}", Some(5 * 60_000_000)).unwrap().0
        );
    }

    #[test]
    fn options_are_checked() {
        let mut bad_states = opts(false, false, None);
        for states in [0, 256, -1] {
            bad_states.states = states;
            let error = bad_states.key("k", "q", "{}", None).unwrap_err();
            assert_eq!(error.field, "unique_opts.states");
        }
        bad_states.states = 255;
        assert_eq!(bad_states.key("k", "q", "{}", None).unwrap().1, 255);
        let zero_period = opts(false, false, Some(0)).key("k", "q", "{}", Some(0));
        assert_eq!(zero_period.unwrap_err().field, "unique_opts.by_period");
        let no_now = opts(false, false, Some(60)).key("k", "q", "{}", None);
        assert_eq!(no_now.unwrap_err().field, "unique_opts.by_period");
        // Without a period, now is not needed.
        assert!(opts(true, true, None).key("k", "q", "{}", None).is_ok());
    }

    #[test]
    fn buckets_floor_at_period_edges() {
        let minute_us = 60_000_000;
        assert_eq!(period_bucket(0, 60), 0);
        assert_eq!(period_bucket(minute_us - 1, 60), 0);
        assert_eq!(period_bucket(minute_us, 60), 1);
        assert_eq!(period_bucket(-1, 60), -1);
        assert_eq!(period_bucket(-minute_us, 60), -1);
        assert_eq!(period_bucket(-minute_us - 1, 60), -2);
        assert_eq!(period_bucket(1_999_999, 1), 1);
    }

    #[test]
    fn buckets_survive_extreme_inputs() {
        assert_eq!(period_bucket(i64::MAX, i64::MAX), 1);
        assert_eq!(period_bucket(i64::MIN, i64::MAX), -2);
        assert_eq!(period_bucket(5, 0), 0);
    }
}
