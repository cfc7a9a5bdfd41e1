-- awa schema, version 7: a job's own attempt timeout and its overall deadline.

ALTER TABLE awa.jobs
    -- Overrides the task's and the queue's timeout for this job's attempts.
    ADD COLUMN timeout_ms integer,
    -- After it the job does not run again: an attempt ends by then, and a
    -- job still waiting fails with deadline_exceeded.
    ADD COLUMN deadline_at timestamptz,
    ADD CONSTRAINT jobs_timeout_positive CHECK (timeout_ms > 0);

-- Maintenance finds unfinished jobs past their deadline; only jobs that
-- have one enter it.
CREATE INDEX jobs_deadline_idx ON awa.jobs (deadline_at)
    WHERE deadline_at IS NOT NULL
      AND state IN ('scheduled', 'available', 'retryable', 'waiting_external');
