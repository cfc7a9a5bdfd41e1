-- name: quarantine_record_crashes
-- Counts the crashes of rescued jobs ($1 ids, $4 the worker that held each)
-- against their fingerprints: one per worker that died holding jobs of it,
-- however many it held (a worker holds many at once, and one unrelated kill
-- must not quarantine a kind whose arguments repeat) and however the rescue
-- batched them (a worker already counted last for the fingerprint is not
-- counted again; the rescue reads orphans worker by worker). A window of
-- $2 seconds starts at a fingerprint's first crash; $3 crashes inside it
-- quarantine the fingerprint (claims hold its jobs). A crash after the
-- window starts a new one. Returns every fingerprint counted, with
-- newly_quarantined set for those quarantined by this call.
WITH held AS (
    SELECT awa.job_fingerprint(jobs.kind, jobs.args) AS fingerprint, jobs.kind,
           max(jobs.id) AS job_id,
           array_agg(DISTINCT rescued.worker_id) AS workers,
           max(rescued.worker_id) AS last_worker_id
    FROM unnest($1::bigint[], $4::bigint[]) AS rescued(job_id, worker_id)
    JOIN awa.jobs ON jobs.id = rescued.job_id
    GROUP BY 1, 2
), crashed AS (
    SELECT held.fingerprint, held.kind, held.job_id, held.last_worker_id,
           (cardinality(held.workers)
            - CASE WHEN q.last_worker_id = ANY (held.workers) THEN 1 ELSE 0 END)::integer
               AS crashes
    FROM held
    LEFT JOIN awa.quarantine AS q ON q.fingerprint = held.fingerprint
), counted AS (
    INSERT INTO awa.quarantine AS q (fingerprint, kind, crashes, window_started_at,
                                     last_crash_at, last_job_id, last_worker_id,
                                     quarantined_at, reason)
    SELECT fingerprint, kind, crashes, now(), now(), job_id, last_worker_id,
           CASE WHEN crashes >= $3::integer THEN now() END,
           CASE WHEN crashes >= $3::integer
                THEN format('%s worker crashes within %s s', crashes, $2::float8) END
    FROM crashed
    WHERE crashes > 0
    ON CONFLICT (fingerprint) DO UPDATE SET
        crashes = CASE WHEN q.quarantined_at IS NULL
                        AND q.window_started_at < now() - $2::float8 * interval '1 second'
                       THEN excluded.crashes ELSE q.crashes + excluded.crashes END,
        window_started_at = CASE WHEN q.quarantined_at IS NULL
                                  AND q.window_started_at < now() - $2::float8 * interval '1 second'
                                 THEN now() ELSE q.window_started_at END,
        last_crash_at = now(),
        last_job_id = excluded.last_job_id,
        last_worker_id = excluded.last_worker_id,
        quarantined_at = coalesce(q.quarantined_at, CASE
            WHEN q.window_started_at >= now() - $2::float8 * interval '1 second'
             AND q.crashes + excluded.crashes >= $3::integer THEN now() END),
        reason = coalesce(q.reason, CASE
            WHEN q.window_started_at >= now() - $2::float8 * interval '1 second'
             AND q.crashes + excluded.crashes >= $3::integer
            THEN format('%s worker crashes within %s s', q.crashes + excluded.crashes,
                        $2::float8) END)
    RETURNING q.fingerprint, q.kind, q.crashes, q.quarantined_at
), told AS (
    -- Workers reload what they hold when a fingerprint is quarantined.
    SELECT pg_notify('awa_control', 'quarantine:0')
    FROM (SELECT 1 FROM counted WHERE quarantined_at = now() LIMIT 1) AS newly
)
SELECT fingerprint, kind, crashes, quarantined_at = now() AS newly_quarantined,
       (SELECT count(*) FROM told) AS told
FROM counted;

-- name: quarantine_list
-- Quarantined fingerprints, most recent first, with why and the last job
-- that crashed; with $1, every fingerprint that crashed (the watch list too).
SELECT fingerprint, kind, crashes, window_started_at, last_crash_at, last_job_id,
       quarantined_at, reason
FROM awa.quarantine
WHERE $1::boolean OR quarantined_at IS NOT NULL
ORDER BY last_crash_at DESC;

-- name: quarantine_release
-- Releases a fingerprint: its crash count starts over, the jobs workers
-- held for it are due again (the scheduler makes them available), and
-- every worker is told. Returns the kind (NULL if the fingerprint was not
-- known) and how many held jobs were set due.
WITH released AS (
    DELETE FROM awa.quarantine WHERE fingerprint = $1 RETURNING kind
), resumed AS (
    UPDATE awa.jobs SET run_at = now()
    WHERE state = 'scheduled' AND run_at = 'infinity'
      AND awa.job_fingerprint(kind, args) = $1
      AND EXISTS (SELECT 1 FROM released)
    RETURNING id
), told AS (
    SELECT pg_notify('awa_control', 'quarantine:0') FROM released
)
SELECT (SELECT kind FROM released) AS kind, (SELECT count(*) FROM resumed) AS resumed,
       (SELECT count(*) FROM told) AS told;

-- name: quarantine_held
-- The fingerprints workers must hold at claim.
SELECT fingerprint FROM awa.quarantine WHERE quarantined_at IS NOT NULL;
