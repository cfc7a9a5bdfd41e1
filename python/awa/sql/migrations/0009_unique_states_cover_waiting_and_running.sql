-- awa schema, version 9: a unique key is held in every state its job waits
-- or runs in.
--
-- A job holds its unique key while its state is in its own `unique_states`
-- (jobs_unique_idx). Versions before this one accepted any set. A job whose
-- set leaves out a state it waits or runs in lets a duplicate in while it
-- is there, and then cannot move back into its set while the duplicate
-- holds the key: the statement moving it fails, and with it every other job
-- that statement moves (promotion, claims, releases, rescues, outcomes,
-- callbacks). Inserts now refuse such sets; this migration repairs the rows
-- older versions wrote, and a constraint keeps new ones out.
--
-- The repair moves no job. Per key, of the rows that hold it now or are
-- waiting or running (each of which would hold it once repaired), one keeps
-- it: the row holding it now, else the oldest. That row, and every finished
-- row, gets the five waiting and running states added to its set. The
-- others were let in as duplicates by their narrow set: they still run and
-- keep their key (cancel_by_unique_key still finds them), but hold it in no
-- state (0).
--
-- The table is locked first, so an older awa still running cannot write a
-- narrow set between the repair and the constraint; its inserts wait for
-- the migration, and afterwards fail on jobs_unique_states_valid.

LOCK TABLE awa.jobs IN ACCESS EXCLUSIVE MODE;

ALTER TABLE awa.jobs DROP CONSTRAINT jobs_unique_states_range;  -- 1 to 255: no 0

-- 31 = scheduled | available | running | retryable | waiting_external
-- (awa.job_state_bit).
WITH keyed AS (
    SELECT id, unique_key,
           (unique_states & awa.job_state_bit(state)) <> 0 AS holds,
           state NOT IN ('completed', 'failed', 'cancelled') AS unfinished,
           (unique_states & 31) = 31 AS covered
    FROM awa.jobs
    WHERE unique_key IS NOT NULL
), contenders AS (
    SELECT id, row_number() OVER (PARTITION BY unique_key ORDER BY holds DESC, id) AS place
    FROM keyed
    WHERE holds OR unfinished
)
UPDATE awa.jobs AS jobs
SET unique_states = CASE WHEN contenders.place > 1 THEN 0 ELSE jobs.unique_states | 31 END
FROM keyed LEFT JOIN contenders ON contenders.id = keyed.id
WHERE jobs.id = keyed.id AND NOT keyed.covered;

-- A set holds every waiting and running state (31), or nothing at all (0,
-- written only by the repair above).
ALTER TABLE awa.jobs
    ADD CONSTRAINT jobs_unique_states_valid CHECK (
        unique_states BETWEEN 0 AND 255 AND (unique_states = 0 OR (unique_states & 31) = 31));
