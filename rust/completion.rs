//! The completion batcher: handler outcomes buffered and handed out as one
//! array per column, for a single guarded `UPDATE … FROM unnest(...)`.
//!
//! # Overview
//! The executor records each outcome here the moment a handler returns.
//! The completer takes the whole buffer when [`CompletionBatch::is_due`]
//! says so (enough rows, or the oldest row is old enough) and writes it in
//! one statement guarded by `(id, run_lease, state = 'running')`, so a row
//! from a stale attempt simply matches nothing.
//!
//! # State model
//! Each outcome becomes a target state, an optional delay in seconds (the
//! database adds it to its own `now()`), whether the attempt is given back
//! (a snooze does not consume one) and an optional error entry.
//!
//! # Failure handling
//! The batcher does no I/O; a failed flush keeps its [`Columns`] and writes
//! them again. Error text is made safe for `jsonb` (NUL replaced) so one
//! odd exception message cannot poison a whole batch.

use crate::json::{write_lossy_string, JsonWriter};
use crate::pg_array;
use crate::retry::{backoff_s, has_attempts_left, Jitter};
use crate::state::{FailureReason, JobState};

/// Error messages longer than this keep their head and say how much was cut.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 2_000;
/// Tracebacks keep their tail (where the error was raised).
pub const MAX_TRACEBACK_CHARS: usize = 4_000;

/// One row per finished attempt, one vector per column.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    pub ids: Vec<i64>,
    pub run_leases: Vec<i64>,
    pub states: Vec<&'static str>,
    pub delays_s: Vec<Option<f64>>,
    /// 1 when the attempt is given back (snooze), else 0.
    pub refunds: Vec<i32>,
    pub errors: Vec<Option<String>>,
}

impl Columns {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Keeps the first `at` rows and returns the others.
    fn split_off(&mut self, at: usize) -> Columns {
        Columns {
            ids: self.ids.split_off(at),
            run_leases: self.run_leases.split_off(at),
            states: self.states.split_off(at),
            delays_s: self.delays_s.split_off(at),
            refunds: self.refunds.split_off(at),
            errors: self.errors.split_off(at),
        }
    }

    /// Removes the row of `job_id`; false when there is none.
    pub fn remove(&mut self, job_id: i64) -> bool {
        let Some(index) = self.ids.iter().position(|&id| id == job_id) else {
            return false;
        };
        self.ids.remove(index);
        self.run_leases.remove(index);
        self.states.remove(index);
        self.delays_s.remove(index);
        self.refunds.remove(index);
        self.errors.remove(index);
        true
    }

    /// The columns as array literals, in [`Columns`]' order, for a write
    /// that casts each text parameter to its array type.
    pub fn array_literals(&self) -> [String; 6] {
        [
            pg_array::numbers(&self.ids),
            pg_array::numbers(&self.run_leases),
            pg_array::texts(&self.states),
            pg_array::optional_numbers(&self.delays_s),
            pg_array::numbers(&self.refunds),
            pg_array::optional_texts(&self.errors),
        ]
    }

    fn push(&mut self, row: Row) {
        self.ids.push(row.id);
        self.run_leases.push(row.run_lease);
        self.states.push(row.state.as_str());
        self.delays_s.push(row.delay_s);
        self.refunds.push(i32::from(row.refund));
        self.errors.push(row.error);
    }
}

/// Which attempt an outcome belongs to, and what the job allows.
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub id: i64,
    pub run_lease: i64,
    pub attempt: i32,
    pub max_attempts: i32,
    pub crashes: i32,
}

/// What went wrong in an attempt, as recorded in the job's error history.
#[derive(Clone, Debug, Default)]
pub struct ErrorReport<'a> {
    pub error_type: &'a str,
    pub message: &'a str,
    pub traceback: Option<&'a str>,
}

/// What a handler's attempt came to: the one value the executor hands the
/// completer, and the only way an outcome enters a batch.
#[derive(Clone, Debug)]
pub enum Outcome<'a> {
    /// The handler returned normally.
    Completed,
    /// The handler asked to run again after `delay_s` (uses an attempt).
    RetryAfter { delay_s: f64 },
    /// The handler deferred itself by `delay_s` (does not use an attempt).
    Snooze { delay_s: f64 },
    /// The handler parked the job until its callback is resolved.
    WaitingForCallback,
    /// The handler cancelled the job.
    Cancelled { reason: &'a str },
    /// The handler raised: retried with backoff while attempts remain.
    Failed(ErrorReport<'a>),
    /// The handler raised an error that must not be retried.
    FailedTerminal(ErrorReport<'a>),
}

struct Row {
    id: i64,
    run_lease: i64,
    state: JobState,
    delay_s: Option<f64>,
    refund: bool,
    error: Option<String>,
}

/// Buffers outcomes until a flush is due.
#[derive(Debug)]
pub struct CompletionBatch {
    columns: Columns,
    max_rows: usize,
    max_age_s: f64,
    oldest_at: Option<f64>,
    /// Rows left over by a partial `take` are due at once.
    leftover: bool,
    jitter: Jitter,
}

impl CompletionBatch {
    /// `max_rows` and `max_age_s` are the size and age triggers; `seed`
    /// feeds the retry jitter.
    pub fn new(max_rows: usize, max_age_s: f64, seed: u64) -> Result<Self, String> {
        if max_rows == 0 {
            return Err("flush batch size must be at least 1".into());
        }
        if !(max_age_s.is_finite() && max_age_s >= 0.0) {
            return Err("flush interval must be a finite number of seconds >= 0".into());
        }
        Ok(CompletionBatch {
            columns: Columns::default(),
            max_rows,
            max_age_s,
            oldest_at: None,
            leftover: false,
            jitter: Jitter::new(seed),
        })
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Buffers one attempt's outcome; returns the state the job goes to.
    pub fn record(&mut self, at: Attempt, outcome: &Outcome<'_>, now: f64) -> JobState {
        match outcome {
            Outcome::Completed => {
                self.completed(at, now);
                JobState::Completed
            }
            Outcome::RetryAfter { delay_s } => self.retry_after(at, *delay_s, now),
            Outcome::Snooze { delay_s } => {
                self.snooze(at, *delay_s, now);
                JobState::Scheduled
            }
            Outcome::WaitingForCallback => {
                self.waiting_for_callback(at, now);
                JobState::WaitingExternal
            }
            Outcome::Cancelled { reason } => {
                self.cancelled(at, reason, now);
                JobState::Cancelled
            }
            Outcome::Failed(report) => self.failed(at, report, now),
            Outcome::FailedTerminal(report) => {
                self.failed_terminal(at, report, now);
                JobState::Failed
            }
        }
    }

    /// The ids of the outcomes buffered, oldest first.
    pub fn ids(&self) -> &[i64] {
        &self.columns.ids
    }

    /// The handler returned normally.
    pub fn completed(&mut self, at: Attempt, now: f64) {
        self.push(at, JobState::Completed, None, false, None, now);
    }

    /// The handler asked to run again after `delay_s`; this uses an
    /// attempt, so with none left the job fails. Returns the state chosen.
    pub fn retry_after(&mut self, at: Attempt, delay_s: f64, now: f64) -> JobState {
        if has_attempts_left(at.attempt, at.crashes, at.max_attempts) {
            self.push(
                at,
                JobState::Retryable,
                Some(delay_s.max(0.0)),
                false,
                None,
                now,
            );
            JobState::Retryable
        } else {
            let report = ErrorReport {
                error_type: "RetryAfter",
                message: "a retry was requested, but no attempts are left",
                traceback: None,
            };
            let reason = FailureReason::MaxAttemptsExhausted;
            let error = error_entry(&at, &report, JobState::Failed, Some(reason));
            self.push(at, JobState::Failed, None, false, Some(error), now);
            JobState::Failed
        }
    }

    /// The handler deferred itself: back to `scheduled` after `delay_s`,
    /// and the attempt is not consumed.
    pub fn snooze(&mut self, at: Attempt, delay_s: f64, now: f64) {
        self.push(
            at,
            JobState::Scheduled,
            Some(delay_s.max(0.0)),
            true,
            None,
            now,
        );
    }

    /// The handler parked the job until its callback is resolved.
    pub fn waiting_for_callback(&mut self, at: Attempt, now: f64) {
        self.push(at, JobState::WaitingExternal, None, false, None, now);
    }

    /// The handler cancelled the job.
    pub fn cancelled(&mut self, at: Attempt, reason: &str, now: f64) {
        let report = ErrorReport {
            error_type: "Cancel",
            message: reason,
            traceback: None,
        };
        let error = error_entry(&at, &report, JobState::Cancelled, None);
        self.push(at, JobState::Cancelled, None, false, Some(error), now);
    }

    /// The handler raised an error that must not be retried.
    pub fn failed_terminal(&mut self, at: Attempt, report: &ErrorReport<'_>, now: f64) {
        let reason = Some(FailureReason::TerminalError);
        let error = error_entry(&at, report, JobState::Failed, reason);
        self.push(at, JobState::Failed, None, false, Some(error), now);
    }

    /// The handler raised: retry with backoff while attempts remain, else
    /// fail. Returns the state chosen.
    pub fn failed(&mut self, at: Attempt, report: &ErrorReport<'_>, now: f64) -> JobState {
        if has_attempts_left(at.attempt, at.crashes, at.max_attempts) {
            let failures = u32::try_from(at.attempt - at.crashes).unwrap_or(1).max(1);
            let delay = backoff_s(failures, self.jitter.next_unit());
            let error = error_entry(&at, report, JobState::Retryable, None);
            self.push(
                at,
                JobState::Retryable,
                Some(delay),
                false,
                Some(error),
                now,
            );
            JobState::Retryable
        } else {
            let reason = FailureReason::for_exhausted(report.error_type);
            let error = error_entry(&at, report, JobState::Failed, Some(reason));
            self.push(at, JobState::Failed, None, false, Some(error), now);
            JobState::Failed
        }
    }

    /// Whether the completer should flush now: enough rows, or the oldest
    /// row has waited `max_age_s`.
    pub fn is_due(&self, now: f64) -> bool {
        match self.oldest_at {
            None => false,
            Some(oldest) => {
                self.leftover || self.len() >= self.max_rows || now - oldest >= self.max_age_s
            }
        }
    }

    /// Seconds until the age trigger fires (0 when due), `None` when empty.
    pub fn due_in(&self, now: f64) -> Option<f64> {
        let oldest = self.oldest_at?;
        if self.leftover || self.len() >= self.max_rows {
            return Some(0.0);
        }
        Some((oldest + self.max_age_s - now).max(0.0))
    }

    /// Hands out the oldest `max_rows` outcomes (all of them when fewer are
    /// buffered). What stays was part of a due batch, so it is due at once.
    pub fn take(&mut self) -> Columns {
        if self.columns.len() <= self.max_rows {
            self.oldest_at = None;
            self.leftover = false;
            return std::mem::take(&mut self.columns);
        }
        self.leftover = true;
        let rest = self.columns.split_off(self.max_rows);
        std::mem::replace(&mut self.columns, rest)
    }

    fn push(
        &mut self,
        at: Attempt,
        state: JobState,
        delay_s: Option<f64>,
        refund: bool,
        error: Option<String>,
        now: f64,
    ) {
        if self.oldest_at.is_none() {
            self.oldest_at = Some(now);
        }
        self.columns.push(Row {
            id: at.id,
            run_lease: at.run_lease,
            state,
            delay_s,
            refund,
            error,
        });
    }
}

/// The error entry appended to a job's history; the database adds `at`.
/// One entry of a job's error history. `reason` is set on the entry that
/// failed the job for good (the dead-letter reason).
pub fn error_entry(
    at: &Attempt,
    report: &ErrorReport<'_>,
    outcome: JobState,
    reason: Option<FailureReason>,
) -> String {
    let mut writer = JsonWriter::with_capacity(128 + report.message.len());
    writer.raw("{\"attempt\":");
    writer.i64(i64::from(at.attempt));
    writer.raw(",\"type\":");
    write_lossy_string(&mut writer, report.error_type);
    writer.raw(",\"message\":");
    write_lossy_string(&mut writer, &head(report.message, MAX_ERROR_MESSAGE_CHARS));
    if let Some(traceback) = report.traceback {
        writer.raw(",\"traceback\":");
        write_lossy_string(&mut writer, &tail(traceback, MAX_TRACEBACK_CHARS));
    }
    writer.raw(",\"outcome\":");
    write_lossy_string(&mut writer, outcome.as_str());
    if let Some(reason) = reason {
        writer.raw(",\"reason\":");
        write_lossy_string(&mut writer, reason.as_str());
    }
    writer.raw("}");
    writer.out
}

/// The first `limit` characters, marked when something was cut.
pub fn head(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_owned();
    }
    let kept: String = text.chars().take(limit).collect();
    format!("{kept}… [{} more characters]", total - limit)
}

/// The last `limit` characters, marked when something was cut.
pub fn tail(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(total - limit).collect();
    format!("[{} earlier characters] …{kept}", total - limit)
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the floats compared are exact by construction
mod tests {
    use super::*;

    fn attempt(id: i64, attempt: i32, max_attempts: i32) -> Attempt {
        Attempt {
            id,
            run_lease: id * 10,
            attempt,
            max_attempts,
            crashes: 0,
        }
    }

    fn boom() -> ErrorReport<'static> {
        ErrorReport {
            error_type: "ValueError",
            message: "boom",
            traceback: Some("Traceback ...\nValueError: boom"),
        }
    }

    #[test]
    fn the_entry_that_fails_a_job_names_its_dead_letter_reason() {
        let mut batch = CompletionBatch::new(100, 0.01, 1).unwrap();
        let timeout = ErrorReport {
            error_type: "AttemptTimeout",
            message: "too slow",
            traceback: None,
        };
        batch.failed(attempt(1, 1, 2), &boom(), 0.0); // attempts left: no reason
        batch.failed(attempt(2, 2, 2), &boom(), 0.0);
        batch.failed(attempt(3, 1, 1), &timeout, 0.0);
        batch.failed_terminal(attempt(4, 1, 5), &boom(), 0.0);
        batch.cancelled(attempt(5, 1, 5), "no", 0.0);
        let reasons: Vec<Option<String>> = batch
            .take()
            .errors
            .iter()
            .map(|entry| {
                let entry = entry.as_deref().unwrap();
                entry
                    .split("\"reason\":\"")
                    .nth(1)
                    .map(|rest| rest.split('"').next().unwrap().to_owned())
            })
            .collect();
        assert_eq!(
            reasons,
            vec![
                None,
                Some("max_attempts_exhausted".to_owned()),
                Some("deadline_exceeded".to_owned()),
                Some("terminal_error".to_owned()),
                None,
            ]
        );
    }

    #[test]
    fn every_outcome_becomes_one_row() {
        let mut batch = CompletionBatch::new(100, 0.01, 1).unwrap();
        batch.completed(attempt(1, 1, 25), 0.0);
        assert_eq!(
            batch.retry_after(attempt(2, 1, 25), 30.0, 0.0),
            JobState::Retryable
        );
        batch.snooze(attempt(3, 1, 25), 5.0, 0.0);
        batch.cancelled(attempt(4, 1, 25), "not needed", 0.0);
        batch.failed_terminal(attempt(5, 1, 25), &boom(), 0.0);
        assert_eq!(
            batch.failed(attempt(6, 1, 25), &boom(), 0.0),
            JobState::Retryable
        );
        assert_eq!(
            batch.failed(attempt(7, 25, 25), &boom(), 0.0),
            JobState::Failed
        );
        assert_eq!(
            batch.retry_after(attempt(8, 3, 3), 1.0, 0.0),
            JobState::Failed
        );

        let columns = batch.take();
        assert_eq!(columns.ids, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(columns.run_leases[0], 10);
        assert_eq!(
            columns.states,
            [
                "completed",
                "retryable",
                "scheduled",
                "cancelled",
                "failed",
                "retryable",
                "failed",
                "failed"
            ]
        );
        assert_eq!(columns.refunds, [0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(columns.delays_s[1], Some(30.0));
        assert_eq!(columns.delays_s[2], Some(5.0));
        let backoff = columns.delays_s[5].unwrap();
        assert!((2.0..=2.5).contains(&backoff), "{backoff}");
        assert_eq!(columns.delays_s[6], None);
        assert!(columns.errors[0].is_none());
        assert!(columns.errors[3].as_deref().unwrap().contains("not needed"));
        assert!(batch.is_empty());
    }

    #[test]
    fn backoff_grows_with_failures_not_crashes() {
        let mut batch = CompletionBatch::new(100, 0.01, 1).unwrap();
        let crashed_twice = Attempt {
            id: 1,
            run_lease: 1,
            attempt: 3,
            max_attempts: 2,
            crashes: 2,
        };
        assert_eq!(
            batch.failed(crashed_twice, &boom(), 0.0),
            JobState::Retryable
        );
        let delay = batch.take().delays_s[0].unwrap();
        assert!((2.0..=2.5).contains(&delay), "one failure so far: {delay}");
    }

    #[test]
    fn flush_is_due_by_size_or_age() {
        let mut batch = CompletionBatch::new(2, 0.25, 1).unwrap();
        assert!(!batch.is_due(100.0));
        assert_eq!(batch.due_in(100.0), None);
        batch.completed(attempt(1, 1, 1), 100.0);
        assert!(!batch.is_due(100.125));
        assert_eq!(batch.due_in(100.125), Some(0.125));
        assert!(batch.is_due(100.25));
        batch.completed(attempt(2, 1, 1), 100.001);
        assert!(batch.is_due(100.001), "size trigger");
        assert_eq!(batch.due_in(100.001), Some(0.0));
        batch.take();
        assert!(!batch.is_due(200.0));
    }

    #[test]
    fn take_hands_out_at_most_one_batch_oldest_first() {
        let mut batch = CompletionBatch::new(2, 10.0, 1).unwrap();
        for id in 1..=5 {
            batch.completed(attempt(id, 1, 1), 0.0);
        }
        assert_eq!(batch.take().ids, [1, 2]);
        assert!(batch.is_due(0.0), "the rest is due at once");
        assert_eq!(batch.take().ids, [3, 4]);
        assert_eq!(batch.due_in(0.0), Some(0.0));
        assert_eq!(batch.take().ids, [5]);
        assert!(batch.is_empty());
        assert_eq!(batch.due_in(0.0), None);
    }

    #[test]
    fn error_entries_are_valid_json_without_nul() {
        let at = attempt(1, 2, 5);
        let report = ErrorReport {
            error_type: "Bad\0Type",
            message: "line \"one\"\nline two\0",
            traceback: None,
        };
        let entry = error_entry(&at, &report, JobState::Retryable, None);
        assert_eq!(
            entry,
            "{\"attempt\":2,\"type\":\"Bad\u{FFFD}Type\",\"message\":\"line \\\"one\\\"\\nline two\u{FFFD}\",\"outcome\":\"retryable\"}"
        );
    }

    #[test]
    fn long_text_is_cut_visibly() {
        assert_eq!(head("abcdef", 3), "abc… [3 more characters]");
        assert_eq!(tail("abcdef", 2), "[4 earlier characters] …ef");
        assert_eq!(head("abc", 3), "abc");
    }

    #[test]
    fn record_maps_each_outcome_to_its_state() {
        let mut batch = CompletionBatch::new(100, 0.01, 1).unwrap();
        let outcomes = [
            (Outcome::Completed, JobState::Completed),
            (Outcome::RetryAfter { delay_s: 3.0 }, JobState::Retryable),
            (Outcome::Snooze { delay_s: 3.0 }, JobState::Scheduled),
            (Outcome::WaitingForCallback, JobState::WaitingExternal),
            (Outcome::Cancelled { reason: "no" }, JobState::Cancelled),
            (Outcome::Failed(boom()), JobState::Retryable),
            (Outcome::FailedTerminal(boom()), JobState::Failed),
        ];
        for (id, (outcome, state)) in (1..).zip(outcomes.iter()) {
            assert_eq!(batch.record(attempt(id, 1, 25), outcome, 0.0), *state);
        }
        assert_eq!(batch.ids(), [1, 2, 3, 4, 5, 6, 7]);
        let columns = batch.take();
        assert_eq!(columns.refunds, [0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn a_row_can_be_removed_from_a_taken_batch() {
        let mut batch = CompletionBatch::new(100, 0.01, 1).unwrap();
        for id in 1..=3 {
            batch.record(attempt(id, 1, 1), &Outcome::Completed, 0.0);
        }
        let mut columns = batch.take();
        assert!(columns.remove(2));
        assert!(!columns.remove(2));
        assert_eq!(columns.ids, [1, 3]);
        assert_eq!(columns.run_leases, [10, 30]);
        assert_eq!(columns.len(), 2);
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(CompletionBatch::new(0, 0.1, 1).is_err());
        assert!(CompletionBatch::new(1, f64::NAN, 1).is_err());
        assert!(CompletionBatch::new(1, -1.0, 1).is_err());
    }
}
