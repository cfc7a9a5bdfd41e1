-- awa.claims: the jobs each claim took, one row per claim, kept until they
-- all left `running` (migration 0014). Maintenance and the reconciler find
-- running jobs here.

-- name: claims_forget_finished
-- Deletes claims older than $1 seconds none of whose jobs is still running
-- under the claim's worker (those finished, were rescued or given back, or
-- run again under another claim); returns how many. Up to $2 claims, so a
-- pass after a long pause stays short.
WITH finished AS (
    SELECT claims.id FROM awa.claims
    WHERE claims.claimed_at < now() - $1::float8 * interval '1 second'
      AND NOT EXISTS (
          SELECT 1 FROM awa.jobs
          WHERE jobs.id = ANY (claims.job_ids) AND jobs.state = 'running'
            AND jobs.worker_id IS NOT DISTINCT FROM claims.worker_id
      )
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), forgotten AS (
    DELETE FROM awa.claims WHERE id IN (SELECT id FROM finished) RETURNING 1
)
SELECT count(*) AS forgotten FROM forgotten;
