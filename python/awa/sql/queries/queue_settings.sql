-- name: queue_settings_set_paused
-- Pauses ($2 true, by $3) or resumes ($2 false) queue $1 for every worker,
-- and tells them at once on awa_control; returns the queue's settings.
-- Pausing a paused queue keeps when it was first paused and takes the new
-- $3 if one is given.
WITH told AS (
    SELECT pg_notify('awa_control', 'queues:' || $1::text)
)
INSERT INTO awa.queue_settings AS s (queue, paused, paused_at, paused_by, updated_at)
SELECT $1::text, $2::boolean, CASE WHEN $2::boolean THEN now() END,
       CASE WHEN $2::boolean THEN $3::text END, now()
FROM told
ON CONFLICT (queue) DO UPDATE SET
    paused = excluded.paused,
    paused_at = CASE WHEN excluded.paused THEN coalesce(s.paused_at, now()) END,
    paused_by = CASE WHEN excluded.paused THEN coalesce(excluded.paused_by, s.paused_by) END,
    updated_at = now()
RETURNING queue, paused, paused_at, paused_by, updated_at, priority_aging_s,
          global_max_running, rate_per_s, rate_burst, fair, max_workers_per_partition;

-- name: queue_settings_get
-- The settings of queue $1 (no row: the defaults).
SELECT queue, paused, paused_at, paused_by, updated_at, priority_aging_s,
       global_max_running, rate_per_s, rate_burst, fair, max_workers_per_partition
FROM awa.queue_settings
WHERE queue = $1::text;

-- name: queue_settings_summaries
-- Every queue that has jobs or settings: its settings (the defaults where
-- it has none) and how many of its jobs wait in each unfinished state,
-- with the oldest due job's run_at. Reads the whole jobs table once (no
-- index of it may name the state: claims and outcomes write it, and their
-- updates stay HOT): 0.18 s for a million jobs here (benches/operator).
WITH counts AS (
    SELECT j.queue::text AS queue,
           count(*) FILTER (WHERE j.state = 'available' AND j.run_at <= now()) AS due,
           count(*) FILTER (WHERE j.state = 'running') AS running,
           count(*) FILTER (WHERE j.state IN ('scheduled', 'retryable')
                               OR (j.state = 'available' AND j.run_at > now())) AS later,
           count(*) FILTER (WHERE j.state = 'waiting_external') AS waiting_external,
           count(*) FILTER (WHERE j.state = 'failed') AS failed,
           min(j.run_at) FILTER (WHERE j.state = 'available' AND j.run_at <= now())
               AS oldest_due_at
    FROM awa.jobs AS j
    GROUP BY j.queue
)
SELECT coalesce(c.queue, s.queue) AS queue, coalesce(s.paused, false) AS paused, s.paused_at,
       s.paused_by, s.updated_at, s.priority_aging_s, s.global_max_running, s.rate_per_s,
       s.rate_burst, coalesce(s.fair, false) AS fair, s.max_workers_per_partition,
       coalesce(c.due, 0) AS due, coalesce(c.running, 0) AS running,
       coalesce(c.later, 0) AS later, coalesce(c.waiting_external, 0) AS waiting_external,
       coalesce(c.failed, 0) AS failed, c.oldest_due_at
FROM counts AS c
FULL JOIN awa.queue_settings AS s ON s.queue = c.queue
ORDER BY 1;

-- name: queue_settings_configure
-- Sets the flow-control settings of queue $1 that are marked to set ($2
-- the aging interval $3, $4 the ceiling $5, $6 the rate limit $7 per
-- second with burst $8, $9 fairness $10, $11 the cap per partition $12;
-- NULL removes one), keeps the others, and tells every worker on
-- awa_control; returns the queue's settings. A rate limit set again keeps
-- the tokens its bucket holds (up to the new burst).
WITH told AS (
    SELECT pg_notify('awa_control', 'queues:' || $1::text)
)
INSERT INTO awa.queue_settings AS s (queue, priority_aging_s, global_max_running, rate_per_s,
                                     rate_burst, fair, max_workers_per_partition, updated_at)
SELECT $1::text, $3::float8, $5::integer, $7::float8, $8::integer,
       coalesce($10::boolean, false), $12::integer, now()
FROM told
ON CONFLICT (queue) DO UPDATE SET
    fair = CASE WHEN $9::boolean THEN excluded.fair ELSE s.fair END,
    max_workers_per_partition = CASE WHEN $11::boolean THEN excluded.max_workers_per_partition
                                     ELSE s.max_workers_per_partition END,
    priority_aging_s = CASE WHEN $2::boolean THEN excluded.priority_aging_s
                            ELSE s.priority_aging_s END,
    global_max_running = CASE WHEN $4::boolean THEN excluded.global_max_running
                              ELSE s.global_max_running END,
    rate_per_s = CASE WHEN $6::boolean THEN excluded.rate_per_s ELSE s.rate_per_s END,
    rate_burst = CASE WHEN $6::boolean THEN excluded.rate_burst ELSE s.rate_burst END,
    rate_tokens = CASE WHEN $6::boolean AND excluded.rate_per_s IS NULL THEN NULL
                       ELSE s.rate_tokens END,
    rate_tokens_at = CASE WHEN $6::boolean AND excluded.rate_per_s IS NULL THEN NULL
                          ELSE s.rate_tokens_at END,
    updated_at = now()
RETURNING queue, paused, paused_at, paused_by, updated_at, priority_aging_s,
          global_max_running, rate_per_s, rate_burst, fair, max_workers_per_partition;

-- name: queue_settings_served
-- The settings of the queues $1 a worker serves that have any. (A cap per
-- partition is a limit: the claim reads it with the others, and claims a
-- capped queue partition by partition, as a fair one.)
SELECT queue, paused, priority_aging_s,
       global_max_running IS NOT NULL OR rate_per_s IS NOT NULL
           OR max_workers_per_partition IS NOT NULL AS limited,
       fair
FROM awa.queue_settings
WHERE queue = ANY ($1::text[]);

-- name: queue_settings_rate_classes_configured
-- Whether any rate class is configured (a worker whose queues have no
-- settings row reads it here).
SELECT EXISTS (SELECT FROM awa.rate_classes) AS configured;
