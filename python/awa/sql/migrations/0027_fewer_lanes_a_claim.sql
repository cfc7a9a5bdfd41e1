-- awa schema, version 27: a fair claim visits fewer lanes, and a claim
-- stops reading its lanes once it is full.
--
-- - Each partition a fair claim visits gives at least 100 jobs (it was
--   50): a claim of 100, the worker's default, takes one partition's jobs
--   and the next claim the next partition's, instead of two partitions'
--   with a scan, a move and pages of their own each.
-- - A claim that is full leaves the loop over its lanes (it stepped
--   through every lane left, for the one kind of move it still made: the
--   idle lane of a fair queue's jobs without a key, now read first).
-- - The jobs a lane gives that are all of one rate class are spent in one
--   step once that class is read, not a job at a time when it is the
--   claim's first sight of the class.
--
-- Nothing else changes: the same jobs are claimable in the same order of
-- priority, level and partition; no table or index is touched.

CREATE OR REPLACE FUNCTION awa.claim_v2(claim_queues text[], claim_counts integer[], claim_worker bigint,
                             timeout_kinds text[], kind_timeouts float8[],
                             queue_timeouts float8[], queue_aging_s float8[] DEFAULT NULL,
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
-- One plan per statement, made once per session: planning each statement
-- again for every claim (the choice plpgsql makes by itself here) was a
-- fifth of a claim's server time. With the other two settings the
-- worker's claiming session has (jobs_claim_prepare_session, where the old
-- one-statement claim needed them): no sequential scan, since every table
-- this reads has an index for its access, and no JIT. A worker behind a
-- pooler cannot set up its session; its claims now plan the same way.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    me bigint;
    open_xids bigint[];
    remaining integer[] := claim_counts;
    q integer;
    pass integer;
    lanes_seen boolean;
    lane record;
    asked integer;
    lowering_ids bigint[];
    lowest_run_at timestamptz;
    ended_run_at timestamptz;
    ended_id bigint;
    from_run_at timestamptz;
    from_id bigint;
    rescan boolean;
    picked bigint[];
    top_run_at timestamptz;
    got integer;
    next_run_at timestamptz;
    next_id bigint;
    lease_floor bigint := awa.run_lease_floor();
    lowers boolean;
    moved boolean;
    newest awa.lane_moves;
    i integer;
    open_xid bigint;
    kept_xid bigint[];
    kept_run_at timestamptz[];
    kept_id bigint[];
    aging_s float8[];
    limited boolean;
    queue_aging float8;
    aging_round integer;
    visited boolean;
    cutoff timestamptz;
    limits record;
    queue_has_limit boolean;
    holders bigint[];
    taken bigint[];
    tokens float8;
    tokens_at timestamptz;
    classes_exist boolean;
    picked_run_at timestamptz[];
    picked_class text[];
    allowed integer;
    class_idx integer;
    class_allowed integer;
    class_row record;
    class_names text[] := '{}';
    class_tokens float8[] := '{}';
    class_rates float8[] := '{}';
    class_locked boolean[] := '{}';
    class_at timestamptz[] := '{}';
    class_cut boolean;
    one_class boolean;
    look_again_at timestamptz;
    opened boolean;
    fair_flags boolean[];
    fair boolean;
    leveled boolean;
    level_visited integer;
    round_took integer;
    queue_picked bigint[];
    part_cap integer;
    part_room integer;
    part_held boolean;
    slot_keys text[];
    slot_ids bigint[];
BEGIN
    -- now() strictly before every clock read after this transaction's id
    -- exists: a transaction with a newer id keys its jobs after every job
    -- this claim can take (run_at <= now()).
    WHILE clock_timestamp() <= now() LOOP
    END LOOP;
    -- The queues' fleet-wide settings (awa.queue_settings), in claim_queues'
    -- order: each one's aging interval, whether any has a ceiling or a rate
    -- limit, and whether any rate class is configured; read here unless the
    -- caller says them.
    IF queue_aging_s IS NULL OR queue_limited IS NULL OR classes_configured IS NULL
       OR queue_fair IS NULL THEN
        SELECT array_agg(s.priority_aging_s ORDER BY cq.ord),
               coalesce(bool_or(s.global_max_running IS NOT NULL
                                OR s.rate_per_s IS NOT NULL
                                OR s.max_workers_per_partition IS NOT NULL), false),
               EXISTS (SELECT FROM awa.rate_classes),
               array_agg(coalesce(s.fair, false) ORDER BY cq.ord)
        INTO aging_s, limited, classes_exist, fair_flags
        FROM unnest(claim_queues) WITH ORDINALITY AS cq(queue, ord)
        LEFT JOIN awa.queue_settings AS s ON s.queue = cq.queue;
    ELSE
        -- As the worker last read them (at most a poll interval old, and
        -- reread at once when a change is announced): a statement less
        -- per claim.
        aging_s := queue_aging_s;
        limited := true = ANY (queue_limited);
        classes_exist := classes_configured;
        fair_flags := queue_fair;
    END IF;
    IF limited THEN
        -- A ceiling, a rate limit or a cap per partition holds for every
        -- claimer of the fleet at once: their claims of the queue take turns
        -- on its settings row, locked here until the claim commits, in the
        -- queues' name order (two claims of the same queues never wait on
        -- each other's rows).
        PERFORM FROM awa.queue_settings AS s
        WHERE s.queue = ANY (claim_queues)
          AND (s.global_max_running IS NOT NULL OR s.rate_per_s IS NOT NULL
               OR s.max_workers_per_partition IS NOT NULL)
        ORDER BY s.queue
        FOR UPDATE;
    END IF;
    FOR q IN 1 .. coalesce(cardinality(claim_queues), 0) LOOP
        CONTINUE WHEN remaining[q] <= 0;
        queue_has_limit := false;
        look_again_at := NULL;
        part_cap := NULL;
        part_held := false;
        IF limited THEN
            SELECT s.global_max_running, s.running_ids, s.rate_per_s, s.rate_burst,
                   s.rate_tokens, s.rate_tokens_at, s.max_workers_per_partition,
                   s.partition_running_keys, s.partition_running_ids
            INTO limits
            FROM awa.queue_settings AS s
            WHERE s.queue = claim_queues[q]
              AND (s.global_max_running IS NOT NULL OR s.rate_per_s IS NOT NULL
                   OR s.max_workers_per_partition IS NOT NULL);
            queue_has_limit := FOUND;
            IF queue_has_limit THEN
                holders := '{}';
                IF limits.global_max_running IS NOT NULL THEN
                    -- The slots are the queue's jobs this ceiling let start
                    -- that still run (an outcome, a release or a rescue frees
                    -- one without writing here).
                    SELECT coalesce(array_agg(j.id), '{}') INTO holders
                    FROM awa.jobs AS j
                    WHERE j.id = ANY (limits.running_ids) AND j.state = 'running';
                    remaining[q] := least(remaining[q],
                                          greatest(limits.global_max_running
                                                   - cardinality(holders), 0));
                END IF;
                part_cap := limits.max_workers_per_partition;
                IF part_cap IS NOT NULL THEN
                    -- Each partition's slots: its jobs this cap let start
                    -- that still run, as (partition key, job id) pairs.
                    SELECT coalesce(array_agg(r.k ORDER BY r.ord), '{}'),
                           coalesce(array_agg(r.id ORDER BY r.ord), '{}')
                    INTO slot_keys, slot_ids
                    FROM unnest(limits.partition_running_keys, limits.partition_running_ids)
                         WITH ORDINALITY AS r(k, id, ord)
                    WHERE EXISTS (SELECT FROM awa.jobs AS j
                                  WHERE j.id = r.id AND j.state = 'running');
                END IF;
                tokens := NULL;
                tokens_at := clock_timestamp();
                IF limits.rate_per_s IS NOT NULL THEN
                    -- A token bucket: rate_per_s tokens a second, at most
                    -- rate_burst kept; a job claimed spends one.
                    tokens := least(limits.rate_burst::float8,
                                    coalesce(limits.rate_tokens, limits.rate_burst::float8)
                                    + limits.rate_per_s * greatest(0, extract(epoch FROM
                                          tokens_at - coalesce(limits.rate_tokens_at, tokens_at))));
                    remaining[q] := least(remaining[q], floor(tokens)::integer);
                END IF;
                taken := '{}';
                allowed := remaining[q];
            END IF;
        END IF;
        queue_aging := aging_s[q];
        -- A fair queue is claimed from its partition lanes, level by level
        -- as with aging: at each level, the lanes least recently served
        -- first, each giving its share of what is left of the claim.
        -- (A cap per partition counts each partition's jobs: its claims
        -- go partition by partition too.)
        fair := coalesce(fair_flags[q], false) OR part_cap IS NOT NULL;
        leveled := queue_aging IS NOT NULL OR fair;
        opened := false;
        -- The jobs taken from the queue's lanes, started together once its
        -- lanes are read: one UPDATE a queue, however many lanes gave.
        queue_picked := '{}';
        FOR pass IN 1 .. 2 LOOP
            lanes_seen := false;
            -- With priority aging, a claim goes level by level: each round
            -- takes, from every lane whose first job is at the most urgent
            -- level left, the jobs at that level (aged enough), oldest lane
            -- first; the next round reads the lanes again. Without aging,
            -- one round takes the lanes in priority order.
            FOR aging_round IN 1 .. CASE WHEN NOT leveled THEN 1 WHEN fair THEN 8 ELSE 4 END LOOP
                visited := false;
                level_visited := 0;
                round_took := 0;
                -- The queue's lanes in priority order (with aging: by the level
                -- of their first job, then its age), each with its newest
                -- move, whether it has lowerings, and its first available job
                -- after its hint. With them, this transaction's id and every
                -- older one still in progress (the statement's snapshot was
                -- taken before the id: those from its xmax on are in progress
                -- too, and not listed in its xip); and the transaction commits
                -- without waiting for the WAL flush (see awa/worker/producer.py),
                -- and is a claim, which records its jobs itself (jobs_claim;
                -- awa.follow_job_v1 leaves them).
                FOR lane IN
                    WITH tx AS MATERIALIZED (
                        SELECT x.me, array(SELECT s.x FROM (
                                   SELECT t::text::bigint AS x
                                   FROM pg_snapshot_xip(pg_current_snapshot()) AS t
                                   UNION ALL
                                   SELECT generate_series(
                                       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                                       x.me - 1)) AS s
                               WHERE s.x < x.me) AS open_xids
                        FROM (SELECT pg_current_xact_id()::text::bigint AS me,
                                     set_config('synchronous_commit', 'off', true) AS quick,
                                     set_config('awa.claiming', 'on', true) AS claiming) AS x
                    -- Materialized: the later steps read each lane's head
                    -- several times, and inlined, each read was a scan of its own.
                    ), heads AS MATERIALIZED (
                    SELECT tx.me, tx.open_xids, lanes.id, lanes.queue, lanes.priority,
                           lanes.partition_key, mv.made_at AS served_at, mv.seq,
                           -- its partition runs as many jobs as its cap lets it
                           (part_cap IS NOT NULL AND coalesce(lanes.partition_key, '') <> ''
                            AND coalesce(cardinality(array_positions(slot_keys,
                                    lanes.partition_key::text)), 0) >= part_cap) AS capped,
                           mv.hint_run_at, mv.hint_id, mv.swept_run_at, mv.swept_id, mv.gen, mv.clock,
                           mv.note_xid, mv.note_run_at, mv.note_id,
                           EXISTS (SELECT FROM awa.lane_lowerings AS l WHERE l.lane_id = lanes.id)
                               AS has_lowerings,
                           -- In the lane index's order: as an EXISTS, the planner
                           -- took a table with many jobs of the queue for one where
                           -- any row would do, and read the whole table for each
                           -- empty lane.
                           CASE WHEN lanes.partition_key IS NULL THEN
                               (SELECT j.run_at FROM awa.jobs AS j
                                WHERE j.queue = lanes.queue AND j.priority = lanes.priority
                                  AND (j.run_at, j.id) > (mv.hint_run_at, mv.hint_id)
                                  AND j.run_at <= now() AND j.state = 'available'
                                  AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                ORDER BY j.run_at, j.id
                                LIMIT 1)
                           WHEN lanes.partition_key = '' THEN
                               -- the jobs without a key, in the whole lane's
                               -- index (its last column skips the others
                               -- without reading them)
                               (SELECT j.run_at FROM awa.jobs AS j
                                WHERE j.queue = lanes.queue AND j.priority = lanes.priority
                                  AND j.partition_key IS NULL
                                  AND (j.run_at, j.id) > (mv.hint_run_at, mv.hint_id)
                                  AND j.run_at <= now() AND j.state = 'available'
                                  AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                ORDER BY j.run_at, j.id
                                LIMIT 1)
                           ELSE
                               (SELECT j.run_at FROM awa.jobs AS j
                                WHERE j.queue = lanes.queue AND j.priority = lanes.priority
                                  AND j.partition_key = lanes.partition_key
                                  AND (j.run_at, j.id) > (mv.hint_run_at, mv.hint_id)
                                  AND j.run_at <= now() AND j.state = 'available'
                                  AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                ORDER BY j.run_at, j.id
                                LIMIT 1)
                           END AS head_run_at
                    FROM tx, awa.lanes
                    CROSS JOIN LATERAL (SELECT * FROM awa.lane_moves
                                        WHERE lane_moves.lane_id = lanes.id
                                        ORDER BY lane_moves.seq DESC LIMIT 1) AS mv
                    -- A fair queue's partition lanes, or its whole lanes.
                    WHERE lanes.queue = claim_queues[q]
                      AND (lanes.partition_key IS NOT NULL) = fair
                    ), levels AS (
                    -- A waiting job counts one level more urgent per aging
                    -- interval it has been due, down to 1.
                    SELECT h.*,
                           CASE WHEN NOT leveled THEN h.priority::integer
                                -- no level: a capped partition's jobs wait,
                                -- and the other partitions' are served
                                WHEN h.head_run_at IS NULL OR h.capped THEN NULL
                                WHEN queue_aging IS NULL THEN h.priority::integer
                                ELSE greatest(1, h.priority - floor(extract(epoch FROM
                                         now() - h.head_run_at) / queue_aging))::integer
                           END AS head_level
                    FROM heads AS h
                    ), ranked AS (
                    SELECT v.*, v.head_run_at IS NOT NULL AS has_jobs,
                           min(v.head_level) OVER () AS level
                    FROM levels AS v
                    )
                    -- level_lanes: how many lanes have jobs at the level.
                    -- idle_move: a fair queue's lane of the jobs without a
                    -- key, idle with a hint 100 ms old, moves even once the
                    -- claim is full (its keyed lanes fill it first, and this
                    -- lane's reads step over every keyed job after its
                    -- hint); such lanes come first, so a full claim stops
                    -- at the first lane after them.
                    SELECT r.*, count(*) FILTER (WHERE r.head_level = r.level) OVER ()
                                AS level_lanes,
                           (r.partition_key IS NOT DISTINCT FROM '' AND NOT r.has_jobs
                            AND NOT r.has_lowerings AND coalesce(cardinality(r.note_xid), 0) = 0
                            AND r.hint_run_at < now() - interval '100 milliseconds') AS idle_move
                    FROM ranked AS r
                    ORDER BY idle_move DESC,
                             CASE WHEN NOT leveled THEN r.priority END,
                             r.head_level,
                             -- fair: the lane served least recently first
                             CASE WHEN fair THEN r.served_at END, CASE WHEN fair THEN r.id END,
                             r.head_run_at, r.priority
                LOOP
                    lanes_seen := true;
                    me := lane.me;
                    open_xids := lane.open_xids;
                    part_room := NULL;
                    IF part_cap IS NOT NULL AND coalesce(lane.partition_key, '') <> '' THEN
                        part_room := part_cap - coalesce(cardinality(array_positions(
                                         slot_keys, lane.partition_key::text)), 0);
                        IF part_room <= 0 THEN
                            -- Its partition runs as many jobs as the cap lets
                            -- it: neither read nor moved, so its jobs wait
                            -- where they are.
                            part_held := part_held OR lane.has_jobs;
                            CONTINUE;
                        END IF;
                    END IF;
                    asked := remaining[q];
                    -- The claim is full: no lane after this one moves.
                    EXIT WHEN asked <= 0 AND NOT lane.idle_move;
                    cutoff := 'infinity';
                    IF leveled THEN
                        IF lane.head_level = lane.level THEN
                            visited := true;
                            IF fair THEN
                                -- Its share: what is left, split evenly over
                                -- the lanes at this level not yet visited, but
                                -- at least 100 jobs (each lane a claim visits
                                -- costs it a scan, a move and the start of its
                                -- jobs on pages of their own: a claim of 100,
                                -- the worker's default, serves one partition,
                                -- the next claim the next one; with at least 50
                                -- it served 2, and a claim of 100 across 8
                                -- tenants cost 6-8 % more server time; with 25
                                -- it served 4 and cost 10 % more again).
                                asked := least(asked, greatest(100, ceil(asked::numeric
                                    / greatest(lane.level_lanes - level_visited, 1))::integer));
                                level_visited := level_visited + 1;
                            END IF;
                            IF queue_aging IS NOT NULL AND lane.priority > lane.level THEN
                                -- Only the jobs aged to this level, this round.
                                cutoff := now() - (lane.priority - lane.level) * queue_aging
                                                  * interval '1 second';
                            END IF;
                        ELSIF aging_round > 1 OR lane.has_jobs THEN
                            -- Its jobs are at a later level (a later round), or
                            -- it was looked at in the first.
                            CONTINUE;
                        END IF;
                    END IF;
                    IF part_room IS NOT NULL THEN
                        -- No more than its partition has slots for.
                        asked := least(asked, part_room);
                    END IF;
                    -- An idle keyed partition lane with nothing to rescan: no
                    -- move (see below), so nothing more to work out.
                    CONTINUE WHEN coalesce(lane.partition_key, '') <> '' AND NOT lane.has_jobs
                                  AND NOT lane.has_lowerings
                                  AND coalesce(cardinality(lane.note_xid), 0) = 0;
                    -- From the hint, or from further back: a noted transaction that
                    -- ended, or a job made claimable behind the hint.
                    from_run_at := lane.hint_run_at;
                    from_id := lane.hint_id;
                    ended_run_at := NULL;
                    IF cardinality(lane.note_xid) > 0 THEN
                        SELECT n.f, n.fi INTO ended_run_at, ended_id
                        FROM unnest(lane.note_xid, lane.note_run_at, lane.note_id) AS n(x, f, fi)
                        WHERE n.x < me AND n.x <> ALL (open_xids)
                        ORDER BY n.f, n.fi LIMIT 1;
                        IF (ended_run_at, ended_id) < (from_run_at, from_id) THEN
                            from_run_at := ended_run_at;
                            from_id := ended_id;
                        END IF;
                    END IF;
                    lowering_ids := NULL;
                    IF lane.has_lowerings THEN
                        SELECT array_agg(l.id), min(l.run_at) INTO lowering_ids, lowest_run_at
                        FROM awa.lane_lowerings AS l WHERE l.lane_id = lane.id;
                        IF (lowest_run_at, 0::bigint) < (from_run_at, from_id) THEN
                            from_run_at := lowest_run_at;
                            from_id := 0;
                        END IF;
                    END IF;
                    rescan := ended_run_at IS NOT NULL OR lowering_ids IS NOT NULL;
                    -- An idle whole lane moves at most once a second, so its
                    -- next claims read the index from a second ago at most;
                    -- the lane of the jobs without a key at most ten times a
                    -- second, since its reads step over every keyed job of
                    -- the queue and priority after its hint (a fair queue's
                    -- jobs mostly have a key). An idle keyed partition lane
                    -- moves only to rescan (a fair queue may have many;
                    -- their hints stay just past their last jobs).
                    CONTINUE WHEN NOT (lane.has_jobs OR rescan
                                       OR (lane.partition_key IS NULL
                                           AND lane.hint_run_at < now() - interval '1 second')
                                       OR (lane.partition_key IS NOT DISTINCT FROM ''
                                           AND lane.hint_run_at
                                               < now() - interval '100 milliseconds'));
                    got := 0;
                    IF lane.has_jobs OR rescan THEN
                        -- In key order (array_agg keeps the subquery's): the last
                        -- id is the top job's, and the latest run_at its.
                        IF lane.partition_key IS NULL THEN
                            SELECT coalesce(array_agg(c.id), '{}'), max(c.run_at),
                                   array_agg(c.run_at), array_agg(c.rate_class::text)
                            INTO picked, top_run_at, picked_run_at, picked_class
                            FROM (SELECT j.id, j.run_at, j.rate_class FROM awa.jobs AS j
                                  WHERE j.queue = lane.queue AND j.priority = lane.priority
                                    AND (j.run_at, j.id) > (from_run_at, from_id)
                                    -- up to the hint when it is past now() (a claim
                                    -- with a later start moved it): a noted
                                    -- transaction may have keyed jobs in between, due
                                    -- since, which this claim is the one to cover
                                    AND j.run_at <= least(greatest(now(), lane.hint_run_at), cutoff)
                                    AND j.state = 'available'
                                    -- maintenance fails jobs past their deadline
                                    AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                    -- taken by this claim already (from a lane
                                    -- it could not move), not started yet
                                    AND j.id <> ALL (queue_picked)
                                  ORDER BY j.run_at, j.id
                                  LIMIT asked
                                  FOR UPDATE OF j SKIP LOCKED) AS c;
                        ELSIF lane.partition_key = '' THEN
                            -- The same for the jobs without a key.
                            SELECT coalesce(array_agg(c.id), '{}'), max(c.run_at),
                                   array_agg(c.run_at), array_agg(c.rate_class::text)
                            INTO picked, top_run_at, picked_run_at, picked_class
                            FROM (SELECT j.id, j.run_at, j.rate_class FROM awa.jobs AS j
                                  WHERE j.queue = lane.queue AND j.priority = lane.priority
                                    AND j.partition_key IS NULL
                                    AND (j.run_at, j.id) > (from_run_at, from_id)
                                    AND j.run_at <= least(greatest(now(), lane.hint_run_at),
                                                          cutoff)
                                    AND j.state = 'available'
                                    AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                    AND j.id <> ALL (queue_picked)
                                  ORDER BY j.run_at, j.id
                                  LIMIT asked
                                  FOR UPDATE OF j SKIP LOCKED) AS c;
                        ELSE
                            -- The same within one partition.
                            SELECT coalesce(array_agg(c.id), '{}'), max(c.run_at),
                                   array_agg(c.run_at), array_agg(c.rate_class::text)
                            INTO picked, top_run_at, picked_run_at, picked_class
                            FROM (SELECT j.id, j.run_at, j.rate_class FROM awa.jobs AS j
                                  WHERE j.queue = lane.queue AND j.priority = lane.priority
                                    AND j.partition_key = lane.partition_key
                                    AND (j.run_at, j.id) > (from_run_at, from_id)
                                    AND j.run_at <= least(greatest(now(), lane.hint_run_at),
                                                          cutoff)
                                    AND j.state = 'available'
                                    AND (j.deadline_at IS NULL OR j.deadline_at > now())
                                    AND j.id <> ALL (queue_picked)
                                  ORDER BY j.run_at, j.id
                                  LIMIT asked
                                  FOR UPDATE OF j SKIP LOCKED) AS c;
                        END IF;
                        got := cardinality(picked);
                        round_took := round_took + got;
                    END IF;
                    class_cut := false;
                    IF got > 0 AND classes_exist
                       AND cardinality(array_positions(picked_class, NULL)) < got THEN
                        -- Rate classes: the jobs taken, in key order, up to
                        -- the first whose class has no whole token left (or
                        -- is held by another claim: never wait for it).
                        class_allowed := got;
                        one_class := cardinality(array_positions(picked_class, picked_class[1])) = got;
                        FOR i IN 1 .. got LOOP
                            CONTINUE WHEN picked_class[i] IS NULL;
                            class_idx := array_position(class_names, picked_class[i]);
                            IF class_idx IS NULL THEN
                                SELECT rc.rate_per_s, rc.burst, rc.tokens, rc.tokens_at
                                INTO class_row
                                FROM awa.rate_classes AS rc WHERE rc.name = picked_class[i]
                                FOR UPDATE SKIP LOCKED;
                                class_names := class_names || picked_class[i];
                                class_at := class_at || clock_timestamp();
                                class_locked := class_locked || FOUND;
                                IF FOUND THEN
                                    class_rates := class_rates || class_row.rate_per_s;
                                    class_tokens := class_tokens || least(class_row.burst::float8,
                                        coalesce(class_row.tokens, class_row.burst::float8)
                                        + class_row.rate_per_s * greatest(0, extract(epoch FROM
                                              clock_timestamp()
                                              - coalesce(class_row.tokens_at, clock_timestamp()))));
                                ELSIF EXISTS (SELECT FROM awa.rate_classes AS rc
                                              WHERE rc.name = picked_class[i]) THEN
                                    -- Another claim spends it now.
                                    class_rates := class_rates || NULL::float8;
                                    class_tokens := class_tokens || 0::float8;
                                ELSE
                                    -- Not configured: no limit.
                                    class_rates := class_rates || NULL::float8;
                                    class_tokens := class_tokens || 'infinity'::float8;
                                END IF;
                                class_idx := cardinality(class_names);
                            END IF;
                            IF one_class AND class_tokens[class_idx] >= got THEN
                                -- All of one class, with a token for each:
                                -- spent at once (not a job at a time).
                                class_tokens[class_idx] := class_tokens[class_idx] - got;
                                EXIT;
                            END IF;
                            IF class_tokens[class_idx] < 1 THEN
                                class_allowed := i - 1;
                                look_again_at := least(look_again_at, clock_timestamp()
                                    + CASE WHEN class_rates[class_idx] IS NULL THEN 0.01
                                           ELSE (1 - class_tokens[class_idx]) / class_rates[class_idx] END
                                      * interval '1 second');
                                EXIT;
                            END IF;
                            class_tokens[class_idx] := class_tokens[class_idx] - 1;
                        END LOOP;
                        IF class_allowed < got THEN
                            -- The rest stay available (their locks go at
                            -- commit); the hint moves no further than the
                            -- last job taken.
                            class_cut := true;
                            picked := picked[1:class_allowed];
                            got := class_allowed;
                            CONTINUE WHEN got = 0;
                            top_run_at := picked_run_at[got];
                        END IF;
                    END IF;
                    IF (got = asked AND got > 0) OR class_cut THEN
                        -- The last job taken; behind the hint after a rescan that
                        -- filled the claim (a lowering), or one a rate class
                        -- cut short, since more may wait there.
                        next_run_at := top_run_at;
                        next_id := picked[got];
                    ELSIF cutoff < greatest(now(), lane.hint_run_at) THEN
                        -- Everything up to the aging cutoff is claimed, or held
                        -- by a claim in flight; the lane's later jobs are at a
                        -- later level.
                        next_run_at := cutoff;
                        next_id := 9223372036854775807;
                    ELSE
                        -- Everything visible up to now() (or the hint, if later)
                        -- is claimed, or held by a claim in flight.
                        next_run_at := greatest(now(), lane.hint_run_at);
                        next_id := CASE WHEN now() > lane.hint_run_at THEN 0 ELSE lane.hint_id END;
                    END IF;
                    IF got > 0 THEN
                        remaining[q] := remaining[q] - got;
                        IF queue_has_limit THEN
                            taken := taken || picked;
                        END IF;
                        IF part_room IS NOT NULL THEN
                            slot_keys := slot_keys || array_fill(lane.partition_key::text,
                                                                 ARRAY[got]);
                            slot_ids := slot_ids || picked;
                        END IF;
                        queue_picked := queue_picked || picked;
                    END IF;
                    -- A claim that opened the lanes leaves their hints before
                    -- every job: a transaction that started after this one
                    -- and keyed jobs in the past could not lower lanes it did
                    -- not see, and is not among those this claim notes.
                    CONTINUE WHEN opened;
                    -- Move the hint, if no other mover holds the lane ('awln':
                    -- awa lanes; never wait) and within 5 s of the statement's
                    -- start. The notes read that ended go (scanned for now);
                    -- every older transaction in progress is noted with the hint
                    -- before this move.
                    CONTINUE WHEN NOT (pg_try_advisory_xact_lock(1635216494, lane.id)
                                       AND clock_timestamp() < statement_timestamp()
                                                               + interval '5 seconds');
                    lowers := (next_run_at, next_id) < (lane.hint_run_at, lane.hint_id);
                    kept_xid := '{}';
                    kept_run_at := '{}';
                    kept_id := '{}';
                    FOR i IN 1 .. coalesce(cardinality(lane.note_xid), 0) LOOP
                        CONTINUE WHEN lane.note_xid[i] < me AND lane.note_xid[i] <> ALL (open_xids);
                        kept_xid := kept_xid || lane.note_xid[i];
                        kept_run_at := kept_run_at || lane.note_run_at[i];
                        kept_id := kept_id || lane.note_id[i];
                    END LOOP;
                    FOREACH open_xid IN ARRAY open_xids LOOP
                        CONTINUE WHEN open_xid = ANY (lane.note_xid);
                        kept_xid := kept_xid || open_xid;
                        kept_run_at := kept_run_at || lane.hint_run_at;
                        kept_id := kept_id || lane.hint_id;
                    END LOOP;
                    INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id,
                                                swept_run_at, swept_id, gen, clock, note_xid,
                                                note_run_at, note_id)
                    VALUES (lane.id, lane.seq, next_run_at, next_id, lane.swept_run_at,
                            lane.swept_id, lane.gen + lowers::integer,
                            greatest(lane.clock, clock_timestamp()), kept_xid, kept_run_at, kept_id)
                    ON CONFLICT (lane_id, prev_seq) DO NOTHING;
                    moved := FOUND;
                    IF NOT moved THEN
                        -- The lane moved since this claim read it (that mover has
                        -- committed: this one holds the lock now). Build on the
                        -- newest move, with its notes but those this claim
                        -- scanned for, and this claim's, when this claim's hint
                        -- is the one to keep: it lowers (the newer moves did
                        -- not, so theirs are higher), or it is at or past the
                        -- newest's. Otherwise leave the lane alone: a hint
                        -- below the newest's adds nothing, and the notes and
                        -- lowerings this claim scanned for must stay, since its
                        -- scan stopped below the newest's hint (a noted
                        -- transaction may have keyed jobs between the two that
                        -- the newest's mover could not see).
                        SELECT * INTO newest FROM awa.lane_moves AS mv
                        WHERE mv.lane_id = lane.id ORDER BY mv.seq DESC LIMIT 1;
                        IF newest.gen = lane.gen
                           AND (lowers OR (next_run_at, next_id)
                                          >= (newest.hint_run_at, newest.hint_id)) THEN
                            kept_xid := '{}';
                            kept_run_at := '{}';
                            kept_id := '{}';
                            FOR i IN 1 .. coalesce(cardinality(newest.note_xid), 0) LOOP
                                CONTINUE WHEN newest.note_xid[i] = ANY (lane.note_xid)
                                              AND newest.note_xid[i] < me
                                              AND newest.note_xid[i] <> ALL (open_xids);
                                kept_xid := kept_xid || newest.note_xid[i];
                                kept_run_at := kept_run_at || newest.note_run_at[i];
                                kept_id := kept_id || newest.note_id[i];
                            END LOOP;
                            FOREACH open_xid IN ARRAY open_xids LOOP
                                CONTINUE WHEN open_xid = ANY (newest.note_xid);
                                kept_xid := kept_xid || open_xid;
                                kept_run_at := kept_run_at || newest.hint_run_at;
                                kept_id := kept_id || newest.hint_id;
                            END LOOP;
                            INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id,
                                                        swept_run_at, swept_id, gen, clock,
                                                        note_xid, note_run_at, note_id)
                            VALUES (lane.id, newest.seq, next_run_at, next_id,
                                    newest.swept_run_at, newest.swept_id,
                                    newest.gen + lowers::integer,
                                    greatest(newest.clock, clock_timestamp()), kept_xid,
                                    kept_run_at, kept_id)
                            ON CONFLICT (lane_id, prev_seq) DO NOTHING;
                            moved := FOUND;
                        END IF;
                    END IF;
                    -- The lowerings scanned for, once the move stands.
                    IF moved AND lowering_ids IS NOT NULL THEN
                        DELETE FROM awa.lane_lowerings AS l WHERE l.id = ANY (lowering_ids);
                    END IF;
                END LOOP;
                -- (fair: the next round serves this level's lanes again if
                -- one gave its whole share, or the next level)
                EXIT WHEN NOT visited OR remaining[q] <= 0 OR (fair AND round_took = 0);
            END LOOP;
            EXIT WHEN lanes_seen;
            -- A queue without lanes (the worker opens its own as it starts).
            PERFORM awa.open_lanes_v1(claim_queues[q]);
            opened := true;
        END LOOP;
        IF cardinality(queue_picked) > 0 THEN
            -- Started in a statement after the scans (see above).
            RETURN QUERY
            UPDATE awa.jobs AS jobs
            SET state = 'running',
                attempt = jobs.attempt + 1,
                run_lease = greatest(jobs.run_lease, lease_floor) + 1,
                attempted_at = now(),
                worker_id = claim_worker,
                -- least ignores NULLs: no timeout, no deadline
                attempt_deadline_at = least(
                    now() + coalesce(
                        jobs.timeout_ms / 1000.0,
                        kind_timeouts[array_position(timeout_kinds, jobs.kind)],
                        queue_timeouts[q]
                    ) * interval '1 second',
                    jobs.deadline_at)
            WHERE jobs.id = ANY (queue_picked)
            -- The domains' values as the types the result declares.
            RETURNING jobs.id, jobs.run_lease, jobs.kind::text, jobs.queue::text,
                      jobs.state::text, jobs.priority::smallint, jobs.attempt,
                      jobs.max_attempts::smallint, jobs.crashes,
                      jobs.max_crashes::smallint, jobs.run_at, jobs.created_at,
                      jobs.attempted_at, jobs.finalized_at, jobs.args::jsonb,
                      jobs.tags::text[], jobs.metadata, jobs.errors, jobs.callback_id,
                      jobs.callback_timeout_at, jobs.attempt_deadline_at,
                      jobs.schema_version::smallint, jobs.rate_class::text,
                      jobs.partition_key::text;
        END IF;
        IF queue_has_limit THEN
            -- A limit that bound (it let fewer jobs be taken than asked,
            -- and all of them were): when to look again.
            IF allowed < claim_counts[q] AND remaining[q] <= 0 THEN
                IF limits.global_max_running IS NOT NULL
                   AND cardinality(holders) + cardinality(taken) >= limits.global_max_running THEN
                    look_again_at := least(look_again_at,
                                           clock_timestamp() + interval '50 milliseconds');
                END IF;
                IF tokens IS NOT NULL AND tokens - cardinality(taken) < 1 THEN
                    look_again_at := least(look_again_at, clock_timestamp()
                        + (1 - (tokens - cardinality(taken))) / limits.rate_per_s
                          * interval '1 second');
                END IF;
            END IF;
            IF part_held AND remaining[q] > 0 THEN
                -- Jobs wait in partitions at their cap, and the claim has
                -- room: an outcome frees a slot without a word.
                look_again_at := least(look_again_at,
                                       clock_timestamp() + interval '50 milliseconds');
            END IF;
            UPDATE awa.queue_settings AS s
            SET running_ids = CASE WHEN limits.global_max_running IS NULL THEN '{}'
                                   ELSE holders || taken END,
                rate_tokens = tokens - cardinality(taken),
                rate_tokens_at = CASE WHEN tokens IS NOT NULL THEN tokens_at END,
                partition_running_keys = CASE WHEN part_cap IS NULL THEN '{}' ELSE slot_keys END,
                partition_running_ids = CASE WHEN part_cap IS NULL THEN '{}' ELSE slot_ids END
            WHERE s.queue = claim_queues[q];
        END IF;
        IF look_again_at IS NOT NULL THEN
            -- Not a job: the queue has jobs a limit held back; its claimers
            -- may look again at attempt_deadline_at (attempted_at is now).
            RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::text, claim_queues[q],
                                NULL::text, NULL::smallint, NULL::integer, NULL::smallint,
                                NULL::smallint, NULL::smallint, NULL::timestamptz,
                                NULL::timestamptz, now(), NULL::timestamptz, NULL::jsonb,
                                NULL::text[], NULL::jsonb, NULL::jsonb, NULL::uuid,
                                NULL::timestamptz, look_again_at, NULL::smallint, NULL::text,
                                NULL::text;
        END IF;
    END LOOP;
    IF cardinality(class_names) > 0 THEN
        UPDATE awa.rate_classes AS rc
        SET tokens = spent.tokens, tokens_at = spent.at
        FROM unnest(class_names, class_tokens, class_at, class_locked)
             AS spent(name, tokens, at, locked)
        WHERE rc.name = spent.name AND spent.locked;
    END IF;
END
$$;
