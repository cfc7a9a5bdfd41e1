-- awa schema, version 10: one shape for the jobs an insert writes.
--
-- Every statement that inserts jobs from the client (one job, many, the
-- follow-ups of outcomes) receives them as one JSON array of objects keyed
-- by this type's fields and reads them with jsonb_populate_recordset, by
-- name. A new insert option is a new field here and in the Rust core's
-- writer (rust/insert.rs), not a new positional parameter in each query.
CREATE TYPE awa.job_input AS (
    kind          text,
    queue         text,
    args          jsonb,
    priority      smallint,
    max_attempts  smallint,
    max_crashes   smallint,
    run_at        timestamptz,
    tags          text[],
    metadata      jsonb,
    unique_key    bytea,
    unique_states smallint,
    timeout_ms    integer,
    deadline_at   timestamptz
);
