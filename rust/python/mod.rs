//! The `awa._core` extension module: the only place that speaks `PyO3`.
//!
//! `PyO3` hands arguments over by value (`Vec<T>` from Python lists), hence
//! the `needless_pass_by_value` allowance on this module.
#![allow(clippy::needless_pass_by_value)]
//!
//! Every class and function here is a thin wrapper over the pure modules of
//! the crate; `python/awa/_core.pyi` documents them for Python readers.

mod codec;
mod inserts;

use std::collections::HashMap;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::completion::{self, Attempt, Columns, ErrorReport, Outcome};
use crate::dispatch::{self, ClaimPlan};
use crate::payload;
use crate::rescue::{self, Orphan};
use crate::retry::{self, Jitter};
use crate::staging;
use crate::state::FailureReason;
use crate::unique;

pyo3::import_exception!(awa.errors, ValidationError);
pyo3::import_exception!(awa.errors, StagingError);

/// `SendEmail` → `send_email`.
/// Raises `ValueError` (the message names the rule) unless `name` is a queue name.
#[pyfunction]
fn check_queue_name(name: &str) -> PyResult<()> {
    payload::check_queue(name).map_err(|invalid| PyValueError::new_err(invalid.to_string()))
}

/// Raises `ValueError` (the message names the rule) unless `name` is a rate class name.
#[pyfunction]
fn check_rate_class_name(name: &str) -> PyResult<()> {
    payload::check_rate_class(name).map_err(|invalid| PyValueError::new_err(invalid.to_string()))
}

#[pyfunction]
fn derive_kind(class_name: &str) -> String {
    payload::derive_kind(class_name)
}

/// Encodes a value as compact JSON; `field` names it in errors.
#[pyfunction]
#[pyo3(signature = (value, field = "args"))]
fn encode_json(value: &Bound<'_, PyAny>, field: &str) -> PyResult<String> {
    inserts::encode_json(value, field)
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
    #[pyo3(signature = (queues, claim_batch_max, global_max_workers = None, prefetch = 0, prefetch_wait_s = 0.0))]
    fn new(
        queues: Vec<(String, u32)>,
        claim_batch_max: u32,
        global_max_workers: Option<u32>,
        prefetch: u32,
        prefetch_wait_s: f64,
    ) -> PyResult<Self> {
        let prefetch = dispatch::Prefetch {
            jobs: prefetch,
            wait_s: prefetch_wait_s,
        };
        let inner =
            dispatch::Dispatcher::new(queues, claim_batch_max, global_max_workers, prefetch)
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

    /// A job claimed by plan `plan_id` arrives: `"run"` (a slot is free),
    /// `"wait"` (prefetched: [`finish`] hands it out when a slot frees), or
    /// `None` when it does not fit the plan (or the plan is unknown).
    fn start(
        &mut self,
        plan_id: u64,
        job_id: i64,
        run_lease: i64,
        queue: &str,
    ) -> Option<&'static str> {
        let index = self.inner.queue_index(queue)?;
        let plan = self.pending.get_mut(&plan_id)?;
        Some(match self.inner.start(plan, job_id, run_lease, index)? {
            dispatch::Start::Run => "run",
            dispatch::Start::Wait => "wait",
        })
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

    /// Frees the place of a job that finished after `handler_s` seconds
    /// (`None`: it left without its handler running to the end). With
    /// `start_next`, the queue's longest-waiting prefetched job takes the
    /// freed slot. Returns `(whether a claim could now take something, the
    /// id of the job to start now or None)`.
    #[pyo3(signature = (job_id, handler_s = None, start_next = false))]
    fn finish(
        &mut self,
        job_id: i64,
        handler_s: Option<f64>,
        start_next: bool,
    ) -> (bool, Option<i64>) {
        let queue = self.inner.finish(job_id, handler_s);
        let next = match queue {
            Some(index) if start_next => self.inner.start_next(index),
            _ => None,
        };
        (self.inner.can_claim(), next)
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

    /// Sets a queue's share of `global_max_workers` (its weight, at least 1,
    /// and the `min_workers` it gets first while it has work).
    fn set_share(&mut self, queue: &str, weight: u32, min_workers: u32) -> PyResult<()> {
        let index = self
            .inner
            .queue_index(queue)
            .ok_or_else(|| PyValueError::new_err(format!("queue {queue:?} is not served")))?;
        self.inner
            .set_share(index, weight, min_workers)
            .map_err(PyValueError::new_err)
    }

    /// Pauses or resumes a queue in this worker (resuming marks it ready);
    /// false for a queue this worker does not serve.
    fn set_paused(&mut self, queue: &str, paused: bool) -> bool {
        match self.inner.queue_index(queue) {
            Some(index) => {
                self.inner.set_paused(index, paused);
                true
            }
            None => false,
        }
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

    /// Prefetched jobs of `queue` waiting for a slot.
    fn waiting(&self, queue: &str) -> u32 {
        self.inner
            .queue_index(queue)
            .map_or(0, |index| self.inner.queues()[index].waiting())
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

    /// The same columns as `PostgreSQL` array literals, for
    /// `jobs_finish_batch` (which casts each to its array type).
    fn array_literals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.columns.array_literals())
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
    module.add_function(wrap_pyfunction!(check_queue_name, module)?)?;
    module.add_function(wrap_pyfunction!(check_rate_class_name, module)?)?;
    module.add_function(wrap_pyfunction!(derive_kind, module)?)?;
    module.add_function(wrap_pyfunction!(encode_json, module)?)?;
    module.add_function(wrap_pyfunction!(decode_json, module)?)?;
    module.add_function(wrap_pyfunction!(backoff_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(plan_rescue, module)?)?;
    module.add_class::<inserts::InsertRows>()?;
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
