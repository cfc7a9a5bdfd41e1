-- awa schema, version 13: scheduled and retryable jobs are found by the
-- time they are due in a table of their own.
--
-- Promotion found them through jobs_due_idx, whose predicate reads `state`:
-- an index that reads a column makes every update that changes it non-HOT,
-- so every claim and outcome of every job paid for it (see migration 0012).
-- awa.job_due holds one row per job that is scheduled or retryable, keyed by
-- when it is due. Triggers on awa.jobs keep it true on every path (awa's
-- statements, COPY, an operator's own SQL): a job that enters one of the two
-- states, or moves its run_at while in one, gets its row; a job that leaves
-- them, or is deleted, loses it; TRUNCATE empties the table. A job that is
-- never scheduled writes nothing here; one that is costs a row and its
-- delete.
--
-- The jobs table is locked against writes first, so no job can change
-- between the copy of the due jobs and the triggers.

LOCK TABLE awa.jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE awa.job_due (
    run_at timestamptz NOT NULL,
    job_id bigint NOT NULL,
    PRIMARY KEY (run_at, job_id)
);

INSERT INTO awa.job_due (run_at, job_id)
SELECT run_at, id FROM awa.jobs WHERE state IN ('scheduled', 'retryable');

CREATE FUNCTION awa.track_due_job() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state IN ('scheduled', 'retryable') THEN
        DELETE FROM awa.job_due WHERE run_at = OLD.run_at AND job_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state IN ('scheduled', 'retryable') THEN
        INSERT INTO awa.job_due (run_at, job_id) VALUES (NEW.run_at, NEW.id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION awa.forget_due_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE awa.job_due;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_track_due_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.state IN ('scheduled', 'retryable'))
    EXECUTE FUNCTION awa.track_due_job();

CREATE TRIGGER jobs_track_due_on_update
    AFTER UPDATE OF state, run_at ON awa.jobs FOR EACH ROW
    WHEN ((OLD.state IN ('scheduled', 'retryable') OR NEW.state IN ('scheduled', 'retryable'))
          AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.run_at IS DISTINCT FROM NEW.run_at))
    EXECUTE FUNCTION awa.track_due_job();

CREATE TRIGGER jobs_track_due_on_delete
    AFTER DELETE ON awa.jobs FOR EACH ROW
    WHEN (OLD.state IN ('scheduled', 'retryable'))
    EXECUTE FUNCTION awa.track_due_job();

CREATE TRIGGER jobs_forget_due_on_truncate
    AFTER TRUNCATE ON awa.jobs FOR EACH STATEMENT
    EXECUTE FUNCTION awa.forget_due_jobs();

DROP INDEX awa.jobs_due_idx;
