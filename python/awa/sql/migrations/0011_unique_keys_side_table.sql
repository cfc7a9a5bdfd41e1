-- awa schema, version 11: unique keys are held in a table of their own.
--
-- Until now one partial unique index on awa.jobs (jobs_unique_idx) enforced
-- the keys; its predicate reads each row's state. An index on a column a
-- statement writes makes that write a non-HOT update, so every claim and
-- every outcome of every job, keyed or not, left a dead tuple and new index
-- entries behind (docs/storage.md). The keys now live in
-- awa.job_unique_keys: one row per key while its job is in one of its own
-- unique_states. Triggers keep the table true to the jobs on every path
-- (awa's statements, COPY, an operator's own SQL):
--
-- * a job that enters a state holding its key (insert, redrive) takes it,
--   or the statement fails with a unique violation on job_unique_keys_pkey,
--   as it failed on jobs_unique_idx before. awa's inserts take their keys
--   first, ON CONFLICT DO NOTHING, and write only the jobs that got one, so
--   a duplicate is skipped as before;
-- * a job that leaves its states, or is deleted while in them, frees it;
-- * TRUNCATE of awa.jobs empties the table.
--
-- What a key costs now falls on keyed jobs only: a row and its index entry
-- when taken, a delete when freed. A plain index on the key (it never
-- changes) keeps cancel_by_unique_key an index lookup.
--
-- The jobs table is locked against writes first, so no insert of an older
-- awa can slip between the copy of the held keys and the triggers.

LOCK TABLE awa.jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE awa.job_unique_keys (
    unique_key bytea PRIMARY KEY,
    job_id     bigint NOT NULL
);

INSERT INTO awa.job_unique_keys (unique_key, job_id)
SELECT unique_key, id FROM awa.jobs
WHERE unique_key IS NOT NULL AND (unique_states & awa.job_state_bit(state)) <> 0;

-- A job takes its key as it enters a state that holds it. awa's own
-- statements have already taken it in the same statement, so the first
-- lookup finds the job's own row and ends there; anything else takes it
-- here.
CREATE FUNCTION awa.take_unique_key() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF (NEW.unique_states & awa.job_state_bit(NEW.state)) = 0 THEN
        RETURN NULL;  -- not a state of its set: it holds nothing
    END IF;
    IF EXISTS (SELECT FROM awa.job_unique_keys
               WHERE unique_key = NEW.unique_key AND job_id = NEW.id) THEN
        RETURN NULL;
    END IF;
    INSERT INTO awa.job_unique_keys (unique_key, job_id)
    VALUES (NEW.unique_key, NEW.id)
    ON CONFLICT (unique_key) DO NOTHING;
    IF NOT EXISTS (SELECT FROM awa.job_unique_keys
                   WHERE unique_key = NEW.unique_key AND job_id = NEW.id) THEN
        RAISE EXCEPTION 'unique key % is held by another job', NEW.unique_key
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'job_unique_keys_pkey',
                  SCHEMA = 'awa', TABLE = 'job_unique_keys';
    END IF;
    RETURN NULL;
END
$$;

-- A job frees its key as it leaves the states that hold it, or is deleted.
CREATE FUNCTION awa.free_unique_key() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.unique_states & awa.job_state_bit(NEW.state)) <> 0 THEN
            RETURN NULL;  -- a terminal state of its set: it keeps the key
        END IF;
    END IF;
    DELETE FROM awa.job_unique_keys WHERE unique_key = OLD.unique_key AND job_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION awa.free_all_unique_keys() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE awa.job_unique_keys;
    RETURN NULL;
END
$$;

-- Every condition starts with the key test, so rows without a key, nearly
-- all of them, stop there, and no condition calls a function: a condition
-- is planned again for every statement, and one that inlined
-- awa.job_state_bit cost each claim and outcome statement tens of
-- microseconds (a drain 13 % slower). So the conditions only narrow the
-- rows down by state (a job's set always holds every waiting and running
-- state, or is 0), and the functions decide exactly. Every trigger runs
-- after its row: a BEFORE INSERT trigger makes COPY write row by row instead
-- of in batches, and a BEFORE UPDATE trigger locks each row it fires for
-- first (a heap lock record each). Raising in an AFTER trigger fails the
-- statement all the same.
CREATE TRIGGER jobs_take_unique_key_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.unique_key IS NOT NULL AND NEW.unique_states <> 0)
    EXECUTE FUNCTION awa.take_unique_key();

-- Only a job leaving a terminal state can enter its set.
CREATE TRIGGER jobs_take_unique_key_on_update
    AFTER UPDATE OF state ON awa.jobs FOR EACH ROW
    WHEN (NEW.unique_key IS NOT NULL AND NEW.unique_states <> 0
          AND OLD.state IN ('completed', 'failed', 'cancelled')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION awa.take_unique_key();

-- Only a job entering a terminal state can leave its set.
CREATE TRIGGER jobs_free_unique_key_on_update
    AFTER UPDATE OF state ON awa.jobs FOR EACH ROW
    WHEN (OLD.unique_key IS NOT NULL AND OLD.unique_states <> 0
          AND NEW.state IN ('completed', 'failed', 'cancelled')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION awa.free_unique_key();

CREATE TRIGGER jobs_free_unique_key_on_delete
    AFTER DELETE ON awa.jobs FOR EACH ROW
    WHEN (OLD.unique_key IS NOT NULL AND OLD.unique_states <> 0)
    EXECUTE FUNCTION awa.free_unique_key();

CREATE TRIGGER jobs_free_unique_keys_on_truncate
    AFTER TRUNCATE ON awa.jobs FOR EACH STATEMENT
    EXECUTE FUNCTION awa.free_all_unique_keys();

-- cancel_by_unique_key finds a key's unfinished jobs by it.
CREATE INDEX jobs_unique_key_idx ON awa.jobs (unique_key) WHERE unique_key IS NOT NULL;

DROP INDEX awa.jobs_unique_idx;
