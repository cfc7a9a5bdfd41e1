//! `InsertRows`: the binding of [`crate::insert`]. It reads each job's
//! options by name from an options object (`awa.inserts.InsertOpts`, or
//! anything with its attributes), encodes arguments and metadata, and hands
//! the checks and the output shapes to the pure module.
//!
//! A whole list of jobs crosses in one call ([`InsertRows::add_many`]): the
//! options of each distinct options object are read once, and the kind and
//! queue of each distinct (argument type, kind, queue) are resolved once,
//! by one call back into the Python registry.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString};

use super::codec;
use super::{StagingError, ValidationError};
use crate::insert::{InsertBatch, JobInput, NewJob};
use crate::payload::Invalid;
use crate::staging::StagingBudget;
use crate::unique::{UniqueOpts, UNIQUE_KEY_BYTES};

/// How a value that breaks a limit is reported.
#[derive(Clone, Copy)]
enum Refusal {
    /// `ValidationError`, its message prefixed with the job's position
    /// (`jobs[3].`) in a batch; the prefix is written only for a refusal.
    Validation { position: Option<usize> },
    /// `StagingError`, for a follow-up a handler stages.
    Staging,
}

impl Refusal {
    fn err(self, invalid: &Invalid) -> PyErr {
        match self {
            Refusal::Validation { position } => ValidationError::new_err((
                format!("{}{invalid}", prefix(position)),
                invalid.field.clone(),
            )),
            Refusal::Staging => StagingError::new_err((invalid.to_string(), invalid.field.clone())),
        }
    }
}

/// `jobs[3].` for a job's position in a batch, else nothing.
fn prefix(position: Option<usize>) -> String {
    position.map_or_else(String::new, |index| format!("jobs[{index}]."))
}

/// An object's identity for the lookups of one call, which hold a
/// reference to it, so no other object can take its address meanwhile.
fn identity(value: Option<&Py<PyAny>>) -> usize {
    value.map_or(0, |value| value.as_ptr() as usize)
}

/// One options object's values, read once per call.
struct OptionSet {
    /// Held so that its address identifies it for the whole call.
    _source: Py<PyAny>,
    kind: Option<Py<PyAny>>,
    queue: Option<Py<PyAny>>,
    priority: i64,
    max_attempts: i64,
    max_crashes: MaxCrashes,
    run_at_us: Option<i64>,
    tags: Option<Vec<String>>,
    metadata: Option<String>,
    unique: Option<UniqueOpts>,
    timeout_ms: Option<i64>,
    deadline_us: Option<i64>,
    /// `None`: the kind's task's version (the registry's answer).
    schema_version: Option<i64>,
    /// `None`: the kind's task's rate class (the registry's answer).
    rate_class: Option<String>,
    /// `None`: no partition (there is no task default).
    partition_key: Option<String>,
}

/// A job's `max_crashes` option.
#[derive(Clone, Copy)]
enum MaxCrashes {
    /// The queue's default, from the registry.
    FromQueue,
    /// As given (`None`: unbounded).
    Given(Option<i64>),
}

/// What the registry said for one (argument type, kind, queue).
struct Resolution {
    args_type: Py<PyAny>,
    /// Held so that their addresses identify them for the whole call.
    _kind_option: Option<Py<PyAny>>,
    _queue_option: Option<Py<PyAny>>,
    kind: String,
    queue: String,
    queue_max_crashes: Option<i64>,
    /// Validates each job's arguments as the kind's registered type.
    check: Option<Py<PyAny>>,
    /// The schema version of the kind's task (`None`: no task, or 1).
    schema_version: Option<i64>,
    /// The rate class of the kind's task (`None`: no task, or none).
    rate_class: Option<String>,
}

/// Validated, encoded rows for every insert path, and the follow-ups a
/// handler stages (`staging = True`).
#[pyclass(module = "awa._core")]
#[derive(Clone)]
pub struct InsertRows {
    batch: InsertBatch,
}

#[pymethods]
impl InsertRows {
    #[new]
    #[pyo3(signature = (capacity = 1, *, staging = false))]
    fn new(capacity: usize, staging: bool) -> Self {
        let batch = if staging {
            InsertBatch::staging()
        } else {
            InsertBatch::with_capacity(capacity)
        };
        InsertRows { batch }
    }

    /// Checks and appends every job of `jobs` (see `_core.pyi`); returns
    /// the distinct `(kind, argument type)` pairs it saw. All or nothing: a
    /// refused job leaves the set as it was.
    #[pyo3(signature = (jobs, options, resolve, *, now_us, batch = false))]
    fn add_many<'py>(
        &mut self,
        py: Python<'py>,
        jobs: &Bound<'py, PyAny>,
        options: &Bound<'py, PyAny>,
        resolve: &Bound<'py, PyAny>,
        now_us: i64,
        batch: bool,
    ) -> PyResult<Vec<(String, Py<PyAny>)>> {
        if let Some(budget) = self.batch.budget() {
            budget
                .ensure_open()
                .map_err(|sealed| StagingError::new_err((sealed.to_string(), None::<String>)))?;
        }
        let per_job = options.cast::<PyList>().ok().cloned();
        let mark = self.batch.mark();
        let added = self.add_each(py, jobs, per_job.as_ref(), options, resolve, now_us, batch);
        if added.is_err() {
            self.batch.rollback(mark);
        }
        added
    }

    fn __len__(&self) -> usize {
        self.batch.len()
    }

    /// One dict per row, with the tags as given: for showing staged
    /// follow-ups.
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.batch
            .jobs()
            .iter()
            .map(|job| {
                let dict = PyDict::new(py);
                dict.set_item("kind", &job.kind)?;
                dict.set_item("queue", &job.queue)?;
                dict.set_item("args", &job.args)?;
                dict.set_item("priority", job.priority)?;
                dict.set_item("max_attempts", job.max_attempts)?;
                dict.set_item("max_crashes", job.max_crashes)?;
                dict.set_item("run_at_us", job.run_at_us)?;
                dict.set_item("tags", &job.tags)?;
                dict.set_item("metadata", &job.metadata)?;
                dict.set_item(
                    "unique_key",
                    job.unique.map(|unique| PyBytes::new(py, &unique.key)),
                )?;
                dict.set_item("unique_states", job.unique.map(|unique| unique.states))?;
                dict.set_item("timeout_ms", job.timeout_ms)?;
                dict.set_item("deadline_us", job.deadline_us)?;
                dict.set_item("schema_version", job.schema_version)?;
                dict.set_item("rate_class", &job.rate_class)?;
                dict.set_item("partition_key", &job.partition_key)?;
                Ok(dict)
            })
            .collect()
    }

    /// The rows as one JSON array of objects keyed by `awa.job_input`'s
    /// fields, for `jsonb_populate_recordset`.
    fn json_rows(&self) -> String {
        self.batch.json_rows()
    }

    /// Each row's unique key (`None`: none).
    fn unique_keys<'py>(&self, py: Python<'py>) -> Vec<Option<Bound<'py, PyBytes>>> {
        self.batch
            .unique_keys()
            .into_iter()
            .map(|key| key.map(|key| PyBytes::new(py, &key)))
            .collect()
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
        Ok(self.batch.written(&inserted))
    }

    /// Whether any row carries a unique key.
    fn has_unique(&self) -> bool {
        self.batch.has_unique()
    }

    /// Appends every row of `other` (which may be this set). A staging set
    /// cannot be extended: that would bypass its limits.
    fn extend(slf: &Bound<'_, Self>, other: &Bound<'_, Self>) -> PyResult<()> {
        let mut this = slf.try_borrow_mut()?;
        if this.batch.budget().is_some() {
            return Err(PyValueError::new_err(
                "a staging set cannot be extended; stage each follow-up with add_many()",
            ));
        }
        let jobs = if slf.is(other) {
            this.batch.jobs().to_vec()
        } else {
            other.try_borrow()?.batch.jobs().to_vec()
        };
        this.batch.append(&jobs);
        Ok(())
    }

    /// Closes a staging set: `add_many` refuses from now on.
    fn seal(&mut self) -> PyResult<()> {
        match self.batch.budget_mut() {
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
        self.batch.budget().is_some_and(StagingBudget::is_sealed)
    }

    /// Bytes staged so far (0 for other sets).
    #[getter]
    fn staged_bytes(&self) -> usize {
        self.batch.budget().map_or(0, StagingBudget::bytes)
    }

    /// The rows in `PostgreSQL`'s COPY text format, for the columns
    /// `copy_columns(with_ids)` names.
    #[pyo3(signature = (now_us, ids = None))]
    fn copy_text<'py>(
        &self,
        py: Python<'py>,
        now_us: i64,
        ids: Option<Vec<i64>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let text = self
            .batch
            .copy_text(now_us, ids.as_deref())
            .map_err(|invalid| PyValueError::new_err(invalid.message))?;
        Ok(PyBytes::new(py, text.as_bytes()))
    }

    /// The column list matching `copy_text`.
    #[pyo3(signature = (with_ids = false))]
    fn copy_columns(&self, with_ids: bool) -> Vec<&'static str> {
        self.batch.copy_columns(with_ids)
    }

    /// Queues that receive jobs available at `now_us` (to notify).
    fn available_queues(&self, now_us: i64) -> Vec<String> {
        self.batch.available_queues(now_us)
    }

    /// The partition lanes of the partitioned jobs, each once: their
    /// queues, priorities and partition keys, aligned.
    fn partition_lanes(&self) -> (Vec<String>, Vec<i16>, Vec<String>) {
        let mut queues = Vec::new();
        let mut priorities = Vec::new();
        let mut keys = Vec::new();
        for (queue, priority, key) in self.batch.partition_lanes() {
            queues.push(queue);
            priorities.push(priority);
            keys.push(key);
        }
        (queues, priorities, keys)
    }

    /// Lanes given jobs available at `now_us` but keyed before it: their
    /// queues, priorities and earliest `run_at` (microseconds), aligned.
    fn backdated_lanes(&self, now_us: i64) -> (Vec<String>, Vec<i16>, Vec<i64>) {
        let mut queues = Vec::new();
        let mut priorities = Vec::new();
        let mut run_ats = Vec::new();
        for (queue, priority, run_at_us) in self.batch.backdated_lanes(now_us) {
            queues.push(queue);
            priorities.push(priority);
            run_ats.push(run_at_us);
        }
        (queues, priorities, run_ats)
    }
}

impl InsertRows {
    #[allow(clippy::too_many_arguments)]
    fn add_each<'py>(
        &mut self,
        py: Python<'py>,
        jobs: &Bound<'py, PyAny>,
        per_job: Option<&Bound<'py, PyList>>,
        options: &Bound<'py, PyAny>,
        resolve: &Bound<'py, PyAny>,
        now_us: i64,
        batch: bool,
    ) -> PyResult<Vec<(String, Py<PyAny>)>> {
        let staging = self.batch.budget().is_some();
        let start = self.batch.len();
        let mut option_sets = OptionSets::default();
        let mut resolutions = Resolutions::default();
        for (index, args) in jobs.try_iter()?.enumerate() {
            let args = args?;
            let position = (batch && !staging).then_some(start + index);
            let refusal = if staging {
                Refusal::Staging
            } else {
                Refusal::Validation { position }
            };
            let options = match &per_job {
                Some(list) => list.get_item(index).map_err(|_| {
                    PyValueError::new_err("options: one options object is needed per job")
                })?,
                None => options.clone(),
            };
            let set = option_sets.get(&options, refusal)?;
            let resolution = resolutions.get(py, resolve, &args, set)?;
            if let Some(check) = &resolution.check {
                check
                    .bind(py)
                    .call1((&args,))
                    .map_err(|err| with_position(py, err, position))?;
            }
            let input = JobInput {
                kind: resolution.kind.clone(),
                queue: resolution.queue.clone(),
                args: encode(&args, "args", refusal)?,
                priority: set.priority,
                max_attempts: set.max_attempts,
                max_crashes: match set.max_crashes {
                    MaxCrashes::FromQueue => resolution.queue_max_crashes,
                    MaxCrashes::Given(limit) => limit,
                },
                run_at_us: set.run_at_us,
                tags: set.tags.clone(),
                metadata: set.metadata.clone(),
                unique: set.unique,
                timeout_ms: set.timeout_ms,
                deadline_us: set.deadline_us,
                schema_version: set.schema_version.or(resolution.schema_version),
                rate_class: set
                    .rate_class
                    .clone()
                    .or_else(|| resolution.rate_class.clone()),
                partition_key: set.partition_key.clone(),
            };
            let job =
                NewJob::check(input, Some(now_us)).map_err(|invalid| refusal.err(&invalid))?;
            self.batch
                .push(job)
                .map_err(|invalid| refusal.err(&invalid))?;
        }
        Ok(resolutions
            .seen
            .into_iter()
            .map(|seen| (seen.kind, seen.args_type))
            .collect())
    }
}

/// A `ValidationError` from a per-job check, its message prefixed with the
/// job's position in a batch (`jobs[3].args.to: …`); other errors as they are.
fn with_position(py: Python<'_>, err: PyErr, position: Option<usize>) -> PyErr {
    if position.is_none() || !err.is_instance_of::<ValidationError>(py) {
        return err;
    }
    let value = err.value(py);
    let message = value.str().map(|text| text.to_string());
    let field = value
        .getattr("field")
        .and_then(|field| field.extract::<Option<String>>());
    match (message, field) {
        (Ok(message), Ok(field)) => {
            let positioned =
                ValidationError::new_err((format!("{}{message}", prefix(position)), field));
            positioned.set_cause(py, Some(err));
            positioned
        }
        _ => err,
    }
}

/// The options objects one call has read, by identity: a batch with an
/// options object per job reads each once, and finds it in constant time.
#[derive(Default)]
struct OptionSets {
    read: HashMap<usize, OptionSet>,
}

impl OptionSets {
    /// The options of `options`, read the first time this call meets it.
    fn get(&mut self, options: &Bound<'_, PyAny>, refusal: Refusal) -> PyResult<&OptionSet> {
        Ok(match self.read.entry(options.as_ptr() as usize) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(read_options(options, refusal)?),
        })
    }
}

/// An options object's values, checked.
fn read_options(options: &Bound<'_, PyAny>, refusal: Refusal) -> PyResult<OptionSet> {
    let fail = |invalid: Invalid| refusal.err(&invalid);
    let get = |name: &str| options.getattr(name);
    let optional = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let value = get(name)?;
        Ok((!value.is_none()).then_some(value))
    };
    let optional_int = |name: &str, field: &str| -> PyResult<Option<i64>> {
        optional(name)?
            .map(|value| int_field(field, &value).map_err(fail))
            .transpose()
    };
    let max_crashes = if get("max_crashes_from_queue")?.is_truthy()? {
        MaxCrashes::FromQueue
    } else {
        MaxCrashes::Given(optional_int("max_crashes", "max_crashes")?)
    };
    let tags = optional("tags")?
        .map(|value| tag_list(&value).map_err(fail))
        .transpose()?;
    let metadata = optional("metadata")?
        .map(|value| encode(&value, "metadata", refusal))
        .transpose()?;
    let unique = optional("unique")?
        .map(|value| unique_opts(&value).map_err(fail))
        .transpose()?;
    Ok(OptionSet {
        _source: options.clone().unbind(),
        kind: optional("kind")?.map(Bound::unbind),
        queue: optional("queue")?.map(Bound::unbind),
        priority: int_field("priority", &get("priority")?).map_err(fail)?,
        max_attempts: int_field("max_attempts", &get("max_attempts")?).map_err(fail)?,
        max_crashes,
        run_at_us: optional_int("run_at_us", "run_at")?,
        tags,
        metadata,
        unique,
        timeout_ms: optional_int("timeout_ms", "timeout")?,
        deadline_us: optional_int("deadline_us", "deadline")?,
        schema_version: optional_int("schema_version", "schema_version")?,
        rate_class: optional("rate_class")?
            .map(|value| text_field("rate_class", &value).map_err(fail))
            .transpose()?,
        partition_key: optional("partition_key")?
            .map(|value| text_field("partition_key", &value).map_err(fail))
            .transpose()?,
    })
}

/// The registry's answer, as `_core.pyi`'s `_Resolver` returns it: kind,
/// queue, the queue's `max_crashes`, the check, the task's schema version
/// and its rate class.
type Answer<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Option<i64>,
    Option<Py<PyAny>>,
    Option<i64>,
    Option<String>,
);

/// What the registry said, by (argument type, kind option, queue option)
/// identity, in the order first met.
#[derive(Default)]
struct Resolutions {
    seen: Vec<Resolution>,
    index: HashMap<(usize, usize, usize), usize>,
}

impl Resolutions {
    /// The kind and queue for `args` under `set`: the registry's answer for
    /// the argument type and the kind and queue options, asked once per call.
    fn get(
        &mut self,
        py: Python<'_>,
        resolve: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        set: &OptionSet,
    ) -> PyResult<&Resolution> {
        let args_type = args.get_type();
        let key = (
            args_type.as_ptr() as usize,
            identity(set.kind.as_ref()),
            identity(set.queue.as_ref()),
        );
        if let Some(&found) = self.index.get(&key) {
            return Ok(&self.seen[found]);
        }
        let kind_option = set.kind.as_ref().map(|kind| kind.bind(py).clone());
        let queue_option = set.queue.as_ref().map(|queue| queue.bind(py).clone());
        let answer = resolve.call1((args, kind_option, queue_option))?;
        let (kind, queue, queue_max_crashes, check, schema_version, rate_class): Answer<'_> =
            answer.extract()?;
        let refusal = Refusal::Validation { position: None };
        let kind = text_field("kind", &kind).map_err(|invalid| refusal.err(&invalid))?;
        let queue = text_field("queue", &queue).map_err(|invalid| refusal.err(&invalid))?;
        self.index.insert(key, self.seen.len());
        self.seen.push(Resolution {
            args_type: args_type.into_any().unbind(),
            _kind_option: set.kind.as_ref().map(|kind| kind.clone_ref(py)),
            _queue_option: set.queue.as_ref().map(|queue| queue.clone_ref(py)),
            kind,
            queue,
            queue_max_crashes,
            check,
            schema_version,
            rate_class,
        });
        Ok(self.seen.last().expect("just pushed"))
    }
}

/// `encode_json`: a value as compact JSON, errors naming `field`.
pub fn encode_json(value: &Bound<'_, PyAny>, field: &str) -> PyResult<String> {
    encode(value, field, Refusal::Validation { position: None })
}

fn encode(value: &Bound<'_, PyAny>, root: &str, refusal: Refusal) -> PyResult<String> {
    codec::encode(value, root).map_err(|err| match err {
        codec::EncodeError::Invalid(invalid) => refusal.err(&invalid),
        codec::EncodeError::Python(err) => err,
    })
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
    if value.is_instance_of::<PyBool>() {
        return Err(Invalid::new(field, "must be an integer (got bool)"));
    }
    if !value.is_instance_of::<PyInt>() {
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

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "an unknown type".into(), |name| name.to_string())
}
