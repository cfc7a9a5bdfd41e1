-- awa schema, version 12: the maintenance indexes read no column that a
-- claim or an outcome writes.
--
-- PostgreSQL makes an update HOT (no new index entries, no dead tuple for
-- vacuum) only when it changes no column that any index of the table reads,
-- in its key or in its predicate. Three maintenance indexes read `state` in
-- their predicates (and the dead-letter index `finalized_at` in its key), so
-- every claim and every outcome of every job paid for them, though each
-- serves rare rows (docs/storage.md, "How awa's guarantees map onto E").
-- Each now reads only a column that is written on the rare path it serves:
--
-- * dead letters: `failure_reason`, which every failed job has (awa sets
--   it; a trigger fills it in for a job failed by anyone else's SQL),
--   keyed by id;
-- * callback deadlines: `callback_timeout_at`, set only while a callback is
--   registered;
-- * job deadlines: `deadline_at`, fixed at insert. This index also holds
--   finished jobs until retention removes them, so the deadline pass scans
--   from a floor it keeps (awa/maintenance/rescuer.py).
--
-- The BRIN index on finalized_at goes: completion writes that column, and
-- in PostgreSQL 15 a BRIN index blocks HOT like any other (from 16 on it
-- does not). Retention walks the table's pages instead (jobs_prune).
--
-- A failed job without a reason (failed by an awa older than version 5, or
-- by an operator's own SQL) gets the reason its failure implies: its
-- attempts were used up, or something stopped it early.

CREATE FUNCTION awa.fill_failure_reason() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE awa.jobs
    SET failure_reason = CASE WHEN attempt >= max_attempts THEN 'max_attempts_exhausted'
                              ELSE 'terminal_error' END
    WHERE id = NEW.id AND state = 'failed' AND failure_reason IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_fill_failure_reason_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'failed' AND NEW.failure_reason IS NULL)
    EXECUTE FUNCTION awa.fill_failure_reason();

CREATE TRIGGER jobs_fill_failure_reason_on_update
    AFTER UPDATE OF state, failure_reason ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'failed' AND NEW.failure_reason IS NULL)
    EXECUTE FUNCTION awa.fill_failure_reason();

UPDATE awa.jobs
SET failure_reason = CASE WHEN attempt >= max_attempts THEN 'max_attempts_exhausted'
                          ELSE 'terminal_error' END
WHERE state = 'failed' AND failure_reason IS NULL;

DROP INDEX awa.jobs_dead_letter_idx;
CREATE INDEX jobs_dead_letter_idx ON awa.jobs (id)
    WHERE failure_reason IS NOT NULL;

DROP INDEX awa.jobs_callback_timeout_idx;
CREATE INDEX jobs_callback_timeout_idx ON awa.jobs (callback_timeout_at)
    WHERE callback_timeout_at IS NOT NULL;

DROP INDEX awa.jobs_deadline_idx;
CREATE INDEX jobs_deadline_idx ON awa.jobs (deadline_at)
    WHERE deadline_at IS NOT NULL;

DROP INDEX awa.jobs_finalized_brin;
