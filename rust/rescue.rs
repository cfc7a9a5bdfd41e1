//! Rescue decisions: what becomes of an attempt whose worker died.
//!
//! The maintenance leader finds running jobs whose worker stopped
//! heartbeating and asks [`plan_rescue`] what to do with each. A crash is
//! counted apart from failures (`crashes`, bounded by `max_crashes`): the
//! job goes back to `retryable` after a backoff on its crash count, or to
//! `failed` with reason `crash_loop` once the crash budget is spent. The
//! attempt stays consumed, but [`crate::retry::has_attempts_left`] does not
//! count it as a failure.

use crate::completion::{error_entry, Attempt, Columns, ErrorReport};
use crate::retry::{backoff_s, crash_budget_exhausted, Jitter};
use crate::state::{FailureReason, JobState};

/// A running job that lost its worker.
#[derive(Clone, Copy, Debug)]
pub struct Orphan {
    pub id: i64,
    pub run_lease: i64,
    pub attempt: i32,
    pub max_attempts: i32,
    pub crashes: i32,
    pub max_crashes: Option<i32>,
}

/// The error type recorded for a crash.
pub const CRASH_ERROR_TYPE: &str = "WorkerCrash";

/// One guarded row per orphan, in the completion batch's column shape.
pub fn plan_rescue(orphans: &[Orphan], reason: &str, jitter: &mut Jitter) -> Columns {
    let mut columns = Columns::default();
    for orphan in orphans {
        let crashes_after = orphan.crashes + 1;
        let exhausted = crash_budget_exhausted(crashes_after, orphan.max_crashes);
        let (state, delay, message, failure) = if exhausted {
            let message = format!(
                "crash_loop: the worker died during {crashes_after} attempts \
                 (max_crashes is {}); {reason}",
                orphan.max_crashes.unwrap_or_default()
            );
            (
                JobState::Failed,
                None,
                message,
                Some(FailureReason::CrashLoop),
            )
        } else {
            let delay = backoff_s(
                u32::try_from(crashes_after).unwrap_or(1).max(1),
                jitter.next_unit(),
            );
            (JobState::Retryable, Some(delay), reason.to_owned(), None)
        };
        let attempt = Attempt {
            id: orphan.id,
            run_lease: orphan.run_lease,
            attempt: orphan.attempt,
            max_attempts: orphan.max_attempts,
            crashes: orphan.crashes,
        };
        let report = ErrorReport {
            error_type: CRASH_ERROR_TYPE,
            message: &message,
            traceback: None,
        };
        columns.ids.push(orphan.id);
        columns.run_leases.push(orphan.run_lease);
        columns.states.push(state.as_str());
        columns.delays_s.push(delay);
        columns.refunds.push(0);
        columns
            .errors
            .push(Some(error_entry(&attempt, &report, state, failure)));
    }
    columns
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the floats compared are exact by construction
mod tests {
    use super::*;

    fn orphan(id: i64, crashes: i32, max_crashes: Option<i32>) -> Orphan {
        Orphan {
            id,
            run_lease: 7,
            attempt: crashes + 1,
            max_attempts: 25,
            crashes,
            max_crashes,
        }
    }

    #[test]
    fn crashes_retry_until_the_budget_is_spent() {
        let mut jitter = Jitter::new(3);
        let plan = plan_rescue(
            &[
                orphan(1, 0, Some(5)),
                orphan(2, 5, Some(5)),
                orphan(3, 40, None),
            ],
            "worker stopped heartbeating",
            &mut jitter,
        );
        assert_eq!(plan.ids, [1, 2, 3]);
        assert_eq!(plan.states, ["retryable", "failed", "retryable"]);
        assert!((2.0..=2.5).contains(&plan.delays_s[0].unwrap()));
        assert_eq!(plan.delays_s[1], None);
        let failed = plan.errors[1].as_deref().unwrap();
        assert!(failed.contains("crash_loop"), "{failed}");
        assert!(failed.contains("WorkerCrash"), "{failed}");
        assert_eq!(plan.run_leases, [7, 7, 7]);
    }

    #[test]
    fn zero_max_crashes_fails_on_the_first_crash() {
        let plan = plan_rescue(&[orphan(1, 0, Some(0))], "gone", &mut Jitter::new(1));
        assert_eq!(plan.states, ["failed"]);
    }
}
