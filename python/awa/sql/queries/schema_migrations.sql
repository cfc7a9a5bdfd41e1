-- name: schema_migrations_bootstrap
-- Creates the schema and the migration ledger if they are missing.
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_migrations_lock
-- Serialises migrators across processes (session advisory lock; waits).
SELECT pg_advisory_lock($1::bigint);

-- name: schema_migrations_unlock
-- Releases the migrators' lock.
SELECT pg_advisory_unlock($1::bigint);

-- name: schema_migrations_applied
-- Versions already applied, oldest first.
SELECT version FROM awa.schema_migrations ORDER BY version;

-- name: schema_migrations_record
-- Records one applied migration.
INSERT INTO awa.schema_migrations (version, name) VALUES ($1, $2);

-- name: schema_migrations_exists
-- Whether the migration ledger exists (a database awa never touched has none).
SELECT to_regclass('awa.schema_migrations') IS NOT NULL AS present;

-- name: schema_migrations_latest
-- The newest applied version, or NULL when none is.
SELECT max(version) AS version FROM awa.schema_migrations;
