-- name: locks_try_leader
-- Tries to become the maintenance leader (session advisory lock; no wait).
SELECT pg_try_advisory_lock($1::bigint) AS acquired;

-- name: locks_check_connection
-- Proves the leader's connection (and so its lock) is still there.
SELECT 1 AS alive;

-- name: locks_release_leader
-- Gives up leadership.
SELECT pg_advisory_unlock($1::bigint) AS released;
