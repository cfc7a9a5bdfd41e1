//! New jobs: the one definition of what an insert writes, for every path
//! (one job, many, COPY, durable and staged follow-ups).
//!
//! A [`JobInput`] is a job as the caller gave it, its arguments and metadata
//! already encoded to JSON; [`NewJob::check`] enforces every limit and
//! computes the unique key. An [`InsertBatch`] holds checked jobs and writes
//! them in the two shapes the database reads: JSON objects keyed by the
//! fields of the `awa.job_input` type (one parameter, read by name with
//! `jsonb_populate_recordset`) and `PostgreSQL`'s COPY text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::json::{write_lossy_string, JsonWriter};
use crate::payload::{self, Invalid};
use crate::staging::{self, StagingBudget};
use crate::unique::{self, UniqueOpts, UNIQUE_KEY_BYTES};

/// One job as given: options unchecked, `args` and `metadata` encoded.
#[derive(Clone, Debug)]
pub struct JobInput {
    pub kind: String,
    pub queue: String,
    pub args: String,
    pub priority: i64,
    pub max_attempts: i64,
    /// `None`: unbounded.
    pub max_crashes: Option<i64>,
    /// Microseconds since the epoch (UTC); `None` runs now.
    pub run_at_us: Option<i64>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<String>,
    pub unique: Option<UniqueOpts>,
    /// The job's own attempt timeout.
    pub timeout_ms: Option<i64>,
    /// The job's overall deadline, microseconds since the epoch.
    pub deadline_us: Option<i64>,
    /// The schema version its arguments were written at; `None`: 1.
    pub schema_version: Option<i64>,
    /// The rate class whose shared tokens its claim spends; `None`: none.
    pub rate_class: Option<String>,
    /// The partition (tenant) its queue shares fairly with others; `None`:
    /// no partition.
    pub partition_key: Option<String>,
}

/// A job's unique key and the states in which an existing job conflicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UniqueKey {
    pub key: [u8; UNIQUE_KEY_BYTES],
    pub states: i16,
}

/// A checked job, ready to write.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    pub kind: String,
    pub queue: String,
    pub args: String,
    pub priority: i16,
    pub max_attempts: i16,
    pub max_crashes: Option<i16>,
    pub run_at_us: Option<i64>,
    /// `None` for no tags (an empty list included).
    pub tags: Option<Vec<String>>,
    /// `None` for no metadata (`{}` included).
    pub metadata: Option<String>,
    pub unique: Option<UniqueKey>,
    pub timeout_ms: Option<i32>,
    pub deadline_us: Option<i64>,
    /// `None` for version 1 (the database reads NULL as 1), so jobs of tasks
    /// that never declare a version are written as before.
    pub schema_version: Option<i16>,
    pub rate_class: Option<String>,
    pub partition_key: Option<String>,
}

impl NewJob {
    /// Checks every limit (see `_core.pyi`, `InsertRows.add_many`); errors
    /// name the field. `now_us` chooses a unique key's period and is
    /// required with one.
    pub fn check(input: JobInput, now_us: Option<i64>) -> Result<NewJob, Invalid> {
        payload::check_name("kind", &input.kind)?;
        payload::check_queue(&input.queue)?;
        let priority = payload::check_priority(input.priority)?;
        let max_attempts = payload::check_max_attempts(input.max_attempts)?;
        let max_crashes = input
            .max_crashes
            .map(payload::check_max_crashes)
            .transpose()?;
        let run_at_us = input.run_at_us.map(payload::check_run_at).transpose()?;
        let timeout_ms = input
            .timeout_ms
            .map(payload::check_timeout_ms)
            .transpose()?;
        let deadline_us = input.deadline_us.map(payload::check_deadline).transpose()?;
        let schema_version = input
            .schema_version
            .map(payload::check_schema_version)
            .transpose()?
            .filter(|&version| version > 1);
        if let Some(class) = &input.rate_class {
            payload::check_rate_class(class)?;
        }
        if let Some(partition) = &input.partition_key {
            payload::check_partition_key(partition)?;
        }
        let tags = match input.tags {
            None => None,
            Some(tags) => {
                payload::check_tags(&tags)?;
                (!tags.is_empty()).then_some(tags)
            }
        };
        require_object("args", &input.args)?;
        let metadata = match input.metadata {
            None => None,
            Some(json) => {
                require_object("metadata", &json)?;
                (json != "{}").then_some(json)
            }
        };
        let unique = input
            .unique
            .map(|options| {
                options
                    .key(&input.kind, &input.queue, &input.args, now_us)
                    .map(|(key, states)| UniqueKey { key, states })
            })
            .transpose()?;
        Ok(NewJob {
            kind: input.kind,
            queue: input.queue,
            args: input.args,
            priority,
            max_attempts,
            max_crashes,
            run_at_us,
            tags,
            metadata,
            unique,
            timeout_ms,
            deadline_us,
            schema_version,
            rate_class: input.rate_class,
            partition_key: input.partition_key,
        })
    }

    /// Whether the job is available (not scheduled) at `now_us`.
    pub fn is_available(&self, now_us: i64) -> bool {
        self.run_at_us.is_none_or(|micros| micros <= now_us)
    }

    fn staged_bytes(&self) -> usize {
        staging::row_bytes(
            &self.kind,
            &self.queue,
            &self.args,
            self.metadata.as_deref(),
            self.tags.as_deref().unwrap_or_default(),
        )
    }

    /// The job as one JSON object keyed by `awa.job_input`'s fields; absent
    /// values are left out (the type reads them as NULL). Text was checked
    /// for NUL characters when the job was checked.
    fn write_json(&self, writer: &mut JsonWriter) {
        writer.begin_object();
        key(writer, "kind", true);
        write_lossy_string(writer, &self.kind);
        key(writer, "queue", false);
        write_lossy_string(writer, &self.queue);
        key(writer, "args", false);
        writer.raw(&self.args);
        key(writer, "priority", false);
        writer.i64(self.priority.into());
        key(writer, "max_attempts", false);
        writer.i64(self.max_attempts.into());
        if let Some(limit) = self.max_crashes {
            key(writer, "max_crashes", false);
            writer.i64(limit.into());
        }
        if let Some(micros) = self.run_at_us {
            key(writer, "run_at", false);
            timestamp(writer, micros);
        }
        if let Some(tags) = &self.tags {
            key(writer, "tags", false);
            writer.begin_array();
            for (index, tag) in tags.iter().enumerate() {
                if index > 0 {
                    writer.comma();
                }
                write_lossy_string(writer, tag);
            }
            writer.end_array();
        }
        if let Some(json) = &self.metadata {
            key(writer, "metadata", false);
            writer.raw(json);
        }
        if let Some(unique) = &self.unique {
            // bytea's text input: "\x" and two hex digits per byte.
            key(writer, "unique_key", false);
            let mut hex = String::with_capacity(2 * UNIQUE_KEY_BYTES + 4);
            hex.push_str("\"\\\\x");
            for byte in unique.key {
                let _ = write!(hex, "{byte:02x}");
            }
            hex.push('"');
            writer.raw(&hex);
            key(writer, "unique_states", false);
            writer.i64(unique.states.into());
        }
        if let Some(ms) = self.timeout_ms {
            key(writer, "timeout_ms", false);
            writer.i64(ms.into());
        }
        if let Some(micros) = self.deadline_us {
            key(writer, "deadline_at", false);
            timestamp(writer, micros);
        }
        if let Some(version) = self.schema_version {
            key(writer, "schema_version", false);
            writer.i64(version.into());
        }
        if let Some(class) = &self.rate_class {
            key(writer, "rate_class", false);
            write_lossy_string(writer, class);
        }
        if let Some(partition) = &self.partition_key {
            key(writer, "partition_key", false);
            write_lossy_string(writer, partition);
        }
        writer.end_object();
    }
}

/// A batch's length and budget at one moment.
#[derive(Clone, Debug)]
pub struct Mark {
    len: usize,
    staging: Option<StagingBudget>,
}

/// Checked jobs in insertion order; with a staging budget, the follow-ups
/// one attempt stages.
#[derive(Clone, Debug, Default)]
pub struct InsertBatch {
    jobs: Vec<NewJob>,
    staging: Option<StagingBudget>,
}

impl InsertBatch {
    pub fn with_capacity(capacity: usize) -> Self {
        InsertBatch {
            jobs: Vec::with_capacity(capacity),
            staging: None,
        }
    }

    /// A set bounded by the staging budget.
    pub fn staging() -> Self {
        InsertBatch {
            jobs: Vec::new(),
            staging: Some(StagingBudget::new()),
        }
    }

    pub fn budget(&self) -> Option<&StagingBudget> {
        self.staging.as_ref()
    }

    pub fn budget_mut(&mut self) -> Option<&mut StagingBudget> {
        self.staging.as_mut()
    }

    pub fn jobs(&self) -> &[NewJob] {
        &self.jobs
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Appends a checked job, charging the staging budget first (a refused
    /// job consumes none).
    pub fn push(&mut self, job: NewJob) -> Result<(), Invalid> {
        if let Some(budget) = &mut self.staging {
            budget.charge(job.staged_bytes())?;
        }
        self.jobs.push(job);
        Ok(())
    }

    /// Where the batch stands now, to return to with [`InsertBatch::rollback`].
    pub fn mark(&self) -> Mark {
        Mark {
            len: self.jobs.len(),
            staging: self.staging.clone(),
        }
    }

    /// Drops every job pushed since `mark`, and the budget they charged.
    pub fn rollback(&mut self, mark: Mark) {
        self.jobs.truncate(mark.len);
        self.staging = mark.staging;
    }

    /// Appends every job of `other`, without charging any budget.
    pub fn append(&mut self, other: &[NewJob]) {
        self.jobs.extend_from_slice(other);
    }

    /// The jobs as one JSON array of objects, for
    /// `jsonb_populate_recordset(NULL::awa.job_input, …)`.
    pub fn json_rows(&self) -> String {
        let mut writer = JsonWriter::with_capacity(self.jobs.len() * 160);
        writer.begin_array();
        for (index, job) in self.jobs.iter().enumerate() {
            if index > 0 {
                writer.comma();
            }
            job.write_json(&mut writer);
        }
        writer.end_array();
        writer.out
    }

    pub fn unique_keys(&self) -> Vec<Option<[u8; UNIQUE_KEY_BYTES]>> {
        self.jobs
            .iter()
            .map(|job| job.unique.map(|unique| unique.key))
            .collect()
    }

    pub fn has_unique(&self) -> bool {
        self.jobs.iter().any(|job| job.unique.is_some())
    }

    /// Positions of the jobs an insert skipping duplicates wrote, given the
    /// keys it reports inserted.
    pub fn written(&self, inserted: &[[u8; UNIQUE_KEY_BYTES]]) -> Vec<usize> {
        unique::rows_written(&self.unique_keys(), inserted)
    }

    /// Queues receiving jobs available at `now_us` (to notify), sorted.
    pub fn available_queues(&self, now_us: i64) -> Vec<String> {
        let queues: BTreeSet<&str> = self
            .jobs
            .iter()
            .filter(|job| job.is_available(now_us))
            .map(|job| job.queue.as_str())
            .collect();
        queues.into_iter().map(str::to_owned).collect()
    }

    /// Lanes (queue, priority) receiving jobs available at `now_us` with an
    /// earlier `run_at` of their own, each with the earliest such `run_at`:
    /// keyed before the insert's enqueue time, they may land behind their
    /// lane's hint, which must be lowered (`jobs_lower_lanes`). Sorted.
    pub fn backdated_lanes(&self, now_us: i64) -> Vec<(String, i16, i64)> {
        let mut earliest: BTreeMap<(&str, i16), i64> = BTreeMap::new();
        for job in &self.jobs {
            if let Some(run_at_us) = job.run_at_us.filter(|&micros| micros < now_us) {
                earliest
                    .entry((job.queue.as_str(), job.priority))
                    .and_modify(|micros| *micros = (*micros).min(run_at_us))
                    .or_insert(run_at_us);
            }
        }
        earliest
            .into_iter()
            .map(|((queue, priority), micros)| (queue.to_owned(), priority, micros))
            .collect()
    }

    /// The partition lanes (queue, priority, partition key) the batch's
    /// partitioned jobs belong to, each once, sorted: a COPY opens them
    /// before it writes (`jobs_copy_open_partition_lanes`), so the insert
    /// trigger need not look for each row's.
    pub fn partition_lanes(&self) -> Vec<(String, i16, String)> {
        let lanes: BTreeSet<(&str, i16, &str)> = self
            .jobs
            .iter()
            .filter_map(|job| {
                let key = job.partition_key.as_deref()?;
                Some((job.queue.as_str(), job.priority, key))
            })
            .collect();
        lanes
            .into_iter()
            .map(|(queue, priority, key)| (queue.to_owned(), priority, key.to_owned()))
            .collect()
    }

    /// The columns [`InsertBatch::copy_text`] writes, in order. `run_at`
    /// always: a column COPY leaves to its default is filled by
    /// `awa.enqueue_time_v1()`, a volatile function, and `PostgreSQL` then
    /// writes the rows one by one instead of in batches.
    pub fn copy_columns(&self, with_ids: bool) -> Vec<&'static str> {
        let mut columns = Vec::with_capacity(14);
        if with_ids {
            columns.push("id");
        }
        columns.extend([
            "kind",
            "queue",
            "args",
            "state",
            "priority",
            "max_attempts",
            "max_crashes",
            "tags",
            "metadata",
            "run_at",
        ]);
        let sent = self.optional_columns();
        if sent.limits {
            columns.extend(["timeout_ms", "deadline_at"]);
        }
        if sent.schema_version {
            columns.push("schema_version");
        }
        if sent.rate_class {
            columns.push("rate_class");
        }
        if sent.partition_key {
            columns.push("partition_key");
        }
        columns
    }

    /// The jobs in COPY text format for [`InsertBatch::copy_columns`].
    /// `now_us` is the insert's enqueue time (`jobs_copy_start`): the
    /// `run_at` of jobs without their own, and what decides which are
    /// `available` and which `scheduled`; `ids`, when given, supplies the
    /// job ids (one per job).
    pub fn copy_text(&self, now_us: i64, ids: Option<&[i64]>) -> Result<String, Invalid> {
        if ids.is_some_and(|ids| ids.len() != self.jobs.len()) {
            return Err(Invalid::new("ids", "one id is needed per row"));
        }
        let sent = self.optional_columns();
        let mut out = String::with_capacity(self.jobs.len() * 96);
        for (row, job) in self.jobs.iter().enumerate() {
            if let Some(ids) = ids {
                out.push_str(&ids[row].to_string());
                out.push('\t');
            }
            copy_row(&mut out, job, now_us, sent);
        }
        Ok(out)
    }

    /// The optional columns COPY sends: each only when some job has a value
    /// for it.
    fn optional_columns(&self) -> OptionalColumns {
        let mut sent = OptionalColumns::default();
        for job in &self.jobs {
            sent.limits |= job.timeout_ms.is_some() || job.deadline_us.is_some();
            sent.schema_version |= job.schema_version.is_some();
            sent.rate_class |= job.rate_class.is_some();
            sent.partition_key |= job.partition_key.is_some();
        }
        sent
    }
}

/// Which optional columns a COPY sends (see [`InsertBatch::copy_columns`]).
#[derive(Clone, Copy, Debug, Default)]
#[allow(clippy::struct_excessive_bools)] // one flag per optional column
struct OptionalColumns {
    /// `timeout_ms` and `deadline_at`: some job has its own timeout or deadline.
    limits: bool,
    /// Some job has a schema version past 1.
    schema_version: bool,
    rate_class: bool,
    partition_key: bool,
}

fn copy_row(out: &mut String, job: &NewJob, now_us: i64, sent: OptionalColumns) {
    let state = if job.is_available(now_us) {
        "available"
    } else {
        "scheduled"
    };
    payload::copy_field(out, &job.kind);
    out.push('\t');
    payload::copy_field(out, &job.queue);
    out.push('\t');
    payload::copy_field(out, &job.args);
    out.push('\t');
    out.push_str(state);
    out.push('\t');
    out.push_str(&job.priority.to_string());
    out.push('\t');
    out.push_str(&job.max_attempts.to_string());
    out.push('\t');
    optional_copy_value(out, job.max_crashes.map(|limit| limit.to_string()));
    out.push('\t');
    let tags = job.tags.as_deref().map(payload::text_array_literal);
    optional_copy_field(out, tags.as_deref());
    out.push('\t');
    optional_copy_field(out, job.metadata.as_deref());
    out.push('\t');
    out.push_str(&payload::format_timestamp_us(
        job.run_at_us.unwrap_or(now_us),
    ));
    if sent.limits {
        out.push('\t');
        optional_copy_value(out, job.timeout_ms.map(|ms| ms.to_string()));
        out.push('\t');
        optional_copy_value(out, job.deadline_us.map(payload::format_timestamp_us));
    }
    if sent.schema_version {
        out.push('\t');
        optional_copy_value(out, job.schema_version.map(|version| version.to_string()));
    }
    if sent.rate_class {
        out.push('\t');
        optional_copy_field(out, job.rate_class.as_deref());
    }
    if sent.partition_key {
        out.push('\t');
        optional_copy_field(out, job.partition_key.as_deref());
    }
    out.push('\n');
}

fn optional_copy_value(out: &mut String, value: Option<String>) {
    match value {
        Some(text) => out.push_str(&text),
        None => out.push_str(payload::COPY_NULL),
    }
}

fn optional_copy_field(out: &mut String, value: Option<&str>) {
    match value {
        Some(text) => payload::copy_field(out, text),
        None => out.push_str(payload::COPY_NULL),
    }
}

fn key(writer: &mut JsonWriter, name: &str, first: bool) {
    if !first {
        writer.comma();
    }
    writer.string(name).expect("a field name holds no NUL");
    writer.colon();
}

/// A checked moment as the timestamp text `PostgreSQL` reads exactly
/// (`2026-11-30 16:33:51.123456+00`).
fn timestamp(writer: &mut JsonWriter, micros: i64) {
    writer
        .string(&payload::format_timestamp_us(micros))
        .expect("a timestamp holds no NUL");
}

fn require_object(field: &str, json: &str) -> Result<(), Invalid> {
    if json.starts_with('{') {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "must serialize to a JSON object (got {})",
                crate::json::type_name(json)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes one field of a valid job break its limit.
    type Spoil = Box<dyn Fn(&mut JobInput)>;

    fn input() -> JobInput {
        JobInput {
            kind: "send_email".into(),
            queue: "default".into(),
            args: r#"{"to":"a@example.com"}"#.into(),
            priority: 2,
            max_attempts: 25,
            max_crashes: Some(5),
            run_at_us: None,
            tags: None,
            metadata: None,
            unique: None,
            timeout_ms: None,
            deadline_us: None,
            schema_version: None,
            rate_class: None,
            partition_key: None,
        }
    }

    fn unique() -> UniqueOpts {
        UniqueOpts {
            by_args: true,
            by_queue: false,
            period_s: None,
            states: 0b11_1111,
        }
    }

    #[test]
    fn checks_name_each_field() {
        let cases: Vec<(&str, Spoil)> = vec![
            ("kind", Box::new(|job| job.kind.clear())),
            ("queue", Box::new(|job| job.queue = "q".repeat(201))),
            ("priority", Box::new(|job| job.priority = 5)),
            ("max_attempts", Box::new(|job| job.max_attempts = 0)),
            ("max_crashes", Box::new(|job| job.max_crashes = Some(-1))),
            ("run_at", Box::new(|job| job.run_at_us = Some(i64::MAX))),
            ("timeout", Box::new(|job| job.timeout_ms = Some(0))),
            ("deadline", Box::new(|job| job.deadline_us = Some(i64::MIN))),
            (
                "schema_version",
                Box::new(|job| job.schema_version = Some(0)),
            ),
            (
                "schema_version",
                Box::new(|job| job.schema_version = Some(40_000)),
            ),
            (
                "tags",
                Box::new(|job| job.tags = Some(vec!["t".into(); 21])),
            ),
            ("args", Box::new(|job| job.args = "[1]".into())),
            ("metadata", Box::new(|job| job.metadata = Some("3".into()))),
            (
                "rate_class",
                Box::new(|job| job.rate_class = Some("a b".into())),
            ),
            (
                "partition_key",
                Box::new(|job| job.partition_key = Some(String::new())),
            ),
            (
                "partition_key",
                Box::new(|job| job.partition_key = Some("k".repeat(256))),
            ),
            (
                "partition_key",
                Box::new(|job| job.partition_key = Some("a\tb".into())),
            ),
        ];
        for (field, spoil) in cases {
            let mut job = input();
            spoil(&mut job);
            let refused = NewJob::check(job, None).expect_err(field);
            assert!(refused.field.starts_with(field), "{field}: {refused:?}");
        }
    }

    #[test]
    fn empty_tags_and_metadata_are_none() {
        let mut job = input();
        job.tags = Some(vec![]);
        job.metadata = Some("{}".into());
        let job = NewJob::check(job, None).unwrap();
        assert_eq!((job.tags, job.metadata), (None, None));
    }

    #[test]
    fn json_rows_name_each_present_field() {
        let mut with_everything = input();
        with_everything.tags = Some(vec!["a\"b".into()]);
        with_everything.metadata = Some(r#"{"m":1}"#.into());
        with_everything.run_at_us = Some(0);
        with_everything.timeout_ms = Some(1500);
        with_everything.deadline_us = Some(1_000_000);
        with_everything.unique = Some(unique());
        let mut batch = InsertBatch::with_capacity(2);
        batch.push(NewJob::check(input(), None).unwrap()).unwrap();
        batch
            .push(NewJob::check(with_everything, None).unwrap())
            .unwrap();
        let json = batch.json_rows();
        assert!(json.starts_with(
            r#"[{"kind":"send_email","queue":"default","args":{"to":"a@example.com"},"priority":2,"max_attempts":25,"max_crashes":5},"#
        ));
        assert!(
            json.contains(r#""run_at":"1970-01-01 00:00:00.000000+00""#),
            "{json}"
        );
        assert!(json.contains(r#""tags":["a\"b"],"metadata":{"m":1},"unique_key":"\\x"#));
        assert!(json.contains(r#""unique_states":63,"timeout_ms":1500,"deadline_at":"1970-01-01 00:00:01.000000+00"}]"#), "{json}");
        assert!(crate::json::is_valid(&json));
    }

    #[test]
    fn copy_text_always_sends_run_at_and_limits_only_when_some_job_has_them() {
        let mut batch = InsertBatch::with_capacity(2);
        batch.push(NewJob::check(input(), None).unwrap()).unwrap();
        assert_eq!(
            batch.copy_columns(false),
            [
                "kind",
                "queue",
                "args",
                "state",
                "priority",
                "max_attempts",
                "max_crashes",
                "tags",
                "metadata",
                "run_at"
            ]
        );
        assert!(batch
            .copy_text(1_000, None)
            .unwrap()
            .ends_with("\t1970-01-01 00:00:00.001000+00\n"));
        let mut later = input();
        later.run_at_us = Some(2_000);
        later.timeout_ms = Some(10);
        batch.push(NewJob::check(later, None).unwrap()).unwrap();
        assert_eq!(batch.copy_columns(true).len(), 13);
        let text = batch.copy_text(1_000, Some(&[7, 8])).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("7\tsend_email\tdefault\t"));
        assert!(lines[0].contains("\tavailable\t2\t25\t5\t\\N\t\\N\t"));
        assert!(lines[1].contains("\tscheduled\t"));
        assert!(lines[1].ends_with("\t10\t\\N"));
        assert!(batch.copy_text(1_000, Some(&[7])).is_err());
        assert_eq!(batch.available_queues(1_000), ["default"]);
    }

    #[test]
    fn version_one_is_written_as_no_version_and_later_ones_as_given() {
        let mut first = input();
        first.schema_version = Some(1);
        let mut third = input();
        third.schema_version = Some(3);
        let mut batch = InsertBatch::with_capacity(2);
        batch.push(NewJob::check(first, None).unwrap()).unwrap();
        assert!(!batch.json_rows().contains("schema_version"));
        assert!(!batch.copy_columns(false).contains(&"schema_version"));
        batch.push(NewJob::check(third, None).unwrap()).unwrap();
        assert!(batch.json_rows().ends_with(r#""schema_version":3}]"#));
        assert_eq!(batch.copy_columns(false).last(), Some(&"schema_version"));
        let text = batch.copy_text(1_000, None).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("\t\\N"), "{text}");
        assert!(lines[1].ends_with("\t3"), "{text}");
    }

    #[test]
    fn a_partition_key_is_written_where_given_and_copy_sends_it_only_when_some_job_has_one() {
        let mut batch = InsertBatch::with_capacity(2);
        batch.push(NewJob::check(input(), None).unwrap()).unwrap();
        assert!(!batch.json_rows().contains("partition_key"));
        assert!(!batch.copy_columns(false).contains(&"partition_key"));
        let mut keyed = input();
        keyed.partition_key = Some("tenant\\7 \"eu\"".into());
        batch.push(NewJob::check(keyed, None).unwrap()).unwrap();
        assert!(
            batch
                .json_rows()
                .ends_with(r#""partition_key":"tenant\\7 \"eu\""}]"#),
            "{}",
            batch.json_rows()
        );
        assert_eq!(batch.copy_columns(false).last(), Some(&"partition_key"));
        let text = batch.copy_text(1_000, None).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("+00\t\\N"), "{text}");
        assert!(lines[1].ends_with("+00\ttenant\\\\7 \"eu\""), "{text}");
    }

    #[test]
    fn backdated_lanes_are_the_earliest_past_run_at_of_each_queue_and_priority() {
        let mut batch = InsertBatch::with_capacity(5);
        let at = |queue: &str, priority: i64, run_at_us: Option<i64>| {
            let mut job = input();
            job.queue = queue.to_owned();
            job.priority = priority;
            job.run_at_us = run_at_us;
            NewJob::check(job, None).unwrap()
        };
        for job in [
            at("a", 2, Some(500)),
            at("a", 2, Some(300)),
            at("a", 1, Some(900)),
            at("b", 2, None),
            at("b", 2, Some(2_000)),
        ] {
            batch.push(job).unwrap();
        }
        assert_eq!(
            batch.backdated_lanes(1_000),
            [("a".to_owned(), 1, 900), ("a".to_owned(), 2, 300)]
        );
    }

    #[test]
    fn partition_lanes_are_each_queue_priority_and_key_once_sorted() {
        let mut batch = InsertBatch::with_capacity(5);
        let at = |queue: &str, priority: i64, key: Option<&str>| {
            let mut job = input();
            job.queue = queue.to_owned();
            job.priority = priority;
            job.partition_key = key.map(str::to_owned);
            NewJob::check(job, None).unwrap()
        };
        for job in [
            at("b", 2, Some("t1")),
            at("a", 2, Some("t2")),
            at("a", 2, None),
            at("b", 2, Some("t1")),
            at("a", 1, Some("t2")),
        ] {
            batch.push(job).unwrap();
        }
        assert_eq!(
            batch.partition_lanes(),
            [
                ("a".to_owned(), 1, "t2".to_owned()),
                ("a".to_owned(), 2, "t2".to_owned()),
                ("b".to_owned(), 2, "t1".to_owned())
            ]
        );
    }

    #[test]
    fn written_positions_follow_the_inserted_keys() {
        let mut batch = InsertBatch::with_capacity(3);
        let mut keyed = input();
        keyed.unique = Some(unique());
        for job in [input(), keyed.clone(), keyed] {
            batch.push(NewJob::check(job, None).unwrap()).unwrap();
        }
        let key = batch.jobs()[1].unique.unwrap().key;
        assert_eq!(batch.written(&[key]), [0, 1]);
        assert_eq!(batch.written(&[]), [0]);
        assert!(batch.has_unique());
    }

    #[test]
    fn a_staging_batch_charges_its_budget_and_a_refused_job_costs_nothing() {
        let mut batch = InsertBatch::staging();
        let mut huge = input();
        huge.args = format!(r#"{{"x":"{}"}}"#, "y".repeat(staging::MAX_STAGED_BYTES));
        assert!(batch.push(NewJob::check(huge, None).unwrap()).is_err());
        assert_eq!(batch.budget().unwrap().bytes(), 0);
        let mark = batch.mark();
        batch.push(NewJob::check(input(), None).unwrap()).unwrap();
        assert_eq!(batch.len(), 1);
        batch.rollback(mark);
        assert_eq!((batch.len(), batch.budget().unwrap().bytes()), (0, 0));
    }
}
