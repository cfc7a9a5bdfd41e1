-- awa schema, version 20: schema versions and undecodable jobs.
--
-- A job records the schema version its arguments were written at
-- (@client.task(..., schema_version=N)); NULL is version 1, and awa writes
-- NULL for version 1, so the rows of tasks that never declare a version are
-- as before. A worker upcasts older arguments to its task's version before
-- decoding them; a job it still cannot decode (no task for its kind, a
-- version newer than its task's, an upcaster that raised, arguments that do
-- not validate) is parked in the new state `undecodable`, its attempt given
-- back, with the reason in failure_reason and an entry in errors, until
-- retry_undecodable makes it available again for a newer worker.
--
-- Migrations run in one transaction each, and a value added to an enum
-- cannot be used before its transaction commits. So nothing here uses
-- 'undecodable' where it is parsed now: the triggers and their conditions
-- need no change (below), and the one function that names the state is
-- created without its body being checked (check_function_bodies = off); it
-- is parsed at its first call, after the commit.

ALTER TYPE awa.job_state ADD VALUE 'undecodable';

-- No default and no rewrite: adding a nullable column is a catalog change.
ALTER TABLE awa.jobs
    ADD COLUMN schema_version smallint,
    ADD CONSTRAINT jobs_schema_version_positive CHECK (schema_version >= 1);

-- An undecodable job says why in failure_reason (it is not a dead letter:
-- the dead-letter queries also test the state).
ALTER TABLE awa.jobs
    DROP CONSTRAINT jobs_failure_reason_known,
    ADD CONSTRAINT jobs_failure_reason_known CHECK (failure_reason IN (
        'max_attempts_exhausted', 'terminal_error', 'callback_timeout',
        'deadline_exceeded', 'crash_loop',
        'unknown_kind', 'unknown_schema_version', 'upcast_failed', 'args_invalid'));

ALTER TYPE awa.job_input ADD ATTRIBUTE schema_version smallint;

-- An undecodable job waits to be made available again, so it holds its
-- unique key as an available one does: its bit is available's, which every
-- set that holds a key includes (jobs_unique_states_valid). The key triggers
-- need no change: a job enters and leaves `undecodable` from and to states
-- that hold the key (running, available), and those triggers fire only for
-- a job entering or leaving a finished state. Nor does awa.follow_job_v1:
-- a job made available again lowers its lane through the available branch,
-- and `undecodable` is neither of the states it follows.
SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION awa.job_state_bit(state awa.job_state) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (CASE state
        WHEN 'scheduled' THEN 1
        WHEN 'available' THEN 2
        WHEN 'running' THEN 4
        WHEN 'retryable' THEN 8
        WHEN 'waiting_external' THEN 16
        WHEN 'completed' THEN 32
        WHEN 'failed' THEN 64
        WHEN 'cancelled' THEN 128
        WHEN 'undecodable' THEN 2
    END)::smallint
$$;

-- The schema versions of jobs, by id, for the jobs a claim took. VOLATILE,
-- so its query takes a snapshot of its own: a job a claim took may have
-- been committed after the claiming statement's snapshot was taken (see
-- awa.claim_v1), and a join in that statement would not see it.
CREATE FUNCTION awa.job_schema_versions_v1(job_ids bigint[])
RETURNS TABLE (id bigint, schema_version smallint)
LANGUAGE sql VOLATILE
AS $$ SELECT jobs.id, jobs.schema_version FROM awa.jobs WHERE jobs.id = ANY (job_ids) $$;
