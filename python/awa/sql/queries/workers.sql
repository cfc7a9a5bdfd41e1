-- name: workers_register
-- Records a new worker process; its id marks the jobs it claims.
INSERT INTO awa.workers (hostname, pid, queues) VALUES ($1, $2, $3::text[])
RETURNING id;

-- name: workers_heartbeat
-- Keeps a worker's claims alive; returns nothing if the row was removed.
UPDATE awa.workers SET heartbeat_at = now() WHERE id = $1 RETURNING id;

-- name: workers_reregister
-- Puts back a worker row the rescuer removed (the worker was only slow).
INSERT INTO awa.workers (id, hostname, pid, queues) VALUES ($1, $2, $3, $4::text[])
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now();

-- name: workers_deregister
-- Removes a worker that shut down.
DELETE FROM awa.workers WHERE id = $1;

-- name: workers_delete_stale
-- Removes workers silent for $1 seconds that hold no running job any more
-- (by their claims, awa.claims).
DELETE FROM awa.workers AS workers
WHERE heartbeat_at <= now() - $1::float8 * interval '1 second'
  AND NOT EXISTS (
      SELECT 1 FROM awa.claims
      JOIN awa.jobs ON jobs.id = ANY (claims.job_ids)
      WHERE claims.worker_id = workers.id
        AND jobs.state = 'running' AND jobs.worker_id = workers.id
  );

-- name: workers_server
-- Where a worker is connected, for its start-up line (through a pooler: the
-- server behind it).
SELECT current_database() AS database,
       coalesce(host(inet_server_addr()), 'local socket') AS host,
       inet_server_port() AS port,
       current_user AS role;

-- name: workers_list
-- Every registered worker process, oldest first, and whether it beat within
-- the last $1 seconds (for health checks and operators).
SELECT id, hostname, pid, queues, started_at, heartbeat_at,
       heartbeat_at > now() - $1::float8 * interval '1 second' AS alive
FROM awa.workers
ORDER BY id;
