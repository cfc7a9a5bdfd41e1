-- awa schema, version 4: attempt deadlines.

-- Set when an attempt starts, from its task's or queue's timeout: the
-- worker cancels a handler still running then, and maintenance rescues an
-- attempt past it whose worker did not (it hung or died).
ALTER TABLE awa.jobs ADD COLUMN attempt_deadline_at timestamptz;

-- Only attempts that have a deadline enter it, so jobs without timeouts
-- cost nothing more to claim.
CREATE INDEX jobs_attempt_deadline_idx ON awa.jobs (attempt_deadline_at)
    WHERE state = 'running' AND attempt_deadline_at IS NOT NULL;
