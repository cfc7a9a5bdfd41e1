-- awa schema, version 2: unique keys (deduplicated inserts and follow-ups)
-- and the callback a parked job waits for.

-- One bit per state, for `unique_states`: a unique key blocks duplicates only
-- while its job is in one of the states the inserter chose. Declared
-- IMMUTABLE so the unique index below can use it in its predicate.
CREATE FUNCTION awa.job_state_bit(state awa.job_state) RETURNS smallint
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
    END)::smallint
$$;

ALTER TABLE awa.jobs
    ADD COLUMN unique_key bytea,
    ADD COLUMN unique_states smallint,
    ADD COLUMN callback_id uuid,
    ADD COLUMN callback_timeout_at timestamptz,
    ADD CONSTRAINT jobs_unique_states_range CHECK (unique_states BETWEEN 1 AND 255),
    ADD CONSTRAINT jobs_unique_complete CHECK ((unique_key IS NULL) = (unique_states IS NULL));

-- At most one job per unique key among the rows whose state is in their own
-- `unique_states`. Jobs without a key never enter this index.
CREATE UNIQUE INDEX jobs_unique_idx ON awa.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states & awa.job_state_bit(state)) <> 0;

-- Callback resolution finds the parked job by its callback id.
CREATE UNIQUE INDEX jobs_callback_idx ON awa.jobs (callback_id)
    WHERE callback_id IS NOT NULL;
