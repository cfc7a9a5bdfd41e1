-- name: periodic_sync
-- Upserts the schedules the leader's code registers ($1 names, $2 crons,
-- $3 zones, $4 kinds, $5 args, $6 options, $7 policies, $8 their next fire
-- times from now): a changed cron or zone starts from $8, an unchanged one
-- keeps its place; a retired one comes back. Then retires every other
-- schedule. Returns how many it retired.
WITH registered AS (
    INSERT INTO awa.periodic AS p (name, cron, timezone, kind, args, options,
                                   missed_fire_policy, next_fire_at)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[],
                         $6::jsonb[], $7::text[], $8::timestamptz[])
    ON CONFLICT (name) DO UPDATE SET
        cron = excluded.cron,
        timezone = excluded.timezone,
        kind = excluded.kind,
        args = excluded.args,
        options = excluded.options,
        missed_fire_policy = excluded.missed_fire_policy,
        next_fire_at = CASE WHEN (p.cron, p.timezone) = (excluded.cron, excluded.timezone)
                                 AND p.retired_at IS NULL
                            THEN p.next_fire_at ELSE excluded.next_fire_at END,
        retired_at = NULL,
        updated_at = now()
    WHERE (p.cron, p.timezone, p.kind, p.args, p.options, p.missed_fire_policy)
              IS DISTINCT FROM (excluded.cron, excluded.timezone, excluded.kind, excluded.args,
                                excluded.options, excluded.missed_fire_policy)
       OR p.retired_at IS NOT NULL
    RETURNING name
), retired AS (
    UPDATE awa.periodic
    SET retired_at = now(), updated_at = now()
    WHERE retired_at IS NULL AND NOT (name = ANY ($1::text[]))
    RETURNING name
)
SELECT count(*) FROM retired;

-- name: periodic_due
-- The schedules among $1 that are due now (not paused, not retired), with
-- the database's clock: every leader reads time from one place.
SELECT name, cron, timezone, missed_fire_policy, kind, args::text AS args,
       options::text AS options, next_fire_at, clock_timestamp() AS now
FROM awa.periodic
WHERE name = ANY ($1::text[]) AND NOT paused AND retired_at IS NULL
  AND next_fire_at <= clock_timestamp();

-- name: periodic_next_due
-- Seconds until the next fire time of the schedules among $1 (NULL: none).
SELECT extract(epoch FROM min(next_fire_at) - clock_timestamp())::float8
FROM awa.periodic
WHERE name = ANY ($1::text[]) AND NOT paused AND retired_at IS NULL;

-- name: periodic_advance
-- Moves schedule $1 from fire time $2 to $4, having enqueued up to $3; only
-- if no one moved it meanwhile (the compare-and-set that makes each fire
-- time enqueue once). Runs in the transaction that inserts the jobs.
UPDATE awa.periodic
SET next_fire_at = $4::timestamptz, last_fire_at = coalesce($3::timestamptz, last_fire_at),
    updated_at = now()
WHERE name = $1::text AND next_fire_at = $2::timestamptz AND NOT paused AND retired_at IS NULL
RETURNING name;

-- name: periodic_list
-- Every schedule, retired ones included, by name.
SELECT name, cron, timezone, kind, args::text AS args, options::text AS options,
       missed_fire_policy, paused, retired_at, last_fire_at, next_fire_at
FROM awa.periodic
ORDER BY name;

-- name: periodic_get
-- Schedule $1.
SELECT name, cron, timezone, kind, args::text AS args, options::text AS options,
       missed_fire_policy, paused, retired_at, last_fire_at, next_fire_at
FROM awa.periodic
WHERE name = $1::text;

-- name: periodic_set_paused
-- Pauses ($2 true) or resumes schedule $1; a resumed one fires next at $3
-- (what it would have fired while paused is not made up).
UPDATE awa.periodic
SET paused = $2::boolean,
    next_fire_at = CASE WHEN paused AND NOT $2::boolean THEN $3::timestamptz
                        ELSE next_fire_at END,
    updated_at = now()
WHERE name = $1::text
RETURNING name, cron, timezone, kind, args::text AS args, options::text AS options,
          missed_fire_policy, paused, retired_at, last_fire_at, next_fire_at;

-- name: periodic_delete
-- Removes schedule $1.
DELETE FROM awa.periodic WHERE name = $1::text RETURNING name;

-- name: periodic_now
-- The database's clock.
SELECT clock_timestamp();
