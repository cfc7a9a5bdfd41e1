-- name: leaders_claim
-- Takes role $1 for worker $2 for $3 seconds when nobody holds it or its
-- lease ran out, or extends the lease of the worker that holds it; returns
-- the term held (a new term whenever the role changes hands or lapsed), or
-- nothing when another worker holds it.
INSERT INTO awa.leaders AS leaders (role, worker_id, term, elected_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3::float8 * interval '1 second')
ON CONFLICT (role) DO UPDATE
SET worker_id = excluded.worker_id,
    term = CASE WHEN leaders.worker_id = excluded.worker_id AND leaders.expires_at > now()
                THEN leaders.term ELSE leaders.term + 1 END,
    elected_at = CASE WHEN leaders.worker_id = excluded.worker_id AND leaders.expires_at > now()
                      THEN leaders.elected_at ELSE now() END,
    expires_at = excluded.expires_at
WHERE leaders.expires_at <= now() OR leaders.worker_id = excluded.worker_id
RETURNING term;

-- name: leaders_resign
-- Gives up role $1 if worker $2 holds it in term $3, so another worker can take it at once.
DELETE FROM awa.leaders WHERE role = $1 AND worker_id = $2 AND term = $3;

-- name: leaders_current
-- Who holds role $1, in which term, and whether its lease still runs.
SELECT worker_id, term, elected_at, expires_at, expires_at > now() AS live
FROM awa.leaders
WHERE role = $1;
