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
-- A claim that moves the hint first locks its lane's row in awa.lanes,
-- which is never updated either.
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

-- One row per lane, never updated: a claim that moves the lane's hint, and
-- the sweep, lock it first.
CREATE TABLE awa.lanes (
    id       integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue    text NOT NULL,
    priority smallint NOT NULL,
    CONSTRAINT lanes_queue_priority_key UNIQUE (queue, priority)
);

CREATE SEQUENCE awa.lane_moves_seq;

-- Each lane's state, appended; the newest row (highest seq) is current.
-- hint: every job of the lane keyed at or before it is claimed, or will be
-- found again (notes, lowerings, the sweep). swept: how far the sweep has
-- looked for jobs a rolled-back claim left behind. gen: bumped by every
-- move that lowers the hint. clock: the highest clock of the movers (a
-- clock that went back is found by it). note_*: transactions in progress
-- when the hint passed, each with the hint before that move.
CREATE TABLE awa.lane_moves (
    lane_id      integer NOT NULL,
    seq          bigint NOT NULL DEFAULT nextval('awa.lane_moves_seq'),
    hint_run_at  timestamptz NOT NULL,
    hint_id      bigint NOT NULL,
    swept_run_at timestamptz NOT NULL,
    swept_id     bigint NOT NULL,
    gen          bigint NOT NULL,
    clock        timestamptz NOT NULL,
    note_xid     bigint[] NOT NULL,
    note_run_at  timestamptz[] NOT NULL,
    note_id      bigint[] NOT NULL,
    PRIMARY KEY (lane_id, seq)
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
    INSERT INTO awa.lane_moves (lane_id, hint_run_at, hint_id, swept_run_at, swept_id, gen,
                                clock, note_xid, note_run_at, note_id)
    SELECT id, '-infinity', 0, '-infinity', 0, 0, clock_timestamp(), '{}', '{}', '{}'
    FROM opened;
    GET DIAGNOSTICS made = ROW_COUNT;
    RETURN made;
END
$$;

-- Every queue and priority with jobs gets its lanes, each hinted just
-- before its first available job (or at now, if it has none). The sweep
-- starts from the beginning of each lane once.
INSERT INTO awa.lanes (queue, priority)
SELECT queue, p FROM (SELECT DISTINCT queue FROM awa.jobs) AS queues, generate_series(1, 4) AS p;

INSERT INTO awa.lane_moves (lane_id, hint_run_at, hint_id, swept_run_at, swept_id, gen, clock,
                            note_xid, note_run_at, note_id)
SELECT lanes.id, coalesce(first.run_at, now()), coalesce(first.id - 1, 0), '-infinity', 0, 0,
       clock_timestamp(), '{}', '{}', '{}'
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

CREATE FUNCTION awa.job_became_claimable() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM awa.lower_lane_v1(NEW.queue, NEW.priority, NEW.run_at, NEW.id);
    RETURN NULL;
END
$$;

-- awa's own inserts key their jobs after their transaction id; a job
-- inserted available with an earlier run_at (back-dated, or by SQL that
-- set run_at itself) may be behind the hint.
CREATE TRIGGER jobs_lower_lane_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'available' AND NEW.run_at < statement_timestamp())
    EXECUTE FUNCTION awa.job_became_claimable();

CREATE TRIGGER jobs_lower_lane_on_update
    AFTER UPDATE OF state, run_at, queue, priority ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'available'
          AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.run_at IS DISTINCT FROM NEW.run_at
               OR OLD.queue IS DISTINCT FROM NEW.queue
               OR OLD.priority IS DISTINCT FROM NEW.priority))
    EXECUTE FUNCTION awa.job_became_claimable();

-- A job made running by anything but a claim (awa's claim records its own
-- jobs in one row, with awa.claiming set) is recorded in a row of its own,
-- so maintenance finds it.
CREATE FUNCTION awa.record_running_job() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
    VALUES (NEW.worker_id, ARRAY[NEW.id], NEW.attempt_deadline_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_record_running_on_insert
    AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'running')
    EXECUTE FUNCTION awa.record_running_job();

CREATE TRIGGER jobs_record_running_on_update
    AFTER UPDATE OF state, worker_id, attempt_deadline_at ON awa.jobs FOR EACH ROW
    WHEN (NEW.state = 'running'
          AND (OLD.state IS DISTINCT FROM NEW.state
               OR OLD.worker_id IS DISTINCT FROM NEW.worker_id
               OR OLD.attempt_deadline_at IS DISTINCT FROM NEW.attempt_deadline_at)
          AND current_setting('awa.claiming', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION awa.record_running_job();

-- Claims up to claim_counts[i] available jobs of each queue claim_queues[i]
-- for worker claim_worker, most urgent first (priority, then run_at, then
-- id), skipping jobs other claims hold; each lane from its hint. Starting an
-- attempt bumps attempt and run_lease (above any lease handed out before
-- the server last started: awa.run_lease_floor) and sets its deadline from
-- the job's own timeout, else its kind's (timeout_kinds, kind_timeouts),
-- else its queue's (queue_timeouts, aligned with claim_queues), never past
-- the job's deadline. Records the jobs taken in awa.claims. Commits without
-- waiting for the WAL flush (see awa/worker/producer.py).
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
    lease_floor bigint := awa.run_lease_floor();
    q integer;
    pass integer;
    lanes_found boolean;
    lane record;
    want integer;
    asked integer;
    m awa.lane_moves;
    m2 awa.lane_moves;
    lowering_ids bigint[];
    lowest_run_at timestamptz;
    ended_run_at timestamptz;
    ended_id bigint;
    from_run_at timestamptz;
    from_id bigint;
    rescanned boolean;
    picked bigint[];
    picked_run_at timestamptz[];
    deadlines timestamptz[];
    got integer;
    top_run_at timestamptz;
    top_id bigint;
    new_run_at timestamptz;
    new_id bigint;
    new_gen bigint;
    claimed_ids bigint[] := '{}';
    earliest_deadline timestamptz;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true), set_config('awa.claiming', 'on', true);
    -- now() strictly before every clock read after this transaction's id
    -- exists: a transaction with a newer id keys its jobs after every job
    -- this claim can take (run_at <= now()).
    WHILE clock_timestamp() <= now() LOOP
    END LOOP;
    me := pg_current_xact_id()::text::bigint;
    -- Every older transaction still in progress (those from the snapshot's
    -- xmax on are in progress too, and not listed in its xip).
    SELECT coalesce(array_agg(s.x), '{}') INTO open_xids
    FROM (SELECT x::text::bigint AS x FROM pg_snapshot_xip(pg_current_snapshot()) AS x
          UNION
          SELECT generate_series(pg_snapshot_xmax(pg_current_snapshot())::text::bigint, me - 1)
         ) AS s
    WHERE s.x < me;

    FOR q IN 1 .. coalesce(cardinality(claim_queues), 0) LOOP
        want := claim_counts[q];
        FOR pass IN 1 .. 2 LOOP
            lanes_found := false;
            FOR lane IN SELECT lanes.id, lanes.priority FROM awa.lanes
                        WHERE lanes.queue = claim_queues[q] ORDER BY lanes.priority LOOP
                lanes_found := true;
                EXIT WHEN want <= 0;
                SELECT * INTO m FROM awa.lane_moves AS mv
                WHERE mv.lane_id = lane.id ORDER BY mv.seq DESC LIMIT 1;
                SELECT array_agg(l.id), min(l.run_at) INTO lowering_ids, lowest_run_at
                FROM awa.lane_lowerings AS l WHERE l.lane_id = lane.id;
                ended_run_at := NULL;
                ended_id := NULL;
                IF cardinality(m.note_xid) > 0 THEN
                    SELECT n.f, n.fi INTO ended_run_at, ended_id
                    FROM unnest(m.note_xid, m.note_run_at, m.note_id) AS n(x, f, fi)
                    WHERE n.x < me AND n.x <> ALL (open_xids)
                    ORDER BY n.f, n.fi LIMIT 1;
                END IF;
                -- From the hint, or from further back: a noted transaction
                -- that ended, or a job made claimable behind the hint.
                from_run_at := m.hint_run_at;
                from_id := m.hint_id;
                IF ended_run_at IS NOT NULL AND (ended_run_at, ended_id) < (from_run_at, from_id) THEN
                    from_run_at := ended_run_at;
                    from_id := ended_id;
                END IF;
                IF lowest_run_at IS NOT NULL AND (lowest_run_at, 0::bigint) < (from_run_at, from_id) THEN
                    from_run_at := lowest_run_at;
                    from_id := 0;
                END IF;
                rescanned := (from_run_at, from_id) < (m.hint_run_at, m.hint_id);
                asked := want;
                SELECT coalesce(array_agg(c.id ORDER BY c.run_at, c.id), '{}'),
                       array_agg(c.run_at ORDER BY c.run_at, c.id),
                       array_agg(c.deadline ORDER BY c.run_at, c.id)
                INTO picked, picked_run_at, deadlines
                FROM (
                    SELECT j.id, j.run_at,
                           -- least ignores NULLs: no timeout, no deadline
                           least(now() + coalesce(
                                     j.timeout_ms / 1000.0,
                                     kind_timeouts[array_position(timeout_kinds, j.kind)],
                                     queue_timeouts[q]) * interval '1 second',
                                 j.deadline_at) AS deadline
                    FROM awa.jobs AS j
                    WHERE j.queue = claim_queues[q] AND j.priority = lane.priority
                      AND (j.run_at, j.id) > (from_run_at, from_id)
                      AND j.run_at <= now() AND j.state = 'available'
                      AND (j.deadline_at IS NULL OR j.deadline_at > now())  -- maintenance fails the rest
                    ORDER BY j.run_at, j.id
                    LIMIT asked
                    FOR UPDATE OF j SKIP LOCKED
                ) AS c;
                got := cardinality(picked);
                IF got > 0 THEN
                    RETURN QUERY
                    UPDATE awa.jobs AS jobs
                    SET state = 'running',
                        attempt = jobs.attempt + 1,
                        run_lease = greatest(jobs.run_lease, lease_floor) + 1,
                        attempted_at = now(),
                        worker_id = claim_worker,
                        attempt_deadline_at = deadlines[array_position(picked, jobs.id)]
                    WHERE jobs.id = ANY (picked)
                    RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text,
                              jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes,
                              jobs.max_crashes, jobs.run_at, jobs.created_at, jobs.attempted_at,
                              jobs.finalized_at, jobs.args, jobs.tags, jobs.metadata, jobs.errors,
                              jobs.callback_id, jobs.callback_timeout_at,
                              jobs.attempt_deadline_at;
                    claimed_ids := claimed_ids || picked;
                    earliest_deadline := least(earliest_deadline,
                                               (SELECT min(d) FROM unnest(deadlines) AS d));
                    want := want - got;
                    top_run_at := picked_run_at[got];
                    top_id := picked[got];
                END IF;
                -- An idle lane moves at most once a second.
                CONTINUE WHEN got = 0 AND NOT rescanned AND ended_run_at IS NULL
                              AND lowering_ids IS NULL
                              AND m.hint_run_at >= now() - interval '1 second';
                -- Move the hint, unless another claim is moving it (never
                -- wait) or a move lowered it since it was read.
                PERFORM FROM awa.lanes AS anchor WHERE anchor.id = lane.id
                FOR UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                SELECT * INTO m2 FROM awa.lane_moves AS mv
                WHERE mv.lane_id = lane.id ORDER BY mv.seq DESC LIMIT 1;
                CONTINUE WHEN m2.gen <> m.gen;
                new_gen := m2.gen;
                IF got = asked AND rescanned
                   AND (top_run_at, top_id) < (m2.hint_run_at, m2.hint_id) THEN
                    -- Filled from behind the hint: more may wait there.
                    new_run_at := top_run_at;
                    new_id := top_id;
                    new_gen := m2.gen + 1;
                ELSIF got < asked THEN
                    -- Everything visible up to now() is claimed, or held by
                    -- a claim in flight.
                    IF (now(), 0::bigint) > (m2.hint_run_at, m2.hint_id) THEN
                        new_run_at := now();
                        new_id := 0;
                    ELSE
                        new_run_at := m2.hint_run_at;
                        new_id := m2.hint_id;
                    END IF;
                ELSIF (top_run_at, top_id) > (m2.hint_run_at, m2.hint_id) THEN
                    new_run_at := top_run_at;
                    new_id := top_id;
                ELSE
                    new_run_at := m2.hint_run_at;
                    new_id := m2.hint_id;
                END IF;
                -- Keep the notes, but those that ended and were scanned for
                -- now; note every older transaction in progress, with the
                -- hint before this move.
                INSERT INTO awa.lane_moves (lane_id, hint_run_at, hint_id, swept_run_at, swept_id,
                                            gen, clock, note_xid, note_run_at, note_id)
                SELECT lane.id, new_run_at, new_id, m2.swept_run_at, m2.swept_id, new_gen,
                       greatest(m2.clock, clock_timestamp()),
                       coalesce(array_agg(k.x), '{}'), coalesce(array_agg(k.f), '{}'),
                       coalesce(array_agg(k.fi), '{}')
                FROM (SELECT o.x, o.f, o.fi
                      FROM unnest(m2.note_xid, m2.note_run_at, m2.note_id) AS o(x, f, fi)
                      WHERE NOT (o.x = ANY (m.note_xid) AND o.x < me AND o.x <> ALL (open_xids))
                      UNION ALL
                      SELECT v.x, m2.hint_run_at, m2.hint_id FROM unnest(open_xids) AS v(x)
                      WHERE v.x <> ALL (m2.note_xid)) AS k;
                IF lowering_ids IS NOT NULL THEN
                    DELETE FROM awa.lane_lowerings AS l WHERE l.id = ANY (lowering_ids);
                END IF;
            END LOOP;
            EXIT WHEN lanes_found;
            PERFORM awa.open_lanes_v1(claim_queues[q]);
        END LOOP;
    END LOOP;

    IF cardinality(claimed_ids) > 0 THEN
        INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
        VALUES (claim_worker, claimed_ids, earliest_deadline);
    END IF;
END
$$;

-- The leader's sweep of one lane, for jobs a claim locked and then rolled
-- back (other claims skipped them and moved the hint past): walks at most
-- walk_limit jobs from where the last sweep stopped towards the hint, from
-- the lane's start when asked to or when the clock went back. Lowers the
-- hint to the first such job nobody holds, and to any lowering not yet
-- scanned for; moves `swept` only up to the first available job, held or
-- not, so a job held now and given back later is seen next time. Deletes
-- the lane's older moves. Returns whether it found such a job.
CREATE FUNCTION awa.sweep_lane_v1(sweep_lane integer, from_start boolean, walk_limit integer)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    lane record;
    m awa.lane_moves;
    m2 awa.lane_moves;
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
    new_run_at timestamptz;
    new_id bigint;
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
    SELECT (SELECT count(*) FROM walk),
           f.run_at, f.id, l.run_at, l.id
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

    PERFORM FROM awa.lanes AS anchor WHERE anchor.id = sweep_lane FOR UPDATE;
    SELECT * INTO m2 FROM awa.lane_moves AS mv
    WHERE mv.lane_id = sweep_lane ORDER BY mv.seq DESC LIMIT 1;
    IF m2.gen <> m.gen THEN
        RETURN false;  -- lowered meanwhile: the next pass looks again
    END IF;
    SELECT array_agg(l.id), min(l.run_at) INTO lowering_ids, lowest_run_at
    FROM awa.lane_lowerings AS l WHERE l.lane_id = sweep_lane;
    new_run_at := m2.hint_run_at;
    new_id := m2.hint_id;
    IF free_id IS NOT NULL AND (free_run_at, free_id - 1) < (new_run_at, new_id) THEN
        new_run_at := free_run_at;
        new_id := free_id - 1;
        left_behind := true;
    END IF;
    IF lowest_run_at IS NOT NULL AND (lowest_run_at, 0::bigint) < (new_run_at, new_id) THEN
        new_run_at := lowest_run_at;
        new_id := 0;
    END IF;
    IF (new_run_at, new_id) = (m2.hint_run_at, m2.hint_id)
       AND (swept_run_at, swept_id) = (m2.swept_run_at, m2.swept_id) AND NOT restart THEN
        newest := m2.seq;
    ELSE
        INSERT INTO awa.lane_moves (lane_id, hint_run_at, hint_id, swept_run_at, swept_id, gen,
                                    clock, note_xid, note_run_at, note_id)
        VALUES (sweep_lane, new_run_at, new_id, swept_run_at, swept_id,
                m2.gen + ((new_run_at, new_id) < (m2.hint_run_at, m2.hint_id))::integer,
                CASE WHEN restart THEN clock_timestamp() ELSE m2.clock END,
                m2.note_xid, m2.note_run_at, m2.note_id)
        RETURNING seq INTO newest;
    END IF;
    IF lowering_ids IS NOT NULL THEN
        DELETE FROM awa.lane_lowerings AS l WHERE l.id = ANY (lowering_ids);
    END IF;
    DELETE FROM awa.lane_moves AS mv WHERE mv.lane_id = sweep_lane AND mv.seq < newest;
    RETURN left_behind;
END
$$;
