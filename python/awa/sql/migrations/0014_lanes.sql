-- awa schema, version 14: claims start from a hint kept per lane, and no
-- index of awa.jobs reads a column that a claim or an outcome writes.
--
-- A claim found available jobs through jobs_claim_idx, whose predicate read
-- `state`, so every claim and every outcome of every job was an update that
-- was not HOT: a new version in every index and a dead tuple for vacuum, two
-- per job. Under a long transaction vacuum cannot remove them, the claim
-- index fills with dead entries every claim steps over, and claims collapse
-- (docs/benchmarks.md, the soaks).
--
-- Now the lane index (queue, priority, run_at, id) holds every job, and a
-- lane (one queue at one priority) remembers how far claims have come: its
-- hint. A claim scans from the hint, so it never walks the jobs claimed
-- before. Claims and outcomes change no indexed column and are HOT updates
-- on a table with room on its pages (fillfactor 30). Why the hint is safe
-- is docs/storage.md, "Lanes": in short, a job's key is read after its
-- writer holds a transaction id (awa.enqueue_time_v1), a claim notes the
-- transactions still in progress when it moves the hint and scans again
-- once each ends, a transaction that makes a job claimable behind the hint
-- leaves a lowering that the next claim scans from, and the leader sweeps
-- each lane for jobs a claim that rolled back left behind.
--
-- Lane state is never updated in place: under a long transaction every
-- update of one row leaves a version that each later reader steps over
-- (7.5 ms an update after 140 000 of them, measured). Claims append moves
-- to awa.lane_moves and read the newest; the leader deletes the old ones.
-- A move names the move it follows, and only one move may follow each, so
-- a claim whose lane moved since it looked leaves the hint alone; movers
-- take a transaction-level advisory lock per lane first (try, for claims),
-- so none ever waits on another's insert.
--
-- The running set had its own index too (jobs_running_idx, on state and
-- worker_id, which claims write). Each claim now records the ids it took in
-- awa.claims, one row per claim; rescue, attempt deadlines and a worker's
-- reconciler read the running jobs from there, and the leader deletes rows
-- whose jobs all left `running`. A job made running by other SQL gets a row
-- of its own from a trigger.
--
-- The jobs table is locked against writes first: the running jobs and the
-- lanes' first hints are read from it.

LOCK TABLE awa.jobs IN SHARE ROW EXCLUSIVE MODE;

-- A job's key, read after its transaction holds an id: a claim whose
-- transaction id is older has a now() before this (docs/storage.md, Lanes).
CREATE FUNCTION awa.enqueue_time_v1() RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN clock_timestamp();
END
$$;

ALTER TABLE awa.jobs ALTER COLUMN run_at SET DEFAULT awa.enqueue_time_v1();

-- Room on every page for a job's next versions, so claims and outcomes stay
-- HOT (new pages only; the rows already stored keep their pages).
ALTER TABLE awa.jobs SET (fillfactor = 30);

DROP INDEX awa.jobs_claim_idx;
DROP INDEX awa.jobs_running_idx;
DROP INDEX awa.jobs_attempt_deadline_idx;
-- Built here unless an operator built it first, CONCURRENTLY (see CHANGELOG).
CREATE INDEX IF NOT EXISTS jobs_lane_idx ON awa.jobs (queue, priority, run_at, id);

-- Each queue at each priority: a lane. Rows are never updated.
CREATE TABLE awa.lanes (
    id       integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue    text NOT NULL,
    priority smallint NOT NULL,
    CONSTRAINT lanes_queue_priority_key UNIQUE (queue, priority)
);

CREATE SEQUENCE awa.lane_moves_seq;

-- Each lane's state, appended; the newest row (highest seq) is current, and
-- prev_seq names the move it was made from (0: a lane's first), one move per
-- predecessor. hint: every job of the lane keyed at or before it is claimed,
-- or will be found again (notes, lowerings, the sweep). swept: how far the
-- sweep has looked for jobs a rolled-back claim left behind. gen: counts the
-- moves that lowered the hint (a claim that finds the lane moved since it
-- read it may build on the newer move only if none did). clock: the
-- highest clock of the movers (a clock that went back is found by it).
-- note_*: transactions in progress when the hint passed, each with the hint
-- before that move. made_at: when the move was made (the sweep deletes
-- moves older than a few seconds; see awa.claim_v1).
CREATE TABLE awa.lane_moves (
    lane_id      integer NOT NULL,
    seq          bigint NOT NULL DEFAULT nextval('awa.lane_moves_seq'),
    prev_seq     bigint NOT NULL,
    hint_run_at  timestamptz NOT NULL,
    hint_id      bigint NOT NULL,
    swept_run_at timestamptz NOT NULL,
    swept_id     bigint NOT NULL,
    gen          bigint NOT NULL,
    clock        timestamptz NOT NULL,
    made_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    note_xid     bigint[] NOT NULL,
    note_run_at  timestamptz[] NOT NULL,
    note_id      bigint[] NOT NULL,
    PRIMARY KEY (lane_id, seq),
    CONSTRAINT lane_moves_one_successor UNIQUE (lane_id, prev_seq)
);

-- Jobs made claimable at a key that may be behind their lane's hint (a
-- promotion, a release, a redrive, a back-dated insert): the next claim
-- scans from the earliest, and the move that covers them deletes them.
CREATE TABLE awa.lane_lowerings (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lane_id integer NOT NULL,
    run_at  timestamptz NOT NULL,
    job_id  bigint NOT NULL
);

CREATE INDEX lane_lowerings_lane_idx ON awa.lane_lowerings (lane_id);

-- The jobs each claim took (one row per claim), until they all left
-- `running`: how maintenance and the reconciler find running jobs without
-- an index on a column claims write. deadline_at: the earliest attempt
-- deadline among them.
CREATE TABLE awa.claims (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_id   bigint,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    job_ids     bigint[] NOT NULL,
    deadline_at timestamptz
);

INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
SELECT worker_id, array_agg(id ORDER BY id), min(attempt_deadline_at)
FROM awa.jobs WHERE state = 'running'
GROUP BY worker_id;

-- The lanes of a queue, all four priorities, each starting before every
-- job. Returns how many it made (0: they exist).
CREATE FUNCTION awa.open_lanes_v1(lane_queue text) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    made integer;
BEGIN
    WITH opened AS (
        INSERT INTO awa.lanes (queue, priority)
        SELECT lane_queue, p FROM generate_series(1, 4) AS p
        ON CONFLICT DO NOTHING
        RETURNING id
    )
    INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id, swept_run_at, swept_id,
                                gen, clock, note_xid, note_run_at, note_id)
    SELECT id, 0, '-infinity', 0, '-infinity', 0, 0, clock_timestamp(), '{}', '{}', '{}'
    FROM opened;
    GET DIAGNOSTICS made = ROW_COUNT;
    RETURN made;
END
$$;

-- Every queue with jobs gets its lanes, each hinted just before its first
-- available job (or at now, if it has none). The sweep starts from the
-- beginning of each lane once.
INSERT INTO awa.lanes (queue, priority)
SELECT queue, p FROM (SELECT DISTINCT queue FROM awa.jobs) AS queues, generate_series(1, 4) AS p;

INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id, swept_run_at, swept_id,
                            gen, clock, note_xid, note_run_at, note_id)
SELECT lanes.id, 0, coalesce(first.run_at, now()), coalesce(first.id - 1, 0), '-infinity', 0,
       0, clock_timestamp(), '{}', '{}', '{}'
FROM awa.lanes
LEFT JOIN LATERAL (
    SELECT jobs.run_at, jobs.id FROM awa.jobs
    WHERE jobs.queue = lanes.queue AND jobs.priority = lanes.priority
      AND jobs.state = 'available'
    ORDER BY jobs.run_at, jobs.id
    LIMIT 1
) AS first ON true;

-- A job became claimable at a key that may be behind its lane's hint: the
-- next claim scans from it. Once per lane and transaction while the keys
-- come in order (a promotion of many jobs). A lane that does not exist yet
-- starts before every job.
CREATE FUNCTION awa.lower_lane_v1(lane_queue text, lane_priority smallint,
                                  job_run_at timestamptz, lowered_job_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    lane integer;
BEGIN
    SELECT lanes.id INTO lane FROM awa.lanes
    WHERE lanes.queue = lane_queue AND lanes.priority = lane_priority;
    IF lane IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM awa.lane_lowerings AS l
               WHERE l.lane_id = lane AND l.xmin = pg_current_xact_id()::xid
                 AND (l.run_at, l.job_id) <= (job_run_at, lowered_job_id)) THEN
        RETURN;
    END IF;
    INSERT INTO awa.lane_lowerings (lane_id, run_at, job_id)
    VALUES (lane, job_run_at, lowered_job_id);
END
$$;

-- A job became claimable at a key that may be behind its lane's hint
-- (awa.lower_lane_v1), or running by anything but a claim: awa's claim
-- records its jobs in one row, with awa.claiming set; any other way gets a
-- row of its own, so maintenance finds it. One trigger per event, so each
-- statement on awa.jobs reads one condition more, not two.
CREATE FUNCTION awa.follow_job_v1() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.state = 'available' THEN
        PERFORM awa.lower_lane_v1(NEW.queue, NEW.priority, NEW.run_at, NEW.id);
    ELSE
        INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
        VALUES (NEW.worker_id, ARRAY[NEW.id], NEW.attempt_deadline_at);
    END IF;
    RETURN NULL;
END
$$;

-- awa's own inserts key their jobs after their transaction's start (and
-- lower their lanes themselves for a back-dated run_at); a job inserted
-- available by other SQL with a run_at at or before its transaction's start
-- (now(), or earlier) may be behind the hint.
CREATE TRIGGER jobs_follow_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN ((NEW.state = 'available' AND NEW.run_at <= now()) OR NEW.state = 'running')
    EXECUTE FUNCTION awa.follow_job_v1();

CREATE TRIGGER jobs_follow_on_update
    AFTER UPDATE OF state, run_at, queue, priority, worker_id, attempt_deadline_at
    ON awa.jobs FOR EACH ROW
    WHEN ((NEW.state = 'available'
           AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.run_at IS DISTINCT FROM NEW.run_at
                OR OLD.queue IS DISTINCT FROM NEW.queue
                OR OLD.priority IS DISTINCT FROM NEW.priority))
          OR (NEW.state = 'running'
              AND (OLD.state IS DISTINCT FROM NEW.state
                   OR OLD.worker_id IS DISTINCT FROM NEW.worker_id
                   OR OLD.attempt_deadline_at IS DISTINCT FROM NEW.attempt_deadline_at)
              AND current_setting('awa.claiming', true) IS DISTINCT FROM 'on'))
    EXECUTE FUNCTION awa.follow_job_v1();

-- Claims up to claim_counts[i] available jobs of each queue claim_queues[i]
-- for worker claim_worker, most urgent first (priority, then run_at, then
-- id), skipping jobs other claims hold, each lane from its hint, and moves
-- the hints. Starting an attempt bumps attempt and run_lease (above any
-- lease handed out before the server last started: awa.run_lease_floor)
-- and sets its deadline from the job's own timeout, else its kind's
-- (timeout_kinds, kind_timeouts), else its queue's (queue_timeouts, aligned
-- with claim_queues), never past the job's deadline. Returns the jobs as
-- started, then attempt_deadline_at. Commits without waiting for the WAL
-- flush (see awa/worker/producer.py), and marks the transaction as a claim,
-- which records its jobs itself (jobs_claim; awa.follow_job_v1 leaves them).
--
-- The attempts start in here, in a statement after the scans: a job a scan
-- locked may have been committed after the calling statement began, and
-- that statement's snapshot would not see it.
--
-- A lane's hint moves only from the move this claim read: one successor
-- per move (lane_moves_one_successor), and the lane's advisory lock taken
-- first without waiting, so the insert never waits on another mover's
-- either. The sweep deletes a move only once it is 10 seconds old, and a
-- claim moves nothing once it has run 5, so the move this claim read still
-- stands, or its successor does, when it inserts.
CREATE FUNCTION awa.claim_v1(claim_queues text[], claim_counts integer[], claim_worker bigint,
                             timeout_kinds text[], kind_timeouts float8[],
                             queue_timeouts float8[])
RETURNS TABLE (id bigint, run_lease bigint, kind text, queue text, state text,
               priority smallint, attempt integer, max_attempts smallint, crashes smallint,
               max_crashes smallint, run_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz, args jsonb, tags text[],
               metadata jsonb, errors jsonb, callback_id uuid, callback_timeout_at timestamptz,
               attempt_deadline_at timestamptz)
LANGUAGE plpgsql
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
                       EXISTS (SELECT FROM awa.jobs AS j
                               WHERE j.queue = lanes.queue AND j.priority = lanes.priority
                                 AND (j.run_at, j.id) > (mv.hint_run_at, mv.hint_id)
                                 AND j.run_at <= now() AND j.state = 'available'
                                 AND (j.deadline_at IS NULL OR j.deadline_at > now())) AS has_jobs
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
                            AND j.run_at <= now() AND j.state = 'available'
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
                    -- Everything visible up to now() is claimed, or held by a
                    -- claim in flight.
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
                    -- newest move, unless a move since lowered the hint for
                    -- jobs this claim did not see: the higher hint of the
                    -- two (a lowering of this claim's own stands), its notes
                    -- but those this claim scanned for, and this claim's.
                    SELECT * INTO newest FROM awa.lane_moves AS mv
                    WHERE mv.lane_id = lane.id ORDER BY mv.seq DESC LIMIT 1;
                    IF newest.gen = lane.gen THEN
                        IF lowers THEN
                            IF (newest.hint_run_at, newest.hint_id) < (next_run_at, next_id) THEN
                                next_run_at := newest.hint_run_at;
                                next_id := newest.hint_id;
                            END IF;
                        ELSIF (next_run_at, next_id) < (newest.hint_run_at, newest.hint_id) THEN
                            next_run_at := newest.hint_run_at;
                            next_id := newest.hint_id;
                        END IF;
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

-- The leader's sweep of one lane, for jobs a claim locked and then rolled
-- back (other claims skipped them and moved the hint past): walks at most
-- walk_limit jobs from where the last sweep stopped towards the hint, from
-- the lane's start when asked to or when the clock went back. Lowers the
-- hint to the first such job nobody holds, and to any lowering not yet
-- scanned for; moves `swept` only up to the first available job, held or
-- not, so a job held now and given back later is seen next time. Deletes
-- the lane's moves older than 10 seconds but the newest. Returns whether it
-- found a job left behind.
CREATE FUNCTION awa.sweep_lane_v1(sweep_lane integer, from_start boolean, walk_limit integer)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    lane record;
    m awa.lane_moves;
    restart boolean;
    start_run_at timestamptz;
    start_id bigint;
    walked bigint;
    first_run_at timestamptz;
    first_id bigint;
    last_run_at timestamptz;
    last_id bigint;
    free_run_at timestamptz;
    free_id bigint;
    swept_run_at timestamptz;
    swept_id bigint;
    lowering_ids bigint[];
    lowest_run_at timestamptz;
    next_run_at timestamptz;
    next_id bigint;
    newest bigint;
    left_behind boolean := false;
BEGIN
    SELECT lanes.queue, lanes.priority INTO lane FROM awa.lanes WHERE lanes.id = sweep_lane;
    SELECT * INTO m FROM awa.lane_moves AS mv
    WHERE mv.lane_id = sweep_lane ORDER BY mv.seq DESC LIMIT 1;
    IF m.lane_id IS NULL THEN
        RETURN false;
    END IF;
    restart := from_start OR m.clock > clock_timestamp() + interval '1 second';
    IF restart THEN
        start_run_at := '-infinity';
        start_id := 0;
    ELSIF (m.swept_run_at, m.swept_id) < (m.hint_run_at, m.hint_id) THEN
        start_run_at := m.swept_run_at;
        start_id := m.swept_id;
    ELSE
        start_run_at := m.hint_run_at;
        start_id := m.hint_id;
    END IF;
    WITH walk AS (
        SELECT j.run_at, j.id,
               j.state = 'available' AND j.run_at <= now()
               AND (j.deadline_at IS NULL OR j.deadline_at > now()) AS claimable
        FROM awa.jobs AS j
        WHERE j.queue = lane.queue AND j.priority = lane.priority
          AND (j.run_at, j.id) > (start_run_at, start_id)
          AND (j.run_at, j.id) <= (m.hint_run_at, m.hint_id)
        ORDER BY j.run_at, j.id
        LIMIT walk_limit
    )
    SELECT (SELECT count(*) FROM walk), f.run_at, f.id, l.run_at, l.id
    INTO walked, first_run_at, first_id, last_run_at, last_id
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT w.run_at, w.id FROM walk AS w WHERE w.claimable
               ORDER BY w.run_at, w.id LIMIT 1) AS f ON true
    LEFT JOIN (SELECT w.run_at, w.id FROM walk AS w
               ORDER BY w.run_at DESC, w.id DESC LIMIT 1) AS l ON true;
    IF first_id IS NOT NULL THEN
        SELECT j.run_at, j.id INTO free_run_at, free_id FROM awa.jobs AS j
        WHERE j.queue = lane.queue AND j.priority = lane.priority
          AND (j.run_at, j.id) >= (first_run_at, first_id)
          AND (j.run_at, j.id) <= (m.hint_run_at, m.hint_id)
          AND j.run_at <= now() AND j.state = 'available'
          AND (j.deadline_at IS NULL OR j.deadline_at > now())
        ORDER BY j.run_at, j.id LIMIT 1
        FOR UPDATE OF j SKIP LOCKED;
        swept_run_at := first_run_at;
        swept_id := first_id - 1;
    ELSIF walked < walk_limit THEN
        swept_run_at := m.hint_run_at;
        swept_id := m.hint_id;
    ELSE
        swept_run_at := last_run_at;
        swept_id := last_id;
    END IF;

    -- Lowering a hint is always safe; the move is made from the newest
    -- move, read once no claim is moving the lane.
    PERFORM pg_advisory_xact_lock(1635216494, sweep_lane);
    SELECT * INTO m FROM awa.lane_moves AS mv
    WHERE mv.lane_id = sweep_lane ORDER BY mv.seq DESC LIMIT 1;
    SELECT array_agg(l.id), min(l.run_at) INTO lowering_ids, lowest_run_at
    FROM awa.lane_lowerings AS l WHERE l.lane_id = sweep_lane;
    next_run_at := m.hint_run_at;
    next_id := m.hint_id;
    IF free_id IS NOT NULL AND (free_run_at, free_id - 1) < (next_run_at, next_id) THEN
        next_run_at := free_run_at;
        next_id := free_id - 1;
        left_behind := true;
    END IF;
    IF (lowest_run_at, 0::bigint) < (next_run_at, next_id) THEN
        next_run_at := lowest_run_at;
        next_id := 0;
    END IF;
    IF (next_run_at, next_id) = (m.hint_run_at, m.hint_id)
       AND (swept_run_at, swept_id) = (m.swept_run_at, m.swept_id) AND NOT restart THEN
        newest := m.seq;
    ELSE
        INSERT INTO awa.lane_moves (lane_id, prev_seq, hint_run_at, hint_id, swept_run_at,
                                    swept_id, gen, clock, note_xid, note_run_at, note_id)
        VALUES (sweep_lane, m.seq, next_run_at, next_id, swept_run_at, swept_id,
                m.gen + ((next_run_at, next_id) < (m.hint_run_at, m.hint_id))::integer,
                CASE WHEN restart THEN clock_timestamp() ELSE m.clock END,
                m.note_xid, m.note_run_at, m.note_id)
        RETURNING seq INTO newest;
    END IF;
    IF lowering_ids IS NOT NULL THEN
        DELETE FROM awa.lane_lowerings AS l WHERE l.id = ANY (lowering_ids);
    END IF;
    DELETE FROM awa.lane_moves AS mv
    WHERE mv.lane_id = sweep_lane AND mv.seq < newest
      AND mv.made_at < clock_timestamp() - interval '10 seconds';
    RETURN left_behind;
END
$$;
