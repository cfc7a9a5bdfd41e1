-- name: schema_migrations_bootstrap
-- Creates the schema and the migration ledger if they are missing.
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_migrations_lock
-- Serialises migrators across processes until the transaction ends (waits).
SELECT pg_advisory_xact_lock($1::bigint);

-- name: schema_migrations_lock_session
-- Direct connections only (a session lock is session state): holds the
-- migrators' lock across every migration, so one process applies them all
-- and the others, waiting, find nothing left to do.
SELECT pg_advisory_lock($1::bigint);

-- name: schema_migrations_unlock_session
-- Releases schema_migrations_lock_session.
SELECT pg_advisory_unlock($1::bigint);

-- name: schema_migrations_is_applied
-- Whether a migration version is already recorded.
SELECT EXISTS (SELECT 1 FROM awa.schema_migrations WHERE version = $1) AS applied;

-- name: schema_migrations_record
-- Records one applied migration.
INSERT INTO awa.schema_migrations (version, name) VALUES ($1, $2);

-- name: schema_migrations_exists
-- Whether the migration ledger exists (a database awa never touched has none).
SELECT to_regclass('awa.schema_migrations') IS NOT NULL AS present;

-- name: schema_migrations_applied
-- Every applied version, oldest first (the ledger must exist).
SELECT version FROM awa.schema_migrations ORDER BY version;

-- name: schema_migrations_latest
-- The newest applied version, or NULL when none is.
SELECT max(version) AS version FROM awa.schema_migrations;

-- name: schema_migrations_database
-- Which database a connection is on, for the message of a missing schema.
SELECT current_database() AS name;
