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
RETURNING queue, paused, paused_at, paused_by, updated_at;

-- name: queue_settings_get
-- The settings of queue $1 (no row: the defaults).
SELECT queue, paused, paused_at, paused_by, updated_at
FROM awa.queue_settings
WHERE queue = $1::text;

-- name: queue_settings_paused
-- Which of the queues $1 a worker serves are paused.
SELECT queue
FROM awa.queue_settings
WHERE queue = ANY ($1::text[]) AND paused;
