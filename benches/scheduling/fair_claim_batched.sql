-- An experiment, not a migration: what a fair claim would cost if it took
-- a small share from every partition lane in one statement, instead of
-- 100 jobs from one lane (migration 0027). Load it into a scratch
-- database this tree migrated, then measure with
-- benches/scheduling/fair_claim_cost.py --url <that database>
-- --variants fair8 (docs/benchmarks.md, "Fewer lanes a claim").
--
-- It replaces awa.claim_v2 with the steady-state path of one fair queue
-- only: no aging, rate class, cap, note or lowering is looked at, and a
-- move that finds its lane moved is dropped. Never load it into a database
-- that serves workers.
--
-- Each claim reads the queue's partition lanes (their newest moves, no
-- first job), least recently served first, and takes up to `share` jobs
-- from each in one statement (a LATERAL scan per lane under one LIMIT: a
-- lane after the claim is full is not read); the lanes that gave jobs
-- move in one INSERT, each to the last job it gave, and the jobs start in
-- one UPDATE.
CREATE OR REPLACE FUNCTION awa.claim_v2(claim_queues text[], claim_counts integer[],
                                        claim_worker bigint, timeout_kinds text[],
                                        kind_timeouts float8[], queue_timeouts float8[],
                                        queue_aging_s float8[] DEFAULT NULL,
                                        queue_limited boolean[] DEFAULT NULL,
                                        classes_configured boolean DEFAULT NULL,
                                        queue_fair boolean[] DEFAULT NULL)
RETURNS TABLE (id bigint, run_lease bigint, kind text, queue text, state text,
               priority smallint, attempt integer, max_attempts smallint, crashes smallint,
               max_crashes smallint, run_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz, args jsonb, tags text[],
               metadata jsonb, errors jsonb, callback_id uuid, callback_timeout_at timestamptz,
               attempt_deadline_at timestamptz, schema_version smallint, rate_class text,
               partition_key text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    wanted integer := claim_counts[1];
    lane_count integer;
    share integer;
    picked bigint[];
    lease_floor bigint := awa.run_lease_floor();
BEGIN
    WHILE clock_timestamp() <= now() LOOP
    END LOOP;
    PERFORM set_config('synchronous_commit', 'off', true), set_config('awa.claiming', 'on', true);
    SELECT count(*) INTO lane_count FROM awa.lanes AS l
    WHERE l.queue = claim_queues[1] AND l.partition_key <> '';
    share := greatest(1, ceil(wanted::numeric / greatest(lane_count, 1))::integer);
    WITH open_tx AS MATERIALIZED (
        SELECT array(SELECT t::text::bigint
                     FROM pg_snapshot_xip(pg_current_snapshot()) AS t) AS xids
    ), walk AS (
        SELECT l.id AS lane_id, l.priority AS lane_priority, l.partition_key AS lane_key,
               mv.seq, mv.hint_run_at, mv.hint_id, mv.swept_run_at, mv.swept_id, mv.gen,
               mv.clock
        FROM awa.lanes AS l
        CROSS JOIN LATERAL (SELECT * FROM awa.lane_moves AS m WHERE m.lane_id = l.id
                            ORDER BY m.seq DESC LIMIT 1) AS mv
        WHERE l.queue = claim_queues[1] AND l.partition_key <> ''
        ORDER BY l.priority, mv.made_at, l.id
    ), taken AS MATERIALIZED (
        SELECT w.*, c.id AS job_id, c.run_at AS job_run_at
        FROM walk AS w
        CROSS JOIN LATERAL (
            SELECT j.id, j.run_at FROM awa.jobs AS j
            WHERE j.queue = claim_queues[1] AND j.priority = w.lane_priority
              AND j.partition_key = w.lane_key
              AND (j.run_at, j.id) > (w.hint_run_at, w.hint_id)
              AND j.run_at <= now() AND j.state = 'available'
            ORDER BY j.run_at, j.id
            LIMIT share
            FOR UPDATE OF j SKIP LOCKED) AS c
        LIMIT wanted
    ), lanes_taken AS (
        SELECT t.lane_id, t.seq, t.hint_run_at, t.hint_id, t.swept_run_at, t.swept_id, t.gen,
               t.clock, count(*) AS got, max(t.job_run_at) AS top_run_at,
               (array_agg(t.job_id ORDER BY t.job_run_at DESC, t.job_id DESC))[1] AS top_id
        FROM taken AS t
        GROUP BY t.lane_id, t.seq, t.hint_run_at, t.hint_id, t.swept_run_at, t.swept_id,
                 t.gen, t.clock
    ), moved AS (
        INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id, swept_run_at,
                                    swept_id, gen, clock, note_xid, note_run_at, note_id)
        SELECT lt.lane_id, lt.seq,
               lt.top_run_at, lt.top_id,
               lt.swept_run_at, lt.swept_id, lt.gen, greatest(lt.clock, clock_timestamp()),
               o.xids, array_fill(lt.hint_run_at, ARRAY[cardinality(o.xids)]),
               array_fill(lt.hint_id, ARRAY[cardinality(o.xids)])
        FROM lanes_taken AS lt, open_tx AS o
        WHERE pg_try_advisory_xact_lock(1635216494, lt.lane_id)
        ON CONFLICT (lane_id, prev_seq) DO NOTHING
        RETURNING 1
    )
    SELECT array_agg(t.job_id) INTO picked
    FROM taken AS t, (SELECT count(*) FROM moved) AS m;
    RETURN QUERY
    UPDATE awa.jobs AS jobs
    SET state = 'running',
        attempt = jobs.attempt + 1,
        run_lease = greatest(jobs.run_lease, lease_floor) + 1,
        attempted_at = now(),
        worker_id = claim_worker,
        attempt_deadline_at = least(now() + coalesce(jobs.timeout_ms / 1000.0, queue_timeouts[1])
                                            * interval '1 second', jobs.deadline_at)
    WHERE jobs.id = ANY (picked)
    RETURNING jobs.id, jobs.run_lease, jobs.kind::text, jobs.queue::text,
              jobs.state::text, jobs.priority::smallint, jobs.attempt,
              jobs.max_attempts::smallint, jobs.crashes,
              jobs.max_crashes::smallint, jobs.run_at, jobs.created_at,
              jobs.attempted_at, jobs.finalized_at, jobs.args::jsonb,
              jobs.tags::text[], jobs.metadata, jobs.errors, jobs.callback_id,
              jobs.callback_timeout_at, jobs.attempt_deadline_at,
              jobs.schema_version::smallint, jobs.rate_class::text,
              jobs.partition_key::text;
END
$$;
