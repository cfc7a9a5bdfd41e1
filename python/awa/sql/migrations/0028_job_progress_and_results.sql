-- awa schema, version 28: a job's progress and its result.
--
-- - progress: what the running attempt last reported (percent, message,
--   data), written by the worker's heartbeat (batched) or by
--   `await job.flush_progress()`, guarded by the run lease. A retry keeps
--   it: the next attempt starts from it.
-- - result: what the handler returned (JSON), written by the completion
--   that completes the job, in the same statement.
--
-- Both are columns of awa.jobs rather than a side table. A completion
-- writes a new version of the job's row anyway, so a result costs no
-- second write and no second table to clean up (retention deletes it with
-- the job); a NULL costs one bit of the row's null bitmap, which every row
-- already has (metadata, errors and others are nullable), so a job that
-- returns None is exactly as wide as before. No index reads either column,
-- so the updates that write them stay HOT. A side table would have made
-- every claim join it to read a retried attempt's progress and every
-- deletion of jobs reach into it; progress is written at most once a
-- heartbeat interval per job, and only by jobs that report it.
--
-- - result_waiters: who waits for a result, so that the completion notifies
--   only for the batches someone waits on (see below).

ALTER TABLE awa.jobs ADD COLUMN progress jsonb, ADD COLUMN result jsonb;

-- Who waits for a result (client.result), by job: a batch of outcomes that
-- ends a job notifies awa_finished only when one of its jobs has a waiter
-- here, so no notification (and no wake-up of every LISTENing backend) is
-- sent for the batches nobody waits on. Unlogged: a waiter lives no longer
-- than its connection, and a crash may forget them all (a waiter also reads
-- its job every few seconds). A waiter adds its row after it LISTENs and
-- deletes it when it returns; a row left by a process that died is deleted
-- by the next waiter after a day (result_waiters_add).
CREATE UNLOGGED TABLE awa.result_waiters (
    job_id bigint NOT NULL,
    waiter uuid NOT NULL DEFAULT gen_random_uuid(),
    since  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, waiter)
);

-- Whether any of these jobs has a waiter. Volatile, so its query takes a
-- snapshot of its own: called after a batch's update, it sees a waiter that
-- registered while the update ran (one that registers later reads its job
-- with FOR SHARE, and so waits for that write to commit, then sees it).
CREATE FUNCTION awa.result_awaited_v1(job_ids bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM awa.result_waiters WHERE job_id = ANY (job_ids));
END
$$;
