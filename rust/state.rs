//! Job states and the outcomes a handler can return.
//!
//! The names here are the database's (`awa.job_state`); the Python layer
//! exposes the same strings through `awa.JobState`.

/// The durable state of a job (spec 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    Scheduled,
    Available,
    Running,
    Retryable,
    WaitingExternal,
    Completed,
    Failed,
    Cancelled,
    /// Parked: no worker could decode its arguments (spec 003); an operator
    /// makes it available again for a newer worker.
    Undecodable,
}

impl JobState {
    pub const ALL: [JobState; 9] = [
        JobState::Scheduled,
        JobState::Available,
        JobState::Running,
        JobState::Retryable,
        JobState::WaitingExternal,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Undecodable,
    ];

    /// The name used in SQL and in `awa.JobState`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Retryable => "retryable",
            JobState::WaitingExternal => "waiting_external",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Undecodable => "undecodable",
        }
    }

    pub fn parse(name: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == name)
    }

    /// Terminal states are never left again by the worker paths (an
    /// undecodable job is not terminal: it is made available again).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Failed | JobState::Cancelled
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_name() {
        for state in JobState::ALL {
            assert_eq!(JobState::parse(state.as_str()), Some(state));
        }
        assert_eq!(JobState::parse("done"), None);
    }

    #[test]
    fn only_completed_failed_and_cancelled_are_terminal() {
        let terminal: Vec<_> = JobState::ALL
            .into_iter()
            .filter(|state| state.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [JobState::Completed, JobState::Failed, JobState::Cancelled]
        );
    }
}

/// Why a job ended `failed`: what the dead-letter queue shows and filters on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// A retryable failure with no attempts left.
    MaxAttemptsExhausted,
    /// The handler (or an external callback) said the job must not be retried.
    TerminalError,
    /// A parked job's callback deadline passed on its last attempt.
    CallbackTimeout,
    /// The last attempt ran past its deadline.
    DeadlineExceeded,
    /// The job kept killing its workers (`max_crashes` spent).
    CrashLoop,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] = [
        FailureReason::MaxAttemptsExhausted,
        FailureReason::TerminalError,
        FailureReason::CallbackTimeout,
        FailureReason::DeadlineExceeded,
        FailureReason::CrashLoop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::MaxAttemptsExhausted => "max_attempts_exhausted",
            FailureReason::TerminalError => "terminal_error",
            FailureReason::CallbackTimeout => "callback_timeout",
            FailureReason::DeadlineExceeded => "deadline_exceeded",
            FailureReason::CrashLoop => "crash_loop",
        }
    }

    /// The reason for a retryable failure of `error_type` that found no
    /// attempts left: timeouts keep their own name.
    pub fn for_exhausted(error_type: &str) -> FailureReason {
        match error_type {
            "CallbackTimeout" => FailureReason::CallbackTimeout,
            "AttemptTimeout" => FailureReason::DeadlineExceeded,
            _ => FailureReason::MaxAttemptsExhausted,
        }
    }
}
