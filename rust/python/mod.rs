//! The `awa._core` extension module: the only place that speaks `PyO3`.
//!
//! `PyO3` hands arguments over by value (`Vec<T>` from Python lists), hence
//! the `needless_pass_by_value` allowance on this module.
#![allow(clippy::needless_pass_by_value)]
//!
//! Every class and function here is a thin wrapper over the pure modules of
//! the crate; `python/awa/_core.pyi` documents them for Python readers.

mod codec;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::completion::{self, Attempt, Columns, ErrorReport, Outcome};
use crate::dispatch::{self, ClaimPlan};
use crate::json::{write_lossy_string, JsonWriter};
use crate::payload::{self, Invalid};
use crate::rescue::{self, Orphan};
use crate::retry::{self, Jitter};
use crate::staging::{self, StagingBudget};
use crate::state::FailureReason;
use crate::unique::{self, UniqueOpts, UNIQUE_KEY_BYTES};

pyo3::import_exception!(awa.errors, ValidationError);
pyo3::import_exception!(awa.errors, StagingError);

/// How a value that breaks a limit is reported.
enum Refusal<'a> {
    /// `ValidationError`, its message prefixed (`jobs[3].`) in a batch.
    Validation { prefix: &'a str },
    /// `StagingError`, for a follow-up a handler stages.
    Staging,
}

impl Refusal<'_> {
    fn err(&self, invalid: &Invalid) -> PyErr {
        match self {
            Refusal::Validation { prefix } => {
                ValidationError::new_err((format!("{prefix}{invalid}"), invalid.field.clone()))
            }
            Refusal::Staging => StagingError::new_err((invalid.to_string(), invalid.field.clone())),
        }
    }
}

fn encode_or_raise(value: &Bound<'_, PyAny>, root: &str, refusal: &Refusal) -> PyResult<String> {
    codec::encode(value, root).map_err(|err| match err {
        codec::EncodeError::Invalid(invalid) => refusal.err(&invalid),
        codec::EncodeError::Python(err) => err,
    })
}

/// `SendEmail` → `send_email`.
#[pyfunction]
fn derive_kind(class_name: &str) -> String {
    payload::derive_kind(class_name)
}

/// Encodes a value as compact JSON; `field` names it in errors.
#[pyfunction]
#[pyo3(signature = (value, field = "args"))]
fn encode_json(value: &Bound<'_, PyAny>, field: &str) -> PyResult<String> {
    encode_or_raise(value, field, &Refusal::Validation { prefix: "" })
}

/// Reads JSON text into Python objects.
#[pyfunction]
fn decode_json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    codec::decode(py, text)
}

/// Seconds to wait after failure number `failures`; `unit` in [0, 1).
#[pyfunction]
fn backoff_seconds(failures: u32, unit: f64) -> f64 {
    retry::backoff_s(failures, unit)
}

/// Validated, encoded rows for every insert path, and the follow-ups a
/// handler stages (`staging = True`).
#[pyclass(module = "awa._core")]
#[derive(Clone)]
struct InsertRows {
    kinds: Vec<String>,
    queues: Vec<String>,
    args: Vec<String>,
    priorities: Vec<i16>,
    max_attempts: Vec<i16>,
    max_crashes: Vec<Option<i16>>,
    run_at_us: Vec<Option<i64>>,
    /// The tags as given (`None`: no tags); written as `text[]` literals.
    tags: Vec<Option<Vec<String>>>,
    metadata: Vec<Option<String>>,
    unique_keys: Vec<Option<[u8; UNIQUE_KEY_BYTES]>>,
    unique_states: Vec<Option<i16>>,
    /// Per-job attempt timeouts (milliseconds) and overall deadlines.
    timeout_ms: Vec<Option<i32>>,
    deadline_us: Vec<Option<i64>>,
    /// What the attempt has staged, in a staging set.
    staging: Option<StagingBudget>,
}

#[pymethods]
impl InsertRows {
    #[new]
    #[pyo3(signature = (capacity = 1, *, staging = false))]
    fn new(capacity: usize, staging: bool) -> Self {
        InsertRows {
            kinds: Vec::with_capacity(capacity),
            queues: Vec::with_capacity(capacity),
            args: Vec::with_capacity(capacity),
            priorities: Vec::with_capacity(capacity),
            max_attempts: Vec::with_capacity(capacity),
            max_crashes: Vec::with_capacity(capacity),
            run_at_us: Vec::with_capacity(capacity),
            tags: Vec::with_capacity(capacity),
            metadata: Vec::with_capacity(capacity),
            unique_keys: Vec::with_capacity(capacity),
            unique_states: Vec::with_capacity(capacity),
            timeout_ms: Vec::with_capacity(capacity),
            deadline_us: Vec::with_capacity(capacity),
            staging: staging.then(StagingBudget::new),
        }
    }

    /// Checks every limit and encodes one job; raises `ValidationError`
    /// naming the field (prefixed with the job's position when `batch`),
    /// or `StagingError` in a staging set.
    #[pyo3(signature = (args, kind, queue, priority, max_attempts, max_crashes, run_at_us, tags, metadata, batch = false, unique = None, now_us = None, timeout_ms = None, deadline_us = None))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        args: &Bound<'_, PyAny>,
        kind: &Bound<'_, PyAny>,
        queue: &Bound<'_, PyAny>,
        priority: &Bound<'_, PyAny>,
        max_attempts: &Bound<'_, PyAny>,
        max_crashes: Option<&Bound<'_, PyAny>>,
        run_at_us: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        batch: bool,
        unique: Option<&Bound<'_, PyAny>>,
        now_us: Option<i64>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        deadline_us: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if let Some(budget) = &self.staging {
            budget
                .ensure_open()
                .map_err(|sealed| StagingError::new_err((sealed.to_string(), None::<String>)))?;
        }
        let prefix = if batch && self.staging.is_none() {
            format!("jobs[{}].", self.kinds.len())
        } else {
            String::new()
        };
        let refusal = if self.staging.is_some() {
            Refusal::Staging
        } else {
            Refusal::Validation { prefix: &prefix }
        };
        let fail = |invalid: Invalid| refusal.err(&invalid);
        let kind = text_field("kind", kind).map_err(&fail)?;
        payload::check_name("kind", &kind).map_err(&fail)?;
        let queue = text_field("queue", queue).map_err(&fail)?;
        payload::check_name("queue", &queue).map_err(&fail)?;
        let priority = payload::check_priority(int_field("priority", priority).map_err(&fail)?)
            .map_err(&fail)?;
        let max_attempts =
            payload::check_max_attempts(int_field("max_attempts", max_attempts).map_err(&fail)?)
                .map_err(&fail)?;
        let max_crashes =
            optional_int(max_crashes, "max_crashes", payload::check_max_crashes).map_err(&fail)?;
        let run_at_us = optional_int(run_at_us, "run_at", payload::check_run_at).map_err(&fail)?;
        let timeout_ms =
            optional_int(timeout_ms, "timeout", payload::check_timeout_ms).map_err(&fail)?;
        let deadline_us =
            optional_int(deadline_us, "deadline", payload::check_deadline).map_err(&fail)?;
        let tags = match tags {
            None => None,
            Some(value) => {
                let tags = tag_list(value).map_err(&fail)?;
                payload::check_tags(&tags).map_err(&fail)?;
                (!tags.is_empty()).then_some(tags)
            }
        };
        let metadata = match metadata {
            None => None,
            Some(value) => {
                let json = encode_or_raise(value, "metadata", &refusal)?;
                require_object("metadata", &json).map_err(&fail)?;
                (json != "{}").then_some(json)
            }
        };
        let args = encode_or_raise(args, "args", &refusal)?;
        require_object("args", &args).map_err(&fail)?;
        let (unique_key, unique_states) = match unique {
            None => (None, None),
            Some(options) => {
                let (key, states) = unique_opts(options)
                    .and_then(|opts| opts.key(&kind, &queue, &args, now_us))
                    .map_err(&fail)?;
                (Some(key), Some(states))
            }
        };
        if let Some(budget) = &mut self.staging {
            let bytes = staging::row_bytes(
                &kind,
                &queue,
                &args,
                metadata.as_deref(),
                tags.as_deref().unwrap_or_default(),
            );
            budget.charge(bytes).map_err(&fail)?;
        }

        self.kinds.push(kind);
        self.queues.push(queue);
        self.args.push(args);
        self.priorities.push(priority);
        self.max_attempts.push(max_attempts);
        self.max_crashes.push(max_crashes);
        self.run_at_us.push(run_at_us);
        self.tags.push(tags);
        self.metadata.push(metadata);
        self.unique_keys.push(unique_key);
        self.unique_states.push(unique_states);
        self.timeout_ms.push(timeout_ms);
        self.deadline_us.push(deadline_us);
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.kinds.len()
    }

    /// One list per column, for `INSERT … SELECT … FROM unnest(...)`:
    /// `kinds`, `queues`, `args`, `priorities`, `max_attempts`, `max_crashes`,
    /// `run_at` (timestamp text), `tags` (array literals), `metadata`,
    /// `unique_keys` (bytes), `unique_states`, `timeout_ms`, `deadline`
    /// (timestamp text).
    fn columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let tags: Vec<Option<String>> = self
            .tags
            .iter()
            .map(|tags| tags.as_deref().map(payload::text_array_literal))
            .collect();
        let run_at = timestamp_texts(&self.run_at_us);
        let deadline = timestamp_texts(&self.deadline_us);
        let unique_keys = PyList::new(
            py,
            self.unique_keys
                .iter()
                .map(|key| key.map(|key| PyBytes::new(py, &key))),
        )?;
        // Thirteen columns: more than PyO3 converts as one tuple.
        let columns = [
            self.kinds.clone().into_pyobject(py)?.into_any(),
            self.queues.clone().into_pyobject(py)?.into_any(),
            self.args.clone().into_pyobject(py)?.into_any(),
            self.priorities.clone().into_pyobject(py)?.into_any(),
            self.max_attempts.clone().into_pyobject(py)?.into_any(),
            self.max_crashes.clone().into_pyobject(py)?.into_any(),
            run_at.into_pyobject(py)?.into_any(),
            tags.into_pyobject(py)?.into_any(),
            self.metadata.clone().into_pyobject(py)?.into_any(),
            unique_keys.into_any(),
            self.unique_states.clone().into_pyobject(py)?.into_any(),
            self.timeout_ms.clone().into_pyobject(py)?.into_any(),
            deadline.into_pyobject(py)?.into_any(),
        ];
        PyTuple::new(py, columns)
    }

    /// One dict per row, with the tags as given: for showing staged
    /// follow-ups.
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        (0..self.kinds.len())
            .map(|row| {
                let dict = PyDict::new(py);
                dict.set_item("kind", &self.kinds[row])?;
                dict.set_item("queue", &self.queues[row])?;
                dict.set_item("args", &self.args[row])?;
                dict.set_item("priority", self.priorities[row])?;
                dict.set_item("max_attempts", self.max_attempts[row])?;
                dict.set_item("max_crashes", self.max_crashes[row])?;
                dict.set_item("run_at_us", self.run_at_us[row])?;
                dict.set_item("tags", &self.tags[row])?;
                dict.set_item("metadata", &self.metadata[row])?;
                dict.set_item(
                    "unique_key",
                    self.unique_keys[row].map(|key| PyBytes::new(py, &key)),
                )?;
                dict.set_item("unique_states", self.unique_states[row])?;
                dict.set_item("timeout_ms", self.timeout_ms[row])?;
                dict.set_item("deadline_us", self.deadline_us[row])?;
                Ok(dict)
            })
            .collect()
    }

    /// The rows as one JSON array of arrays (see `_core.pyi`), for a
    /// statement that reads them with `jsonb_array_elements`.
    fn json_rows(&self) -> String {
        let mut writer = JsonWriter::with_capacity(self.kinds.len() * 160);
        writer.begin_array();
        for row in 0..self.kinds.len() {
            if row > 0 {
                writer.comma();
            }
            self.write_json_row(&mut writer, row);
        }
        writer.end_array();
        writer.out
    }

    /// Positions (0-based) of the rows an insert skipping duplicates wrote,
    /// given the unique keys it reports inserted.
    fn written(&self, inserted_keys: Option<Vec<Vec<u8>>>) -> PyResult<Vec<usize>> {
        let inserted = inserted_keys
            .unwrap_or_default()
            .into_iter()
            .map(|key| {
                <[u8; UNIQUE_KEY_BYTES]>::try_from(key.as_slice()).map_err(|_| {
                    PyValueError::new_err(format!(
                        "a unique key has {UNIQUE_KEY_BYTES} bytes (got {})",
                        key.len()
                    ))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(unique::rows_written(&self.unique_keys, &inserted))
    }

    /// Whether any row carries a unique key.
    fn has_unique(&self) -> bool {
        self.unique_keys.iter().any(Option::is_some)
    }

    /// Appends every row of `other` (which may be this set). A staging set
    /// cannot be extended: that would bypass its limits.
    fn extend(slf: &Bound<'_, Self>, other: &Bound<'_, Self>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        if this.staging.is_some() {
            return Err(PyValueError::new_err(
                "a staging set cannot be extended; stage each follow-up with add()",
            ));
        }
        if slf.is(other) {
            let copy = this.clone();
            this.append(&copy);
        } else {
            this.append(&*other.try_borrow()?);
        }
        Ok(())
    }

    /// Closes a staging set: `add` refuses from now on.
    fn seal(&mut self) -> PyResult<()> {
        match &mut self.staging {
            Some(budget) => {
                budget.seal();
                Ok(())
            }
            None => Err(PyValueError::new_err("only a staging set can be sealed")),
        }
    }

    /// Whether this staging set is closed (never, for other sets).
    #[getter]
    fn sealed(&self) -> bool {
        self.staging.as_ref().is_some_and(StagingBudget::is_sealed)
    }

    /// Bytes staged so far (0 for other sets).
    #[getter]
    fn staged_bytes(&self) -> usize {
        self.staging.as_ref().map_or(0, StagingBudget::bytes)
    }

    /// The rows in `PostgreSQL`'s COPY text format, for the columns
    /// `copy_columns(with_ids, with_run_at)` names. `now_us` decides which
    /// rows are `available` and which `scheduled`; `ids`, when given,
    /// supplies the job ids.
    #[pyo3(signature = (now_us, ids = None))]
    fn copy_text<'py>(
        &self,
        py: Python<'py>,
        now_us: i64,
        ids: Option<Vec<i64>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if let Some(ids) = &ids {
            if ids.len() != self.kinds.len() {
                return Err(PyValueError::new_err("one id is needed per row"));
            }
        }
        let with_run_at = self.has_run_at();
        let with_limits = self.has_limits();
        let mut out = String::with_capacity(self.kinds.len() * 96);
        for row in 0..self.kinds.len() {
            if let Some(ids) = &ids {
                out.push_str(&ids[row].to_string());
                out.push('\t');
            }
            self.copy_row(&mut out, row, now_us, with_run_at, with_limits);
        }
        Ok(PyBytes::new(py, out.as_bytes()))
    }

    /// The column list matching `copy_text`.
    #[pyo3(signature = (with_ids = false))]
    fn copy_columns(&self, with_ids: bool) -> Vec<&'static str> {
        let mut columns = Vec::with_capacity(11);
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
        ]);
        if self.has_run_at() {
            columns.push("run_at");
        }
        if self.has_limits() {
            columns.extend(["timeout_ms", "deadline_at"]);
        }
        columns
    }

    /// Queues that receive jobs available at `now_us` (to notify).
    fn available_queues(&self, now_us: i64) -> Vec<String> {
        let mut queues = BTreeSet::new();
        for (row, queue) in self.queues.iter().enumerate() {
            if self.is_available(row, now_us) {
                queues.insert(queue.clone());
            }
        }
        queues.into_iter().collect()
    }
}

impl InsertRows {
    /// Appends the rows of `other`, without checking any staging budget.
    fn append(&mut self, other: &InsertRows) {
        self.kinds.extend_from_slice(&other.kinds);
        self.queues.extend_from_slice(&other.queues);
        self.args.extend_from_slice(&other.args);
        self.priorities.extend_from_slice(&other.priorities);
        self.max_attempts.extend_from_slice(&other.max_attempts);
        self.max_crashes.extend_from_slice(&other.max_crashes);
        self.run_at_us.extend_from_slice(&other.run_at_us);
        self.tags.extend_from_slice(&other.tags);
        self.metadata.extend_from_slice(&other.metadata);
        self.unique_keys.extend_from_slice(&other.unique_keys);
        self.unique_states.extend_from_slice(&other.unique_states);
        self.timeout_ms.extend_from_slice(&other.timeout_ms);
        self.deadline_us.extend_from_slice(&other.deadline_us);
    }

    /// One row as a JSON array, in the order `json_rows` documents. Text was
    /// checked for NUL characters when the row was added.
    fn write_json_row(&self, writer: &mut JsonWriter, row: usize) {
        writer.begin_array();
        write_lossy_string(writer, &self.kinds[row]);
        writer.comma();
        write_lossy_string(writer, &self.queues[row]);
        writer.comma();
        writer.raw(&self.args[row]);
        writer.comma();
        writer.i64(self.priorities[row].into());
        writer.comma();
        writer.i64(self.max_attempts[row].into());
        writer.comma();
        optional_json_int(writer, self.max_crashes[row].map(i64::from));
        writer.comma();
        optional_json_timestamp(writer, self.run_at_us[row]);
        writer.comma();
        match &self.tags[row] {
            Some(tags) if !tags.is_empty() => {
                writer.begin_array();
                for (index, tag) in tags.iter().enumerate() {
                    if index > 0 {
                        writer.comma();
                    }
                    write_lossy_string(writer, tag);
                }
                writer.end_array();
            }
            _ => writer.null(),
        }
        writer.comma();
        match &self.metadata[row] {
            Some(json) => writer.raw(json),
            None => writer.null(),
        }
        writer.comma();
        match &self.unique_keys[row] {
            Some(key) => {
                let mut hex = String::with_capacity(2 * key.len() + 2);
                hex.push('"');
                for byte in key {
                    let _ = write!(hex, "{byte:02x}");
                }
                hex.push('"');
                writer.raw(&hex);
            }
            None => writer.null(),
        }
        writer.comma();
        optional_json_int(writer, self.unique_states[row].map(i64::from));
        writer.comma();
        optional_json_int(writer, self.timeout_ms[row].map(i64::from));
        writer.comma();
        optional_json_timestamp(writer, self.deadline_us[row]);
        writer.end_array();
    }

    fn has_run_at(&self) -> bool {
        self.run_at_us.iter().any(Option::is_some)
    }

    /// Whether any row has its own timeout or deadline (COPY then sends both).
    fn has_limits(&self) -> bool {
        self.timeout_ms.iter().any(Option::is_some) || self.deadline_us.iter().any(Option::is_some)
    }

    fn is_available(&self, row: usize, now_us: i64) -> bool {
        self.run_at_us[row].is_none_or(|micros| micros <= now_us)
    }

    fn copy_row(
        &self,
        out: &mut String,
        row: usize,
        now_us: i64,
        with_run_at: bool,
        with_limits: bool,
    ) {
        let state = if self.is_available(row, now_us) {
            "available"
        } else {
            "scheduled"
        };
        payload::copy_field(out, &self.kinds[row]);
        out.push('\t');
        payload::copy_field(out, &self.queues[row]);
        out.push('\t');
        payload::copy_field(out, &self.args[row]);
        out.push('\t');
        out.push_str(state);
        out.push('\t');
        out.push_str(&self.priorities[row].to_string());
        out.push('\t');
        out.push_str(&self.max_attempts[row].to_string());
        out.push('\t');
        match self.max_crashes[row] {
            Some(limit) => out.push_str(&limit.to_string()),
            None => out.push_str(payload::COPY_NULL),
        }
        out.push('\t');
        let tags = self.tags[row].as_deref().map(payload::text_array_literal);
        optional_copy_field(out, tags.as_deref());
        out.push('\t');
        optional_copy_field(out, self.metadata[row].as_deref());
        if with_run_at {
            out.push('\t');
            // Rows without their own run_at run now, by the caller's clock.
            let micros = self.run_at_us[row].unwrap_or(now_us);
            out.push_str(&payload::format_timestamp_us(micros));
        }
        if with_limits {
            out.push('\t');
            match self.timeout_ms[row] {
                Some(ms) => out.push_str(&ms.to_string()),
                None => out.push_str(payload::COPY_NULL),
            }
            out.push('\t');
            match self.deadline_us[row] {
                Some(micros) => out.push_str(&payload::format_timestamp_us(micros)),
                None => out.push_str(payload::COPY_NULL),
            }
        }
        out.push('\n');
    }
}

/// An optional integer argument, checked when given.
fn optional_int<T>(
    value: Option<&Bound<'_, PyAny>>,
    field: &str,
    check: impl Fn(i64) -> Result<T, Invalid>,
) -> Result<Option<T>, Invalid> {
    value
        .map(|value| int_field(field, value).and_then(&check))
        .transpose()
}

fn optional_json_int(writer: &mut JsonWriter, value: Option<i64>) {
    match value {
        Some(number) => writer.i64(number),
        None => writer.null(),
    }
}

/// A checked moment as the timestamp text `PostgreSQL` reads exactly
/// (`2026-11-30 16:33:51.123456+00`), or null.
fn optional_json_timestamp(writer: &mut JsonWriter, micros: Option<i64>) {
    match micros {
        Some(micros) => writer
            .string(&payload::format_timestamp_us(micros))
            .expect("a timestamp holds no NUL"),
        None => writer.null(),
    }
}

/// Checked moments as timestamp text, for a `text[]` cast to `timestamptz`:
/// exact over years 1–9999, where arithmetic on an interval is not.
fn timestamp_texts(micros: &[Option<i64>]) -> Vec<Option<String>> {
    micros
        .iter()
        .map(|micros| micros.map(payload::format_timestamp_us))
        .collect()
}

fn optional_copy_field(out: &mut String, value: Option<&str>) {
    match value {
        Some(text) => payload::copy_field(out, text),
        None => out.push_str(payload::COPY_NULL),
    }
}

/// `unique = (by_args, by_queue, period_s, states_mask)`.
fn unique_opts(value: &Bound<'_, PyAny>) -> Result<UniqueOpts, Invalid> {
    let (by_args, by_queue, period_s, states) = value
        .extract::<(bool, bool, Option<i64>, i64)>()
        .map_err(|_| {
        Invalid::new(
            "unique_opts",
            format!(
                "must be a tuple (by_args, by_queue, period_s, states_mask) (got {})",
                type_name(value)
            ),
        )
    })?;
    Ok(UniqueOpts {
        by_args,
        by_queue,
        period_s,
        states,
    })
}

fn text_field(field: &str, value: &Bound<'_, PyAny>) -> Result<String, Invalid> {
    let text = value.cast::<PyString>().map_err(|_| {
        Invalid::new(
            field,
            format!("must be a string (got {})", type_name(value)),
        )
    })?;
    text.to_str()
        .map(str::to_owned)
        .map_err(|_| Invalid::new(field, "holds a lone surrogate, which is not valid Unicode"))
}

fn int_field(field: &str, value: &Bound<'_, PyAny>) -> Result<i64, Invalid> {
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(Invalid::new(field, "must be an integer (got bool)"));
    }
    if !value.is_instance_of::<pyo3::types::PyInt>() {
        return Err(Invalid::new(
            field,
            format!("must be an integer (got {})", type_name(value)),
        ));
    }
    value
        .extract::<i64>()
        .map_err(|_| Invalid::new(field, "is far out of range"))
}

fn tag_list(value: &Bound<'_, PyAny>) -> Result<Vec<String>, Invalid> {
    if value.is_instance_of::<PyString>() {
        return Err(Invalid::new(
            "tags",
            "must be a list of strings, not a string",
        ));
    }
    let iter = value.try_iter().map_err(|_| {
        Invalid::new(
            "tags",
            format!("must be a list of strings (got {})", type_name(value)),
        )
    })?;
    let mut tags = Vec::new();
    for (index, item) in iter.enumerate() {
        let item = item.map_err(|err| Invalid::new("tags", err.to_string()))?;
        tags.push(text_field(&format!("tags[{index}]"), &item)?);
    }
    Ok(tags)
}

fn require_object(field: &str, json: &str) -> Result<(), Invalid> {
    if json.starts_with('{') {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "must serialize to a JSON object (got {})",
                codec::json_type_name(json)
            ),
        ))
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "an unknown type".into(), |name| name.to_string())
}

/// Claim sizing and the set of jobs this worker holds.
#[pyclass(module = "awa._core")]
struct Dispatcher {
    inner: dispatch::Dispatcher,
    pending: HashMap<u64, ClaimPlan>,
    next_plan_id: u64,
}

#[pymethods]
impl Dispatcher {
    #[new]
    #[pyo3(signature = (queues, claim_batch_max, global_max_workers = None))]
    fn new(
        queues: Vec<(String, u32)>,
        claim_batch_max: u32,
        global_max_workers: Option<u32>,
    ) -> PyResult<Self> {
        let inner = dispatch::Dispatcher::new(queues, claim_batch_max, global_max_workers)
            .map_err(PyValueError::new_err)?;
        Ok(Dispatcher {
            inner,
            pending: HashMap::new(),
            next_plan_id: 0,
        })
    }

    /// Reserves free slots and returns `(plan_id, queues, counts)` to claim,
    /// or `None` when nothing is worth claiming. Several plans may be in
    /// flight; each must be settled.
    fn plan_claim(&mut self) -> Option<(u64, Vec<String>, Vec<u32>)> {
        let plan = self.inner.plan_claim()?;
        let names = plan
            .wanted
            .iter()
            .map(|&(index, _)| self.inner.queues()[index].name.clone())
            .collect();
        let counts = plan.wanted.iter().map(|&(_, count)| count).collect();
        self.next_plan_id += 1;
        self.pending.insert(self.next_plan_id, plan);
        Some((self.next_plan_id, names, counts))
    }

    /// A job claimed by plan `plan_id` starts; false when it does not fit
    /// the plan (or the plan is unknown).
    fn start(&mut self, plan_id: u64, job_id: i64, run_lease: i64, queue: &str) -> bool {
        let (Some(index), Some(plan)) = (
            self.inner.queue_index(queue),
            self.pending.get_mut(&plan_id),
        ) else {
            return false;
        };
        self.inner.start(plan, job_id, run_lease, index)
    }

    /// Gives back the unused part of a plan; an unknown id is an error. A
    /// claim that `failed` leaves its queues ready for the retry.
    #[pyo3(signature = (plan_id, failed = false))]
    fn settle_claim(&mut self, plan_id: u64, failed: bool) -> PyResult<()> {
        let plan = self.pending.remove(&plan_id).ok_or_else(|| {
            PyRuntimeError::new_err(format!("no claim plan {plan_id} is pending"))
        })?;
        self.inner.settle_claim(&plan, failed);
        Ok(())
    }

    /// Frees the slot of a finished job; returns whether a claim could now
    /// take something.
    fn finish(&mut self, job_id: i64) -> bool {
        self.inner.finish(job_id);
        self.inner.can_claim()
    }

    fn can_claim(&self) -> bool {
        self.inner.can_claim()
    }

    /// A notification or poll says the queue may have jobs; false for a
    /// queue this worker does not serve.
    fn mark_ready(&mut self, queue: &str) -> bool {
        match self.inner.queue_index(queue) {
            Some(index) => {
                self.inner.mark_ready(index);
                true
            }
            None => false,
        }
    }

    fn mark_all_ready(&mut self) {
        self.inner.mark_all_ready();
    }

    /// `(job ids, run leases)` of every job held.
    fn held(&self) -> (Vec<i64>, Vec<i64>) {
        self.inner
            .held()
            .map(|(id, held)| (id, held.run_lease))
            .unzip()
    }

    fn lease_of(&self, job_id: i64) -> Option<i64> {
        self.inner.lease_of(job_id)
    }

    /// Handlers running (or claimed and about to run) in `queue`.
    fn running(&self, queue: &str) -> u32 {
        self.inner
            .queue_index(queue)
            .map_or(0, |index| self.inner.queues()[index].running)
    }

    fn __len__(&self) -> usize {
        self.inner.held_count()
    }
}

/// Outcomes buffered for one guarded batch update.
#[pyclass(module = "awa._core")]
struct CompletionBatch {
    inner: completion::CompletionBatch,
}

fn attempt(job_id: i64, run_lease: i64, attempt: i32, max_attempts: i32, crashes: i32) -> Attempt {
    Attempt {
        id: job_id,
        run_lease,
        attempt,
        max_attempts,
        crashes,
    }
}

#[pymethods]
impl CompletionBatch {
    #[new]
    fn new(max_rows: usize, max_age_s: f64, seed: u64) -> PyResult<Self> {
        let inner = completion::CompletionBatch::new(max_rows, max_age_s, seed)
            .map_err(PyValueError::new_err)?;
        Ok(CompletionBatch { inner })
    }

    /// Buffers one attempt's outcome and returns the state the job goes to.
    /// `outcome` is `completed`, `retry_after` and `snooze` (with
    /// `delay_s`), `waiting_for_callback`, `cancelled` (`message` is the
    /// reason), `failed` or `failed_terminal` (with `error_type`, `message`
    /// and `traceback`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (job_id, run_lease, attempt_no, max_attempts, crashes, outcome, now, delay_s = None, error_type = "", message = "", traceback = None))]
    fn record(
        &mut self,
        job_id: i64,
        run_lease: i64,
        attempt_no: i32,
        max_attempts: i32,
        crashes: i32,
        outcome: &str,
        now: f64,
        delay_s: Option<f64>,
        error_type: &str,
        message: &str,
        traceback: Option<&str>,
    ) -> PyResult<&'static str> {
        let report = ErrorReport {
            error_type,
            message,
            traceback,
        };
        let delay =
            || delay_s.ok_or_else(|| PyValueError::new_err(format!("{outcome} needs delay_s")));
        let outcome = match outcome {
            "completed" => Outcome::Completed,
            "retry_after" => Outcome::RetryAfter { delay_s: delay()? },
            "snooze" => Outcome::Snooze { delay_s: delay()? },
            "waiting_for_callback" => Outcome::WaitingForCallback,
            "cancelled" => Outcome::Cancelled { reason: message },
            "failed" => Outcome::Failed(report),
            "failed_terminal" => Outcome::FailedTerminal(report),
            other => return Err(PyValueError::new_err(format!("unknown outcome {other:?}"))),
        };
        let at = attempt(job_id, run_lease, attempt_no, max_attempts, crashes);
        Ok(self.inner.record(at, &outcome, now).as_str())
    }

    fn is_due(&self, now: f64) -> bool {
        self.inner.is_due(now)
    }

    fn due_in(&self, now: f64) -> Option<f64> {
        self.inner.due_in(now)
    }

    /// The ids of the outcomes buffered, oldest first.
    fn ids(&self) -> Vec<i64> {
        self.inner.ids().to_vec()
    }

    /// Hands out the oldest outcomes, at most one batch, as a [`Flush`].
    fn take(&mut self) -> Flush {
        Flush {
            columns: self.inner.take(),
        }
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// Outcomes taken for one write.
#[pyclass(module = "awa._core")]
struct Flush {
    columns: Columns,
}

#[pymethods]
impl Flush {
    /// `(ids, run_leases, states, delays_s, refunds, errors)`, one list per
    /// column, for the guarded batch update.
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        columns_tuple(py, self.columns.clone())
    }

    /// The job ids, in row order.
    #[getter]
    fn ids(&self) -> Vec<i64> {
        self.columns.ids.clone()
    }

    /// Takes the job's row out of this write (its outcome is recorded
    /// again instead); false when it holds none.
    fn remove(&mut self, job_id: i64) -> bool {
        self.columns.remove(job_id)
    }

    fn __len__(&self) -> usize {
        self.columns.len()
    }
}

fn columns_tuple(py: Python<'_>, columns: Columns) -> PyResult<Bound<'_, PyTuple>> {
    (
        columns.ids,
        columns.run_leases,
        PyList::new(py, columns.states)?,
        columns.delays_s,
        columns.refunds,
        columns.errors,
    )
        .into_pyobject(py)
}

/// Decides the fate of running jobs whose worker died: one guarded row
/// each, in `CompletionBatch.take()`'s column shape.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn plan_rescue<'py>(
    py: Python<'py>,
    ids: Vec<i64>,
    run_leases: Vec<i64>,
    attempts: Vec<i32>,
    max_attempts: Vec<i32>,
    crashes: Vec<i32>,
    max_crashes: Vec<Option<i32>>,
    reason: &str,
    seed: u64,
) -> PyResult<Bound<'py, PyTuple>> {
    let n = ids.len();
    if [
        run_leases.len(),
        attempts.len(),
        max_attempts.len(),
        crashes.len(),
        max_crashes.len(),
    ]
    .iter()
    .any(|&len| len != n)
    {
        return Err(PyValueError::new_err(
            "every column needs one value per job",
        ));
    }
    let orphans: Vec<Orphan> = (0..n)
        .map(|i| Orphan {
            id: ids[i],
            run_lease: run_leases[i],
            attempt: attempts[i],
            max_attempts: max_attempts[i],
            crashes: crashes[i],
            max_crashes: max_crashes[i],
        })
        .collect();
    let columns = rescue::plan_rescue(&orphans, reason, &mut Jitter::new(seed));
    columns_tuple(py, columns)
}

#[pymodule]
fn _core(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(derive_kind, module)?)?;
    module.add_function(wrap_pyfunction!(encode_json, module)?)?;
    module.add_function(wrap_pyfunction!(decode_json, module)?)?;
    module.add_function(wrap_pyfunction!(backoff_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(plan_rescue, module)?)?;
    module.add_class::<InsertRows>()?;
    module.add_class::<Dispatcher>()?;
    module.add_class::<CompletionBatch>()?;
    module.add_class::<Flush>()?;
    module.add("MAX_BACKOFF_S", retry::MAX_BACKOFF_S)?;
    module.add(
        "FAILURE_REASONS",
        PyTuple::new(module.py(), FailureReason::ALL.map(FailureReason::as_str))?,
    )?;
    module.add("MAX_TAGS", payload::MAX_TAGS)?;
    module.add("MAX_INT_DIGITS", crate::json::MAX_INT_DIGITS)?;
    module.add("MAX_UNIQUE_PERIOD_S", unique::MAX_PERIOD_S)?;
    module.add("MAX_NAME_CHARS", payload::MAX_NAME_CHARS)?;
    module.add("MAX_STAGED_FOLLOW_UPS", staging::MAX_STAGED_FOLLOW_UPS)?;
    module.add("MAX_STAGED_BYTES", staging::MAX_STAGED_BYTES)?;
    Ok(())
}
