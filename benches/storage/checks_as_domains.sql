-- An experiment, not a migration: the CHECKs of awa.jobs on columns that no
-- claim and no outcome writes become domains, checked when a value is
-- written instead of on every update of the row (docs/benchmarks.md,
-- "Where a fair claim's time goes"). Run on a database this tree migrated,
-- then compare it with an unchanged one:
--
--   psql "$URL_B" -v ON_ERROR_STOP=1 -f benches/storage/checks_as_domains.sql
--   python benches/storage/claim_cost.py --url "$URL_A" --old-url "$URL_B" \
--       --old-sql python/awa/sql/queries --batch 100 --rounds 6 --as-worker
--
-- The triggers are dropped and made again (a column a trigger names cannot
-- change type), and awa.claim_v2 returns the columns cast back to the types
-- its result declares.
BEGIN;
CREATE TEMP TABLE saved_triggers AS
SELECT tgname, pg_get_triggerdef(oid) AS def FROM pg_trigger
WHERE tgrelid = 'awa.jobs'::regclass AND NOT tgisinternal;
DO $$ DECLARE r record; BEGIN
    FOR r IN SELECT tgname FROM saved_triggers LOOP
        EXECUTE format('DROP TRIGGER %I ON awa.jobs', r.tgname);
    END LOOP;
END $$;
CREATE DOMAIN awa.job_kind AS text CHECK (char_length(VALUE) BETWEEN 1 AND 200);
CREATE DOMAIN awa.queue_name AS text CHECK (char_length(VALUE) BETWEEN 1 AND 200);
CREATE DOMAIN awa.job_args AS jsonb CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN awa.job_priority AS smallint CHECK (VALUE BETWEEN 1 AND 4);
CREATE DOMAIN awa.job_max_attempts AS smallint CHECK (VALUE BETWEEN 1 AND 1000);
CREATE DOMAIN awa.job_max_crashes AS smallint CHECK (VALUE >= 0);
CREATE DOMAIN awa.job_schema_version AS smallint CHECK (VALUE >= 1);
CREATE DOMAIN awa.job_tags AS text[] CHECK (cardinality(VALUE) <= 20);
CREATE DOMAIN awa.job_timeout_ms AS integer CHECK (VALUE > 0);
ALTER TABLE awa.jobs
    DROP CONSTRAINT jobs_kind_length, DROP CONSTRAINT jobs_queue_length,
    DROP CONSTRAINT jobs_args_object, DROP CONSTRAINT jobs_priority_range,
    DROP CONSTRAINT jobs_max_attempts_range, DROP CONSTRAINT jobs_max_crashes_range,
    DROP CONSTRAINT jobs_schema_version_positive, DROP CONSTRAINT jobs_tags_count,
    DROP CONSTRAINT jobs_timeout_positive,
    ALTER COLUMN kind TYPE awa.job_kind,
    ALTER COLUMN queue TYPE awa.queue_name,
    ALTER COLUMN args TYPE awa.job_args,
    ALTER COLUMN priority TYPE awa.job_priority,
    ALTER COLUMN max_attempts TYPE awa.job_max_attempts,
    ALTER COLUMN max_crashes TYPE awa.job_max_crashes,
    ALTER COLUMN schema_version TYPE awa.job_schema_version,
    ALTER COLUMN tags TYPE awa.job_tags,
    ALTER COLUMN timeout_ms TYPE awa.job_timeout_ms;
DO $$ DECLARE r record; BEGIN
    FOR r IN SELECT def FROM saved_triggers LOOP
        EXECUTE r.def;
    END LOOP;
END $$;
DO $$
DECLARE
    made text := pg_get_functiondef('awa.claim_v2'::regproc);
    cast_back text := replace(replace(replace(replace(replace(made,
        'RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue,',
        'RETURNING jobs.id, jobs.run_lease, jobs.kind::text, jobs.queue::text,'),
        'jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes,',
        'jobs.priority::smallint, jobs.attempt, jobs.max_attempts::smallint, jobs.crashes,'),
        'jobs.max_crashes, jobs.run_at, jobs.created_at,',
        'jobs.max_crashes::smallint, jobs.run_at, jobs.created_at,'),
        'jobs.finalized_at, jobs.args, jobs.tags,',
        'jobs.finalized_at, jobs.args::jsonb, jobs.tags::text[],'),
        'jobs.schema_version, jobs.rate_class::text',
        'jobs.schema_version::smallint, jobs.rate_class::text');
BEGIN
    IF cast_back = made THEN
        RAISE EXCEPTION 'awa.claim_v2''s RETURNING list is not the one this experiment knows';
    END IF;
    EXECUTE cast_back;
END $$;
COMMIT;
