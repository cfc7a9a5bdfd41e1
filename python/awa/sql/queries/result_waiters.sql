-- awa.result_waiters: who waits for a job's result (client.result), so
-- that a batch of outcomes notifies awa_finished only when someone waits
-- for one of its jobs (migration 28).

-- name: result_waiters_add
-- Registers a waiter for job $1 (after it LISTENs); returns its token. Rows
-- a day old are deleted on the way: left by a process that died.
WITH forgotten AS (
    DELETE FROM awa.result_waiters WHERE since < now() - interval '1 day'
)
INSERT INTO awa.result_waiters (job_id) VALUES ($1) RETURNING waiter;

-- name: result_waiters_remove
-- The waiter is done.
DELETE FROM awa.result_waiters WHERE job_id = $1 AND waiter = $2;
