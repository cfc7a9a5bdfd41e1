-- awa schema, version 15: two gaps in the claim's rules closed (a claim
-- drops a transaction's note only once it has covered all the jobs the
-- note stands for), and two of its costs cut.
--
-- A claim that finds a noted transaction ended scans from the note's bound
-- and drops the note. Two cases let it drop a note without having covered
-- the transaction's jobs, which then waited behind the hint for the sweep
-- (docs/storage.md, Lanes, and the two tests named below):
--
-- * It found its lane moved by another claim meanwhile and built its move
--   on that one, taking the higher of the two hints. When the other's hint
--   was the higher, this claim's scan had stopped below it (a claim of one
--   filled with the transaction's first job), and the other claim had not
--   seen the transaction's jobs (it was in progress then). Now such a claim
--   leaves the lane as the newer move has it: its own, lower hint adds
--   nothing (test_a_claim_building_on_a_newer_move_keeps_the_notes_it_did_not_cover).
-- * Its transaction started before a claim with a later start moved the
--   hint past it. It scanned only jobs keyed up to its own start, and kept
--   the later hint, so the transaction's jobs keyed in between were never
--   looked at. Now it scans up to the hint (such jobs are due: the hint was
--   some claim's start) (test_a_claim_started_before_the_hint_covers_the_notes_it_drops).
--
-- And two costs. The probe for a lane's next job was an EXISTS, which the
-- planner ran as a sequential scan of awa.jobs once the table had been
-- analysed with most jobs in one queue, for every empty lane of every
-- claim (7.8 ms a claim of one over 20 000 jobs); it now reads the lane
-- index in order (test_a_claim_reads_no_lane_by_scanning_the_whole_table).
-- And plpgsql planned the function's statements again on every call; they
-- now keep one generic plan per session.

CREATE OR REPLACE FUNCTION awa.claim_v1(claim_queues text[], claim_counts integer[], claim_worker bigint,
                             timeout_kinds text[], kind_timeouts float8[],
                             queue_timeouts float8[])
RETURNS TABLE (id bigint, run_lease bigint, kind text, queue text, state text,
               priority smallint, attempt integer, max_attempts smallint, crashes smallint,
               max_crashes smallint, run_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz, args jsonb, tags text[],
               metadata jsonb, errors jsonb, callback_id uuid, callback_timeout_at timestamptz,
               attempt_deadline_at timestamptz)
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
BEGIN
    -- now() strictly before every clock read after this transaction's id
    -- exists: a transaction with a newer id keys its jobs after every job
    -- this claim can take (run_at <= now()).
    WHILE clock_timestamp() <= now() LOOP
    END LOOP;
    FOR q IN 1 .. coalesce(cardinality(claim_queues), 0) LOOP
        CONTINUE WHEN remaining[q] <= 0;
        FOR pass IN 1 .. 2 LOOP
            lanes_seen := false;
            -- The queue's lanes in priority order, each with its newest move,
            -- whether it has lowerings, and whether it has an available job
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
                )
                SELECT tx.me, tx.open_xids, lanes.id, lanes.queue, lanes.priority, mv.seq,
                       mv.hint_run_at, mv.hint_id, mv.swept_run_at, mv.swept_id, mv.gen, mv.clock,
                       mv.note_xid, mv.note_run_at, mv.note_id,
                       EXISTS (SELECT FROM awa.lane_lowerings AS l WHERE l.lane_id = lanes.id)
                           AS has_lowerings,
                       -- In the lane index's order: as an EXISTS, the planner
                       -- took a table with many jobs of the queue for one where
                       -- any row would do, and read the whole table for each
                       -- empty lane.
                       (SELECT j.id FROM awa.jobs AS j
                        WHERE j.queue = lanes.queue AND j.priority = lanes.priority
                          AND (j.run_at, j.id) > (mv.hint_run_at, mv.hint_id)
                          AND j.run_at <= now() AND j.state = 'available'
                          AND (j.deadline_at IS NULL OR j.deadline_at > now())
                        ORDER BY j.run_at, j.id
                        LIMIT 1) IS NOT NULL AS has_jobs
                FROM tx, awa.lanes
                CROSS JOIN LATERAL (SELECT * FROM awa.lane_moves
                                    WHERE lane_moves.lane_id = lanes.id
                                    ORDER BY lane_moves.seq DESC LIMIT 1) AS mv
                WHERE lanes.queue = claim_queues[q]
                ORDER BY lanes.priority
            LOOP
                lanes_seen := true;
                me := lane.me;
                open_xids := lane.open_xids;
                asked := remaining[q];
                CONTINUE WHEN asked <= 0;
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
                -- An idle lane moves at most once a second.
                CONTINUE WHEN NOT (lane.has_jobs OR rescan
                                   OR lane.hint_run_at < now() - interval '1 second');
                got := 0;
                IF lane.has_jobs OR rescan THEN
                    -- In key order (array_agg keeps the subquery's): the last
                    -- id is the top job's, and the latest run_at its.
                    SELECT coalesce(array_agg(c.id), '{}'), max(c.run_at)
                    INTO picked, top_run_at
                    FROM (SELECT j.id, j.run_at FROM awa.jobs AS j
                          WHERE j.queue = lane.queue AND j.priority = lane.priority
                            AND (j.run_at, j.id) > (from_run_at, from_id)
                            -- up to the hint when it is past now() (a claim
                            -- with a later start moved it): a noted
                            -- transaction may have keyed jobs in between, due
                            -- since, which this claim is the one to cover
                            AND j.run_at <= greatest(now(), lane.hint_run_at)
                            AND j.state = 'available'
                            -- maintenance fails jobs past their deadline
                            AND (j.deadline_at IS NULL OR j.deadline_at > now())
                          ORDER BY j.run_at, j.id
                          LIMIT asked
                          FOR UPDATE OF j SKIP LOCKED) AS c;
                    got := cardinality(picked);
                END IF;
                IF got = asked THEN
                    -- The last job taken; behind the hint after a rescan that
                    -- filled the claim (a lowering), since more may wait there.
                    next_run_at := top_run_at;
                    next_id := picked[got];
                ELSE
                    -- Everything visible up to now() (or the hint, if later)
                    -- is claimed, or held by a claim in flight.
                    next_run_at := greatest(now(), lane.hint_run_at);
                    next_id := CASE WHEN now() > lane.hint_run_at THEN 0 ELSE lane.hint_id END;
                END IF;
                IF got > 0 THEN
                    remaining[q] := asked - got;
                    -- Started in a statement after the scan (see above).
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
                    WHERE jobs.id = ANY (picked)
                    RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text,
                              jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes,
                              jobs.max_crashes, jobs.run_at, jobs.created_at,
                              jobs.attempted_at, jobs.finalized_at, jobs.args, jobs.tags,
                              jobs.metadata, jobs.errors, jobs.callback_id,
                              jobs.callback_timeout_at, jobs.attempt_deadline_at;
                END IF;
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
            EXIT WHEN lanes_seen;
            -- A queue without lanes (the worker opens its own as it starts).
            PERFORM awa.open_lanes_v1(claim_queues[q]);
        END LOOP;
    END LOOP;
END
$$;
