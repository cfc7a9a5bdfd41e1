-- awa schema, version 6: quarantine of crash-looping fingerprints.

-- A job's fingerprint: its kind and arguments. jsonb prints keys in one
-- canonical order, so equal arguments always give the same bytes.
CREATE FUNCTION awa.job_fingerprint(kind text, args jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT substring(sha256(convert_to(kind || chr(31) || args::text, 'UTF8')) FROM 1 FOR 16) $$;

-- Worker crashes by fingerprint. Once a fingerprint crashes `threshold`
-- times within the window, it is quarantined: claims hold its jobs until
-- an operator releases it.
CREATE TABLE awa.quarantine (
    fingerprint    bytea PRIMARY KEY,
    kind           text NOT NULL,
    crashes        integer NOT NULL,
    window_started_at timestamptz NOT NULL,
    last_crash_at  timestamptz NOT NULL,
    last_job_id    bigint NOT NULL,
    quarantined_at timestamptz,
    reason         text
);

CREATE INDEX quarantine_held_idx ON awa.quarantine (fingerprint)
    WHERE quarantined_at IS NOT NULL;
