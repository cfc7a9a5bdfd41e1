-- name: locks_try_leader
-- Tries to become the maintenance leader (session advisory lock; no wait).
SELECT pg_try_advisory_lock($1::bigint) AS acquired;

-- name: locks_release_leader
-- Gives up leadership.
SELECT pg_advisory_unlock($1::bigint) AS released;
