-- awa schema, version 5: dead-letter reasons and retention.

-- Why a failed job failed (the dead-letter queue shows and filters on it);
-- NULL for every other state.
ALTER TABLE awa.jobs
    ADD COLUMN failure_reason text,
    ADD CONSTRAINT jobs_failure_reason_known CHECK (failure_reason IN (
        'max_attempts_exhausted', 'terminal_error', 'callback_timeout',
        'deadline_exceeded', 'crash_loop'));

-- The dead-letter queue: failed jobs, newest first. Failures are rare, so
-- this costs the common path nothing.
CREATE INDEX jobs_dead_letter_idx ON awa.jobs (finalized_at)
    WHERE state = 'failed';

-- Retention finds finished jobs by age. A BRIN index stays tiny and costs
-- almost nothing per finished job; jobs finish roughly in the order they
-- were written, which is what it needs.
CREATE INDEX jobs_finalized_brin ON awa.jobs USING brin (finalized_at)
    WITH (autosummarize = on);
