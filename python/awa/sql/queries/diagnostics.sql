-- Catalog reads for `awa doctor` (python/awa/doctor.py). None writes; each
-- works for an ordinary role: where a catalog view hides other roles' rows
-- (pg_stat_activity without pg_read_all_stats), the row says so.

-- name: diagnostics_server
-- Who this connection is, what it may see, and the server's autovacuum
-- switches (autovacuum needs track_counts as well).
SELECT pg_backend_pid() AS pid,
       current_user AS role,
       current_database() AS database,
       (SELECT r.rolsuper FROM pg_roles AS r WHERE r.rolname = current_user) AS superuser,
       pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS reads_all_stats,
       current_setting('autovacuum')::boolean AS autovacuum,
       current_setting('track_counts')::boolean AS track_counts;

-- name: diagnostics_tables
-- The awa tables named $1 that exist: whether autovacuum may run on each
-- (its reloptions), its live and dead tuples, and when it was last
-- vacuumed (by hand or by autovacuum) and how long ago, in seconds.
SELECT c.relname::text AS name,
       coalesce((SELECT o.option_value::boolean
                 FROM pg_options_to_table(c.reloptions) AS o
                 WHERE o.option_name = 'autovacuum_enabled'), true) AS autovacuum_enabled,
       coalesce(s.n_live_tup, 0) AS live_tuples,
       coalesce(s.n_dead_tup, 0) AS dead_tuples,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuumed_at,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8
           AS vacuumed_s_ago
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE n.nspname = 'awa' AND c.relkind = 'r' AND c.relname = ANY ($1::text[])
ORDER BY c.relname;

-- name: diagnostics_horizon_holders
-- Everything that holds this database's MVCC horizon back, oldest first:
-- sessions with a snapshot (pg_stat_activity.backend_xmin, which every
-- role sees; since when, xact_start, is hidden for other roles' sessions
-- without pg_read_all_stats: `hidden` marks those), replication slots
-- (xmin, catalog_xmin) and prepared transactions. Its age in transactions,
-- and in seconds where the catalog says since when (a slot does not). This
-- connection's own session is left out.
WITH holders AS (
    SELECT 'session' AS kind, a.pid::text AS holder, a.usename::text AS role,
           a.application_name AS application, a.state, a.backend_type,
           age(a.backend_xmin)::bigint AS age_xacts,
           extract(epoch FROM now() - a.xact_start)::float8 AS age_s,
           a.query = '<insufficient privilege>' AS hidden
    FROM pg_stat_activity AS a
    WHERE a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
      AND (a.datname = current_database() OR a.datname IS NULL)
    UNION ALL
    SELECT 'replication slot', r.slot_name::text, NULL, r.plugin::text, NULL,
           r.slot_type::text,
           greatest(age(r.xmin), age(r.catalog_xmin))::bigint, NULL, false
    FROM pg_replication_slots AS r
    WHERE (r.xmin IS NOT NULL OR r.catalog_xmin IS NOT NULL)
      AND (r.database = current_database() OR r.database IS NULL)
    UNION ALL
    SELECT 'prepared transaction', p.gid, p.owner::text, NULL, NULL, NULL,
           age(p.transaction)::bigint, extract(epoch FROM now() - p.prepared)::float8, false
    FROM pg_prepared_xacts AS p
    WHERE p.database = current_database()
)
SELECT kind, holder, role, application, state, backend_type, age_xacts, age_s, hidden
FROM holders
ORDER BY age_xacts DESC NULLS LAST, age_s DESC NULLS LAST;

-- name: diagnostics_transactions
-- This database's client sessions in a transaction, longest first, but
-- this connection's: how long the transaction has run and, for one idle in
-- it, how long it has been idle (seconds). Other roles' sessions are
-- hidden without pg_read_all_stats (`hidden`: whether they are in one is
-- unknown).
SELECT a.pid, a.usename::text AS role, a.application_name AS application, a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS transaction_s,
       CASE WHEN a.state LIKE 'idle in transaction%'
            THEN extract(epoch FROM now() - a.state_change)::float8 END AS idle_s,
       a.query = '<insufficient privilege>' AS hidden
FROM pg_stat_activity AS a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND (a.backend_type = 'client backend' AND a.xact_start IS NOT NULL
       OR a.query = '<insufficient privilege>')
ORDER BY a.xact_start NULLS LAST;

-- name: diagnostics_notify
-- Sends $2 on channel $1: the other half of the LISTEN round trip.
SELECT pg_notify($1::text, $2::text);

-- name: diagnostics_session_mark
-- Sets a session setting (it outlives the transaction on a session of its
-- own, not behind a pooler in transaction mode) and says which backend
-- this is.
SELECT pg_backend_pid() AS pid, set_config('awa.doctor_probe', $1::text, false) AS mark;

-- name: diagnostics_session_read
-- Which backend this is and what the session setting of
-- diagnostics_session_mark holds here ('' where unset).
SELECT pg_backend_pid() AS pid, coalesce(current_setting('awa.doctor_probe', true), '') AS mark;

-- name: diagnostics_clock
-- The server's clock as this statement runs (not the transaction's now()).
SELECT clock_timestamp() AS server_time;

-- name: diagnostics_server_address
-- The port the server itself listens on (NULL over a Unix socket): another
-- port than the one connected to means something sits in between.
SELECT inet_server_port() AS port;
