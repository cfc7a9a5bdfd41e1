-- Every query that returns jobs returns the same columns, in this order:
-- id, run_lease, kind, queue, state, priority, attempt, max_attempts,
-- crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
-- args, tags, metadata, errors, callback_id, callback_timeout_at,
-- schema_version, rate_class, partition_key (see awa/job.py; jobs_claim
-- returns attempt_deadline_at and schema_version after callback_timeout_at,
-- and neither rate_class nor partition_key: a claimed job reads them as
-- NULL). jobs_get and jobs_list add progress and result, jobs_claim adds
-- progress (read as None where a row lacks them). Times are stored as timestamptz and `now()` is always the
-- database's clock.

-- name: jobs_insert
-- Inserts the client's jobs ($1: a JSON array of awa.job_input objects,
-- InsertRows.json_rows; one job is an array of one) in one statement, and
-- wakes each queue that received available jobs once. Jobs without a run_at
-- of their own run at the enqueue time (awa.enqueue_time_v1: read after this
-- transaction has an id, see docs/storage.md, Lanes); a job is available at
-- once unless its run_at is later. An available job keyed before the
-- enqueue time lowers its lane. Jobs whose unique key is already held are
-- skipped: each keyed job takes its key first (the first insert wins;
-- jobs_unique_holder names the holder), and only the jobs that got theirs
-- are written. Ids are drawn in input order. Returns the jobs written, by
-- id.
WITH enqueued AS MATERIALIZED (
    SELECT awa.enqueue_time_v1() AS at
), input AS (
    SELECT nextval('awa.jobs_id_seq') AS id, r.ordinality AS ord, r.kind, r.queue, r.args,
           r.priority, r.max_attempts, r.max_crashes, coalesce(r.run_at, enqueued.at) AS run_at,
           r.run_at < enqueued.at AS backdated, r.tags, r.metadata, r.unique_key,
           r.unique_states, r.timeout_ms, r.deadline_at, r.schema_version, r.rate_class,
           r.partition_key
    FROM enqueued, jsonb_populate_recordset(NULL::awa.job_input, $1::jsonb) WITH ORDINALITY AS r
), keys AS (
    -- In key order, so two inserts never wait on each other crosswise.
    INSERT INTO awa.job_unique_keys (unique_key, job_id)
    SELECT unique_key, id FROM input WHERE unique_key IS NOT NULL
    ORDER BY unique_key, ord
    ON CONFLICT DO NOTHING
    RETURNING job_id
), inserted AS (
    INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, max_crashes,
                          run_at, tags, metadata, unique_key, unique_states,
                          timeout_ms, deadline_at, schema_version, rate_class, partition_key)
    SELECT id, kind, queue, args,
           CASE WHEN input.run_at <= enqueued.at THEN 'available'::awa.job_state
                ELSE 'scheduled'::awa.job_state END,
           priority, max_attempts, max_crashes, input.run_at, tags, metadata,
           unique_key, unique_states, timeout_ms, deadline_at, schema_version, rate_class,
           partition_key
    FROM input, enqueued
    WHERE unique_key IS NULL OR id IN (SELECT job_id FROM keys)
    ORDER BY ord
    RETURNING id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
              crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
              args, tags, metadata, errors, callback_id, callback_timeout_at, schema_version,
              rate_class, partition_key
), lowered AS (
    SELECT awa.lower_lane_v2(inserted.queue, inserted.priority, inserted.partition_key,
                             inserted.run_at, inserted.id)
    FROM inserted JOIN input USING (id)
    WHERE inserted.state = 'available' AND input.backdated
), notified AS (
    SELECT pg_notify('awa_available', queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS woken
)
SELECT inserted.*, (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM lowered) AS lowered
FROM inserted
ORDER BY id;

-- name: jobs_insert_follow_ups
-- Inserts the follow-ups of committed outcomes, inside the transaction that
-- applies them; a follow-up whose unique key is already held is skipped (it
-- takes its key first, as in jobs_insert). Returns the unique keys it
-- inserted (InsertRows.written turns them into the positions written) and
-- how many queues it woke. The rows come as in jobs_insert, $2 the job
-- each follows (its parent_id), aligned with them. Keys are taken in key
-- order, so two flushes never wait on each other crosswise.
WITH enqueued AS MATERIALIZED (
    SELECT awa.enqueue_time_v1() AS at
), input AS (
    SELECT nextval('awa.jobs_id_seq') AS id, r.ordinality AS ord, r.kind, r.queue, r.args,
           r.priority, r.max_attempts, r.max_crashes, coalesce(r.run_at, enqueued.at) AS run_at,
           r.run_at < enqueued.at AS backdated, r.tags, r.metadata, r.unique_key,
           r.unique_states, r.timeout_ms, r.deadline_at, r.schema_version, r.rate_class,
           r.partition_key, ($2::bigint[])[r.ordinality] AS parent_id
    FROM enqueued, jsonb_populate_recordset(NULL::awa.job_input, $1::jsonb) WITH ORDINALITY AS r
), keys AS (
    INSERT INTO awa.job_unique_keys (unique_key, job_id)
    SELECT unique_key, id FROM input WHERE unique_key IS NOT NULL
    ORDER BY unique_key, ord
    ON CONFLICT DO NOTHING
    RETURNING unique_key, job_id
), inserted AS (
    INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, max_crashes,
                          run_at, tags, metadata, unique_key, unique_states,
                          timeout_ms, deadline_at, schema_version, rate_class, partition_key,
                          parent_id)
    SELECT id, kind, queue, args,
           CASE WHEN input.run_at <= enqueued.at THEN 'available'::awa.job_state
                ELSE 'scheduled'::awa.job_state END,
           priority, max_attempts, max_crashes, input.run_at, tags, metadata,
           unique_key, unique_states, timeout_ms, deadline_at, schema_version, rate_class,
           partition_key, parent_id
    FROM input, enqueued
    WHERE unique_key IS NULL OR id IN (SELECT job_id FROM keys)
    ORDER BY ord
    RETURNING id, queue, priority, partition_key, run_at, state
), lowered AS (
    SELECT awa.lower_lane_v2(inserted.queue, inserted.priority, inserted.partition_key,
                             inserted.run_at, inserted.id)
    FROM inserted JOIN input USING (id)
    WHERE inserted.state = 'available' AND input.backdated
), notified AS (
    SELECT pg_notify('awa_available', queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS woken
)
SELECT (SELECT array_agg(unique_key) FROM keys) AS inserted_keys,
       (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM lowered) AS lowered;

-- name: jobs_unique_holder
-- The job that holds a unique key in one of its states, if any.
SELECT job_id AS id FROM awa.job_unique_keys WHERE unique_key = $1;

-- name: jobs_copy_start
-- Starts a COPY, in its transaction: the enqueue time of its jobs (as
-- jobs_insert's; microseconds since the epoch), and for a COPY that must
-- return its jobs $1 ids, as one array in ascending order (one value to
-- decode, not a row per id).
SELECT (extract(epoch FROM enqueued.at) * 1000000)::bigint AS enqueued_us,
       array(SELECT nextval('awa.jobs_id_seq') FROM generate_series(1, $1::integer)) AS ids
FROM (SELECT awa.enqueue_time_v1() AS at) AS enqueued;

-- name: jobs_copy_open_partition_lanes
-- Before a COPY of partitioned jobs, in its transaction: opens their
-- partition lanes ($1 queues, $2 priorities, $3 partition keys, each lane
-- once; InsertRows.partition_lanes) and tells the insert trigger, until
-- jobs_copy_partition_lanes_opened_end, that each row's lane is open, so it
-- does not look for it row by row (awa.open_job_partition_lane_v1).
SELECT set_config('awa.partition_lanes_opened', 'on', true) AS opened,
       (SELECT count(*)
        FROM (SELECT awa.open_partition_lane_v1(l.queue, l.priority, l.partition_key)
              FROM unnest($1::text[], $2::smallint[], $3::text[])
                   AS l(queue, priority, partition_key)
              WHERE NOT EXISTS (SELECT FROM awa.lanes
                                WHERE lanes.queue = l.queue AND lanes.priority = l.priority
                                  AND lanes.partition_key = l.partition_key)) AS made
       ) AS lanes_opened;

-- name: jobs_copy_partition_lanes_opened_end
-- After that COPY: the insert trigger looks for each partitioned row's lane
-- again.
SELECT set_config('awa.partition_lanes_opened', 'off', true) AS opened;

-- name: jobs_lower_lanes
-- Lowers the lanes a COPY gave available jobs keyed before its enqueue time
-- ($1 queues, $2 priorities, $3 the earliest such run_at of each, in
-- microseconds since the epoch; InsertRows.backdated_lanes).
SELECT count(*) AS lowered
FROM (SELECT awa.lower_lane_v1(l.queue, l.priority,
                               'epoch'::timestamptz + l.run_at_us * interval '1 microsecond', 0)
      FROM unnest($1::text[], $2::smallint[], $3::bigint[]) AS l(queue, priority, run_at_us)
     ) AS lowered;

-- name: jobs_notify_queues
-- Wakes idle workers of these queues (after a COPY, which cannot notify).
SELECT count(pg_notify('awa_available', queue)) AS notified FROM unnest($1::text[]) AS queue;

-- name: jobs_by_ids
-- Jobs by id, in id order.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       args, tags, metadata, errors, callback_id, callback_timeout_at, schema_version,
       rate_class, partition_key
FROM awa.jobs
WHERE id = ANY($1::bigint[])
ORDER BY id;

-- name: jobs_by_id_range
-- Jobs with ids from $1 to $2, in id order: a COPY's jobs read back by the
-- range of the ids it reserved (a range scan of the primary key, where
-- `id = ANY` of 20 000 ids planned a parallel scan and a sort: 21 ms against
-- 3 ms). The range may hold jobs other sessions inserted meanwhile; the
-- caller keeps its own.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       args, tags, metadata, errors, callback_id, callback_timeout_at, schema_version,
       rate_class, partition_key
FROM awa.jobs
WHERE id BETWEEN $1 AND $2
ORDER BY id;

-- name: jobs_get
-- One job by id. Its args, metadata and result only when $2 asks for
-- them: they may hold personal data, so inspection leaves them in the
-- database.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       CASE WHEN $2::boolean THEN args END AS args, tags,
       CASE WHEN $2::boolean THEN metadata END AS metadata,
       errors, callback_id, callback_timeout_at, schema_version, rate_class, partition_key,
       progress, CASE WHEN $2::boolean THEN result END AS result, parent_id
FROM awa.jobs
WHERE id = $1;

-- name: jobs_list
-- Newest jobs first, optionally filtered by state, queue, kind and a tag
-- ($6), and below id $7 (the next page); args, metadata and result only
-- when $5 asks for them (see jobs_get).
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       CASE WHEN $5::boolean THEN args END AS args, tags,
       CASE WHEN $5::boolean THEN metadata END AS metadata,
       errors, callback_id, callback_timeout_at, schema_version, rate_class, partition_key,
       progress, CASE WHEN $5::boolean THEN result END AS result, parent_id
FROM awa.jobs
WHERE ($1::text IS NULL OR state = $1::text::awa.job_state)
  AND ($2::text IS NULL OR queue = $2)
  AND ($3::text IS NULL OR kind = $3)
  AND ($6::text IS NULL OR tags::text[] @> ARRAY[$6::text])
  AND ($7::bigint IS NULL OR id < $7::bigint)
ORDER BY id DESC
LIMIT $4;

-- name: jobs_follow_ups
-- The follow-ups of job $1 (the jobs its transitions inserted: spec and
-- staged ones), oldest first, at most $2, from the partial index on
-- parent_id; args, metadata and result left in the database.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       NULL::text AS args, tags, NULL::jsonb AS metadata,
       errors, callback_id, callback_timeout_at, schema_version, rate_class, partition_key,
       progress, parent_id
FROM awa.jobs
WHERE parent_id = $1::bigint
ORDER BY id
LIMIT $2;

-- name: jobs_count_by_state
-- How many jobs are in each state (for summaries and tests).
SELECT state::text AS state, count(*) AS count FROM awa.jobs GROUP BY state ORDER BY state;

-- name: jobs_claim_prepare_session
-- Plans claims once per connection: a custom plan for every claim costs
-- more than the claim itself (see awa/worker/producer.py). Without JIT: the
-- generic plan cannot see how many rows a claim wants, so on a large table
-- its estimate passes jit_above_cost and every claim paid ~60 ms to compile
-- (a 3 M-job backlog drained at 1 200 jobs/s instead of 12 000).
-- Without sequential scans: the one plan is made for the table as it is at
-- the first claim, and a worker that started on an empty queue otherwise
-- kept finding the claimed rows by scanning the whole table (40 ms a claim
-- at 200 000 rows) until an ANALYZE replanned it. Every table access of a
-- claim has an index; the pool resets the settings when the connection
-- goes back.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('jit', 'off', false),
       set_config('enable_seqscan', 'off', false);

-- name: jobs_write_prepare_session
-- The completer's session: its outcome writes find their rows by primary
-- key whatever the table's statistics say. A plan cached while the table
-- was empty otherwise scanned all of it for every batch (2.1 s a flush at
-- 200 000 rows) until an ANALYZE replanned it.
SELECT set_config('enable_seqscan', 'off', false);

-- name: jobs_claim
-- Claims up to N available jobs from each named queue for one worker, most
-- urgent first, each lane from its hint, and starts their attempts
-- (awa.claim_v2: $1 queues, $2 counts, $3 the worker, $4/$5 attempt
-- timeouts by kind, $6 by queue, aligned with $1; NULL: none). Records the
-- jobs taken in awa.claims. Returns the job's columns, then
-- attempt_deadline_at and schema_version; and a row with a NULL id for
-- each queue a limit held back (its attempt_deadline_at: when to look
-- again). Last, the progress an earlier attempt left (read only for an
-- attempt after the first or after a crash: a first attempt has none, and
-- looking it up would cost every claimed job a second read of its row).
WITH claimed AS MATERIALIZED (
    SELECT * FROM awa.claim_v2($1::text[], $2::integer[], $3::bigint, $4::text[],
                               $5::float8[], $6::float8[])
), recorded AS (
    INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
    SELECT $3::bigint, array_agg(claimed.id), min(claimed.attempt_deadline_at) FROM claimed
    WHERE claimed.id IS NOT NULL
    HAVING count(*) > 0
)
SELECT claimed.*, CASE WHEN claimed.attempt > 1 OR claimed.crashes > 0
                       THEN (SELECT jobs.progress FROM awa.jobs WHERE jobs.id = claimed.id)
                  END AS progress
FROM claimed;

-- name: jobs_claim_with_settings
-- jobs_claim as a worker claims: $7 each queue's priority aging interval,
-- $8 whether each has a ceiling or a rate limit, $9 whether any rate class
-- is configured, and $10 whether each is fair, as the worker last read them
-- (awa.worker.queue_settings), so that the claim need not read them again.
WITH claimed AS MATERIALIZED (
    SELECT * FROM awa.claim_v2($1::text[], $2::integer[], $3::bigint, $4::text[],
                               $5::float8[], $6::float8[], $7::float8[], $8::boolean[],
                               $9::boolean, $10::boolean[])
), recorded AS (
    INSERT INTO awa.claims (worker_id, job_ids, deadline_at)
    SELECT $3::bigint, array_agg(claimed.id), min(claimed.attempt_deadline_at) FROM claimed
    WHERE claimed.id IS NOT NULL
    HAVING count(*) > 0
)
SELECT claimed.*, CASE WHEN claimed.attempt > 1 OR claimed.crashes > 0
                       THEN (SELECT jobs.progress FROM awa.jobs WHERE jobs.id = claimed.id)
                  END AS progress
FROM claimed;

-- name: jobs_claim_one
-- Claims the most urgent available job, optionally of one kind and/or queue,
-- for awa.testing, which registers worker $3 for the call. Starting the
-- attempt bumps attempt and run_lease exactly as jobs_claim does.
WITH picked AS (
    SELECT id FROM awa.jobs
    WHERE state = 'available'
      AND ($1::text IS NULL OR kind = $1::text)
      AND ($2::text IS NULL OR queue = $2::text)
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS jobs
SET state = 'running',
    attempt = jobs.attempt + 1,
    -- Above any lease handed out before the server last started (see
    -- awa.run_lease_floor): a claim a crash forgot is never repeated.
    run_lease = greatest(jobs.run_lease, (SELECT awa.run_lease_floor())) + 1,
    attempted_at = now(),
    worker_id = $3,
    attempt_deadline_at = NULL  -- awa.testing applies the task's timeout itself
FROM picked
WHERE jobs.id = picked.id
RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text AS state,
          jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes, jobs.max_crashes,
          jobs.run_at, jobs.created_at, jobs.attempted_at, jobs.finalized_at,
          jobs.args, jobs.tags, jobs.metadata, jobs.errors,
          jobs.callback_id, jobs.callback_timeout_at, jobs.schema_version,
          jobs.rate_class, jobs.partition_key;

-- name: jobs_finish_batch
-- Applies a batch of attempt outcomes, one array per column, each given as
-- its array literal (Flush.array_literals: asyncpg would check every element
-- of a list on the client, about 1 µs a job; the server parses the text for
-- less). Each row is
-- guarded by (id, run_lease, state = 'running'): an outcome from a stale
-- attempt matches nothing. Delays are added to the database's clock. $7
-- is each row's result (what a completing handler returned, JSON text) or
-- NULL for the whole batch when no row has one (unnest pads it with NULLs);
-- $8 likewise, the last progress report of an attempt that made one (NULL
-- keeps the job's).
-- A batch that ends a job (completed, failed, cancelled) that a
-- client.result waits for (awa.result_waiters) notifies awa_finished once,
-- as it commits. Returns the rows it applied (and whether it notified).
WITH finished AS (
UPDATE awa.jobs AS jobs
SET state = outcome.state::awa.job_state,
    run_at = CASE WHEN outcome.delay_s IS NULL THEN jobs.run_at
                  ELSE now() + outcome.delay_s * interval '1 second' END,
    attempt = jobs.attempt - outcome.refund,
    finalized_at = CASE WHEN outcome.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    worker_id = NULL,
    -- Only a parked job keeps the callback its attempt registered.
    callback_id = CASE WHEN outcome.state = 'waiting_external' THEN jobs.callback_id END,
    callback_timeout_at = CASE WHEN outcome.state = 'waiting_external'
                               THEN jobs.callback_timeout_at END,
    callback_config = CASE WHEN outcome.state = 'waiting_external'
                           THEN jobs.callback_config END,
    errors = CASE WHEN outcome.error IS NULL THEN jobs.errors
                  ELSE coalesce(jobs.errors, '[]'::jsonb)
                       || jsonb_build_array(outcome.error || jsonb_build_object(
                           'at', now(), 'started_at', jobs.attempted_at,
                           'worker_id', jobs.worker_id)) END,
    failure_reason = CASE WHEN outcome.state = 'failed' THEN outcome.error ->> 'reason' END,
    result = outcome.result,
    progress = coalesce(outcome.progress, jobs.progress)
FROM unnest($1::text::bigint[], $2::text::bigint[], $3::text::text[], $4::text::float8[],
            $5::text::integer[], $6::text::jsonb[], $7::text[]::jsonb[], $8::text[]::jsonb[])
     AS outcome(id, run_lease, state, delay_s, refund, error, result, progress)
WHERE jobs.id = outcome.id
  AND jobs.run_lease = outcome.run_lease
  AND (outcome.state <> 'waiting_external' OR jobs.callback_id IS NOT NULL)
  -- Compared as text on purpose: no partial index on state may ever drive
  -- this join (jobs_running_idx did, before migration 0014: its row estimate
  -- was often stale, and a plan that scanned it re-read the whole batch for
  -- every running job).
  AND jobs.state::text = 'running'
RETURNING jobs.id
), applied AS (
    SELECT count(*) AS applied FROM finished
), ended AS (
    -- One notification a batch, never one a job; only when the batch ends
    -- a job (its outcomes read as a whole, so a stale one may wake a waiter
    -- for nothing: it reads its job again) that someone waits for, checked
    -- once the update is done (see awa.result_awaited_v1).
    SELECT count(pg_notify('awa_finished', '')) AS notified FROM applied
    WHERE applied.applied > 0
      AND $3::text::text[] && ARRAY['completed', 'failed', 'cancelled']
      AND awa.result_awaited_v1($1::text::bigint[])
)
SELECT applied.applied, ended.notified FROM applied, ended;

-- name: jobs_finish_batch_observed
-- jobs_finish_batch, returning what it changed in each row (for hooks and
-- follow-ups): the worker already holds the rest of the row, so args,
-- metadata and the other unchanged columns are not sent back (tags are: the
-- handler's copy is a mutable list). run_at and errors come back only when
-- the outcome changed them (a timestamp costs the worker to decode). The UPDATE is the same text as
-- jobs_finish_batch; a test keeps them equal. Job.finished reads the columns
-- by position.
WITH finished AS (
UPDATE awa.jobs AS jobs
SET state = outcome.state::awa.job_state,
    run_at = CASE WHEN outcome.delay_s IS NULL THEN jobs.run_at
                  ELSE now() + outcome.delay_s * interval '1 second' END,
    attempt = jobs.attempt - outcome.refund,
    finalized_at = CASE WHEN outcome.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    worker_id = NULL,
    -- Only a parked job keeps the callback its attempt registered.
    callback_id = CASE WHEN outcome.state = 'waiting_external' THEN jobs.callback_id END,
    callback_timeout_at = CASE WHEN outcome.state = 'waiting_external'
                               THEN jobs.callback_timeout_at END,
    callback_config = CASE WHEN outcome.state = 'waiting_external'
                           THEN jobs.callback_config END,
    errors = CASE WHEN outcome.error IS NULL THEN jobs.errors
                  ELSE coalesce(jobs.errors, '[]'::jsonb)
                       || jsonb_build_array(outcome.error || jsonb_build_object(
                           'at', now(), 'started_at', jobs.attempted_at,
                           'worker_id', jobs.worker_id)) END,
    failure_reason = CASE WHEN outcome.state = 'failed' THEN outcome.error ->> 'reason' END,
    result = outcome.result,
    progress = coalesce(outcome.progress, jobs.progress)
FROM unnest($1::text::bigint[], $2::text::bigint[], $3::text::text[], $4::text::float8[],
            $5::text::integer[], $6::text::jsonb[], $7::text[]::jsonb[], $8::text[]::jsonb[])
     AS outcome(id, run_lease, state, delay_s, refund, error, result, progress)
WHERE jobs.id = outcome.id
  AND jobs.run_lease = outcome.run_lease
  AND (outcome.state <> 'waiting_external' OR jobs.callback_id IS NOT NULL)
  -- Compared as text on purpose: no partial index on state may ever drive
  -- this join (jobs_running_idx did, before migration 0014: its row estimate
  -- was often stale, and a plan that scanned it re-read the whole batch for
  -- every running job).
  AND jobs.state::text = 'running'
RETURNING jobs.id, jobs.state::text AS state, jobs.attempt,
          CASE WHEN outcome.delay_s IS NOT NULL THEN jobs.run_at END AS run_at,
          jobs.finalized_at,
          CASE WHEN outcome.error IS NOT NULL THEN jobs.errors END AS errors,
          jobs.callback_id, jobs.callback_timeout_at, jobs.tags
), applied AS (
    SELECT count(*) AS applied FROM finished
), ended AS (
    -- One notification a batch, never one a job; only when the batch ends
    -- a job (its outcomes read as a whole, so a stale one may wake a waiter
    -- for nothing: it reads its job again) that someone waits for, checked
    -- once the update is done (see awa.result_awaited_v1).
    SELECT count(pg_notify('awa_finished', '')) AS notified FROM applied
    WHERE applied.applied > 0
      AND $3::text::text[] && ARRAY['completed', 'failed', 'cancelled']
      AND awa.result_awaited_v1($1::text::bigint[])
)
SELECT finished.*, ended.notified FROM finished, ended;

-- name: jobs_register_callback
-- Gives a running attempt a callback id and its deadline; guarded like every
-- attempt write, so a stale attempt gets nothing.
-- $4 is the callback's policy (CEL expressions for resolve_callback) or NULL.
UPDATE awa.jobs
SET callback_id = gen_random_uuid(),
    callback_timeout_at = now() + $3::float8 * interval '1 second',
    callback_config = $4::jsonb
WHERE id = $1 AND run_lease = $2 AND state::text = 'running'
RETURNING callback_id, callback_timeout_at;

-- name: jobs_callback_policy
-- The job waiting on a callback (parked, or still running: early) and its
-- policy, locked until the resolution that reads it commits.
SELECT id, callback_config FROM awa.jobs
WHERE callback_id = $1 AND state IN ('waiting_external', 'running')
FOR UPDATE;

-- name: jobs_resolve_callback
-- Resolves a callback: completed, failed (with an error entry) or available
-- again with its attempts reset. The job is parked, or still running (an
-- early callback: the handler has not returned yet; whatever it writes
-- later is refused by the state guard). A payload is kept in the job's
-- metadata under "callback_result". Returns the job as committed plus the
-- attempt it had, or nothing for an unknown or already resolved callback.
WITH parked AS (
    SELECT id, attempt FROM awa.jobs
    WHERE callback_id = $1 AND state IN ('waiting_external', 'running')
    FOR UPDATE
), resolved AS (
    UPDATE awa.jobs AS jobs
    SET state = $2::text::awa.job_state,
        finalized_at = CASE WHEN $2::text IN ('completed', 'failed') THEN now() END,
        attempt = CASE WHEN $2::text = 'available' THEN 0 ELSE jobs.attempt END,
        crashes = CASE WHEN $2::text = 'available' THEN 0 ELSE jobs.crashes END,
        run_at = CASE WHEN $2::text = 'available' THEN now() ELSE jobs.run_at END,
        worker_id = NULL,
        callback_id = NULL,
        callback_timeout_at = NULL,
        callback_config = NULL,
        failure_reason = CASE WHEN $2::text = 'failed' THEN 'terminal_error' END,
        errors = CASE WHEN $3::jsonb IS NULL THEN jobs.errors
                      ELSE coalesce(jobs.errors, '[]'::jsonb)
                           || jsonb_build_array($3::jsonb || jsonb_build_object(
                                  'attempt', parked.attempt, 'at', now())) END,
        metadata = CASE WHEN $4::jsonb IS NULL THEN jobs.metadata
                        ELSE coalesce(jobs.metadata, '{}'::jsonb)
                             || jsonb_build_object('callback_result', $4::jsonb) END
    FROM parked
    WHERE jobs.id = parked.id
    RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text AS state,
              jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes, jobs.max_crashes,
              jobs.run_at, jobs.created_at, jobs.attempted_at, jobs.finalized_at,
              jobs.args, jobs.tags, jobs.metadata, jobs.errors,
              jobs.callback_id, jobs.callback_timeout_at, jobs.schema_version,
              jobs.rate_class, jobs.partition_key, parked.attempt AS parked_attempt
), notified AS (
    SELECT pg_notify('awa_available', queue) FROM resolved WHERE state = 'available'
), told AS (
    -- A handler waiting in place, or still running (early), lost the job.
    SELECT pg_notify('awa_control', 'lost:' || id) FROM resolved
), ended AS (
    -- client.result waiters read their job again.
    SELECT pg_notify('awa_finished', '') FROM resolved WHERE state IN ('completed', 'failed')
)
SELECT resolved.*, (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM told) AS told, (SELECT count(*) FROM ended) AS ended
FROM resolved;

-- name: jobs_park_in_place
-- A handler waits for its callback in place (job.wait_for_callback): the
-- job shows waiting_external while its worker keeps holding it. Guarded
-- like every attempt write, and only for the callback this attempt holds;
-- nothing if it was resolved or resumed early.
UPDATE awa.jobs
SET state = 'waiting_external'
WHERE id = $1 AND run_lease = $2 AND state::text = 'running' AND callback_id = $3
  AND NOT coalesce((callback_config ->> 'resumed_early')::boolean, false)
RETURNING id;

-- name: jobs_take_early_resume
-- A handler about to wait in place finds its callback already resumed
-- (early): it takes the result, and the callback is used up.
UPDATE awa.jobs
SET callback_id = NULL, callback_timeout_at = NULL, callback_config = NULL
WHERE id = $1 AND run_lease = $2 AND state::text = 'running' AND callback_id = $3
  AND coalesce((callback_config ->> 'resumed_early')::boolean, false)
RETURNING metadata, metadata -> 'callback_result' AS callback_result;

-- name: jobs_unpark
-- A handler waiting in place was interrupted (shutdown): the job is running
-- again, so the worker can release it as usual.
UPDATE awa.jobs
SET state = 'running'
WHERE id = $1 AND run_lease = $2 AND state = 'waiting_external' AND worker_id IS NOT NULL
RETURNING id;

-- name: jobs_callback_wait_state
-- What a handler waiting in place needs to know about its job: the row,
-- and the callback's result if one was stored.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       args, tags, metadata, errors, callback_id, callback_timeout_at, schema_version,
       rate_class, partition_key, metadata -> 'callback_result' AS callback_result
FROM awa.jobs
WHERE id = $1;

-- name: jobs_resume_callback
-- Resumes a handler waiting in place: the job is running again (under the
-- same attempt and worker), the payload kept in metadata.callback_result,
-- and the worker told at commit. A callback whose handler has not started
-- waiting yet (early) keeps its id, marked resumed_early, with the result
-- stored: the handler takes it when it waits (jobs_take_early_resume), and
-- a handler that returns WaitForCallback instead parks as usual, so the job
-- is never left running without a handler. resumable is false for a job
-- parked by returning WaitForCallback: no handler is there to resume.
WITH target AS (
    SELECT id, state, (state = 'running' OR worker_id IS NOT NULL) AS resumable
    FROM awa.jobs
    WHERE callback_id = $1 AND state IN ('waiting_external', 'running')
      AND NOT coalesce((callback_config ->> 'resumed_early')::boolean, false)
    FOR UPDATE
), resumed AS (
    UPDATE awa.jobs AS jobs
    SET state = 'running',
        callback_id = CASE WHEN target.state = 'running' THEN jobs.callback_id END,
        callback_timeout_at = CASE WHEN target.state = 'running' THEN jobs.callback_timeout_at END,
        callback_config = CASE WHEN target.state = 'running'
                               THEN coalesce(jobs.callback_config, '{}'::jsonb)
                                    || '{"resumed_early": true}'::jsonb END,
        metadata = coalesce(jobs.metadata, '{}'::jsonb)
                   || jsonb_build_object('callback_result', $2::jsonb)
    FROM target
    WHERE jobs.id = target.id AND target.resumable
    RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text AS state,
              jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes, jobs.max_crashes,
              jobs.run_at, jobs.created_at, jobs.attempted_at, jobs.finalized_at,
              jobs.args, jobs.tags, jobs.metadata, jobs.errors,
              jobs.callback_id, jobs.callback_timeout_at, jobs.schema_version,
              jobs.rate_class, jobs.partition_key
), told AS (
    SELECT pg_notify('awa_control', 'resume:' || id) FROM resumed
)
SELECT resumed.*, target.id AS target_id, target.resumable, (SELECT count(*) FROM told) AS told
FROM target LEFT JOIN resumed ON resumed.id = target.id;

-- name: jobs_heartbeat_callback
-- Moves a callback's deadline to $2 seconds from now, for a job parked on it
-- or still running with it registered. Nothing for an unknown callback.
UPDATE awa.jobs
SET callback_timeout_at = now() + $2::float8 * interval '1 second'
WHERE callback_id = $1 AND state IN ('waiting_external', 'running')
RETURNING id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
          crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
          args, tags, metadata, errors, callback_id, callback_timeout_at, schema_version,
          rate_class, partition_key;

-- name: jobs_callbacks_expired
-- Parked jobs whose callback deadline has passed, oldest deadline first.
SELECT id, run_lease, attempt, max_attempts, crashes
FROM awa.jobs
WHERE state = 'waiting_external' AND callback_timeout_at <= now()
ORDER BY callback_timeout_at
LIMIT $1;

-- name: jobs_deadlines_passed
-- Unfinished jobs not running whose overall deadline has passed: they
-- fail with deadline_exceeded (no retry: the deadline is the job's; an
-- undecodable one could not be claimed once made available again). Only
-- deadlines from $2 on (the pass's floor, see jobs_deadline_floor): the
-- index also holds finished jobs, which keep their deadline.
WITH expired AS (
    SELECT id, attempt FROM awa.jobs
    WHERE deadline_at <= now()
      AND deadline_at >= $2::timestamptz
      AND state IN ('scheduled', 'available', 'retryable', 'waiting_external', 'undecodable')
    ORDER BY deadline_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE awa.jobs AS jobs
    SET state = 'failed', finalized_at = now(), worker_id = NULL,
        callback_id = NULL, callback_timeout_at = NULL, callback_config = NULL,
        failure_reason = 'deadline_exceeded',
        errors = coalesce(jobs.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', expired.attempt, 'type', 'DeadlineExceeded',
            'message', 'the job''s deadline passed before it could finish',
            'outcome', 'failed', 'reason', 'deadline_exceeded', 'at', now()))
    FROM expired
    WHERE jobs.id = expired.id
    RETURNING jobs.id, jobs.kind
), told AS (
    -- A handler waiting in place learns it lost the job.
    SELECT pg_notify('awa_control', 'lost:' || id) FROM failed
)
SELECT failed.*, (SELECT count(*) FROM told) AS told FROM failed;

-- name: jobs_deadline_floor
-- Where the next deadline pass can start: the earliest passed deadline
-- from $1 on of a job still unfinished (one running now, or one the pass
-- skipped), else now. Every job with an earlier deadline is finished.
SELECT coalesce(min(deadline_at), now()) AS floor
FROM awa.jobs
WHERE deadline_at >= $1::timestamptz AND deadline_at <= now()
  AND state NOT IN ('completed', 'failed', 'cancelled');

-- name: jobs_attempts_expired
-- Running attempts more than $1 seconds past their deadline: their worker
-- (which cancels a handler at its deadline) hung or died. Found through the
-- claims whose earliest deadline has passed.
WITH due AS (
    SELECT DISTINCT unnest(claims.job_ids) AS id, claims.worker_id
    FROM awa.claims
    WHERE claims.deadline_at < now() - $1::float8 * interval '1 second'
)
SELECT jobs.id, jobs.run_lease, jobs.attempt, jobs.max_attempts, jobs.crashes
FROM due
JOIN awa.jobs AS jobs ON jobs.id = due.id
WHERE jobs.state = 'running' AND jobs.worker_id IS NOT DISTINCT FROM due.worker_id
  AND jobs.attempt_deadline_at < now() - $1::float8 * interval '1 second'
ORDER BY jobs.attempt_deadline_at
LIMIT $2;

-- name: jobs_rescue
-- Applies maintenance's decisions for attempts it takes back (the
-- completion batch's column shape): retryable after a backoff, or failed,
-- with an error entry. $6 says why: 'crash' (the worker stopped
-- heartbeating; one more crash, counted apart from failures),
-- 'attempt_deadline' or 'callback_deadline' (a failed attempt). Guarded by
-- (id, run_lease, still running, or still parked for a callback deadline,
-- and still past that deadline), so a job finished, resolved or extended
-- meanwhile is left alone. The attempt's callback dies with it: resolving
-- it later raises CallbackNotFound instead of touching the next attempt.
WITH expired AS (
    UPDATE awa.jobs AS jobs
    SET state = expiry.state::awa.job_state,
        crashes = jobs.crashes + CASE WHEN $6::text = 'crash' THEN 1 ELSE 0 END,
        run_at = CASE WHEN expiry.delay_s IS NULL THEN jobs.run_at
                      ELSE now() + expiry.delay_s * interval '1 second' END,
        finalized_at = CASE WHEN expiry.state = 'failed' THEN now() END,
        worker_id = NULL,
        callback_id = NULL,
        callback_timeout_at = NULL,
        callback_config = NULL,
        errors = coalesce(jobs.errors, '[]'::jsonb)
                 || jsonb_build_array(expiry.error || jsonb_build_object(
                        'at', now(), 'started_at', jobs.attempted_at,
                        'worker_id', jobs.worker_id)),
        failure_reason = CASE WHEN expiry.state = 'failed' THEN expiry.error ->> 'reason' END
    FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::jsonb[])
         AS expiry(id, run_lease, state, delay_s, error)
    WHERE jobs.id = expiry.id
      AND jobs.run_lease = expiry.run_lease
      AND jobs.state::text = CASE WHEN $6::text = 'callback_deadline'
                                  THEN 'waiting_external' ELSE 'running' END
      AND CASE $6::text
              WHEN 'attempt_deadline' THEN jobs.attempt_deadline_at <= now()
              WHEN 'callback_deadline' THEN jobs.callback_timeout_at <= now()
              ELSE true
          END
    RETURNING jobs.id, jobs.kind
), told AS (
    -- A handler still running (or waiting in place) learns it lost the job.
    SELECT pg_notify('awa_control', 'lost:' || id) FROM expired
)
SELECT expired.*, (SELECT count(*) FROM told) AS told FROM expired;

-- name: jobs_cancel
-- Cancels jobs that have not finished, whatever their state: a queued or
-- parked job at once, a running one too (its worker is told through
-- awa_control at commit; whatever the attempt writes later is refused by the
-- state guard). Returns the jobs as committed with the state each had;
-- finished or unknown ids are left out.
WITH target AS (
    SELECT id, state::text AS previous_state, attempt
    FROM awa.jobs
    WHERE id = ANY ($1::bigint[]) AND state NOT IN ('completed', 'failed', 'cancelled')
    ORDER BY id
    FOR UPDATE
), cancelled AS (
    UPDATE awa.jobs AS jobs
    SET state = 'cancelled',
        finalized_at = now(),
        worker_id = NULL,
        failure_reason = NULL,  -- an undecodable job's reason
        callback_id = NULL,
        callback_timeout_at = NULL,
        callback_config = NULL,
        -- A running attempt's entry says when it started and where; a queued
        -- job's cancellation ends no attempt, so its entry has neither.
        errors = coalesce(jobs.errors, '[]'::jsonb) || jsonb_build_array(jsonb_strip_nulls(
            jsonb_build_object(
                'attempt', target.attempt, 'type', 'Cancel', 'message', $2::text,
                'outcome', 'cancelled', 'at', now(),
                'started_at', CASE WHEN target.previous_state IN ('running', 'waiting_external')
                                   THEN jobs.attempted_at END,
                'worker_id', CASE WHEN target.previous_state = 'running'
                                  THEN jobs.worker_id END)))
    FROM target
    WHERE jobs.id = target.id
    RETURNING jobs.id, jobs.run_lease, jobs.kind, jobs.queue, jobs.state::text AS state,
              jobs.priority, jobs.attempt, jobs.max_attempts, jobs.crashes, jobs.max_crashes,
              jobs.run_at, jobs.created_at, jobs.attempted_at, jobs.finalized_at,
              jobs.args, jobs.tags, jobs.metadata, jobs.errors,
              jobs.callback_id, jobs.callback_timeout_at, jobs.schema_version,
              jobs.rate_class, jobs.partition_key, target.previous_state
), told AS (
    SELECT pg_notify('awa_control', 'cancel:' || id)
    FROM cancelled
    WHERE previous_state IN ('running', 'waiting_external')
), ended AS (
    -- client.result waiters read their job again (one notification).
    SELECT pg_notify('awa_finished', '') FROM (SELECT 1 FROM cancelled LIMIT 1) AS any_cancelled
)
SELECT cancelled.*, (SELECT count(*) FROM told) AS told, (SELECT count(*) FROM ended) AS ended
FROM cancelled ORDER BY id;

-- name: jobs_ids_by_unique_key
-- Unfinished jobs inserted with this unique key.
SELECT id FROM awa.jobs
WHERE unique_key = $1 AND state NOT IN ('completed', 'failed', 'cancelled')
ORDER BY id;

-- name: jobs_dead_letters
-- The dead-letter queue: failed jobs, newest first (by id), filtered by ids ($1),
-- queue ($2), kind ($3) and reason ($4) where given; args and metadata only
-- when $6 asks for them (see jobs_get). Then the failure reason.
SELECT id, run_lease, kind, queue, state::text AS state, priority, attempt, max_attempts,
       crashes, max_crashes, run_at, created_at, attempted_at, finalized_at,
       CASE WHEN $6::boolean THEN args END AS args, tags,
       CASE WHEN $6::boolean THEN metadata END AS metadata,
       errors, callback_id, callback_timeout_at, schema_version, rate_class, partition_key,
       failure_reason
FROM awa.jobs
WHERE failure_reason IS NOT NULL AND state = 'failed'  -- jobs_dead_letter_idx
  AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
  AND ($2::text IS NULL OR queue = $2)
  AND ($3::text IS NULL OR kind = $3)
  AND ($4::text IS NULL OR failure_reason = $4)
-- Newest job first, as jobs_list: the index's order, so a page reads only
-- its own rows (in failure order it read and sorted every dead letter:
-- 121 ms for 10 000 of them among 10 000 000 jobs).
ORDER BY id DESC
LIMIT $5;

-- name: jobs_redrive
-- Sends up to $5 dead letters with ids above $6 matching the filters (as
-- jobs_dead_letters) back to work: available now, attempts and crashes
-- reset, failure forgotten (the error history stays). A dead letter whose
-- unique key another job holds stays failed and comes back in
-- conflicted_ids, that job in holder_ids; of several in the batch needing
-- one free key, the oldest takes it. examined and last_id say how far the
-- batch got. Wakes the redriven queues.
WITH target AS (
    SELECT id, unique_key, unique_states FROM awa.jobs
    WHERE failure_reason IS NOT NULL AND state = 'failed'  -- jobs_dead_letter_idx
      AND id > $6::bigint
      AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
      AND ($2::text IS NULL OR queue = $2)
      AND ($3::text IS NULL OR kind = $3)
      AND ($4::text IS NULL OR failure_reason = $4)
    ORDER BY id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
), needing AS (
    -- Keyed dead letters that do not hold their key now but would once
    -- available: each needs the key free.
    SELECT id, unique_key FROM target
    WHERE (unique_states & awa.job_state_bit('failed')) = 0
      AND (unique_states & awa.job_state_bit('available')) <> 0
), first_per_key AS (
    SELECT DISTINCT ON (unique_key) id, unique_key FROM needing ORDER BY unique_key, id
), taken AS (
    INSERT INTO awa.job_unique_keys (unique_key, job_id)
    SELECT unique_key, id FROM first_per_key ORDER BY unique_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
), checked AS (
    -- A key held by a job this statement cannot see yet (its insert
    -- committed while the statement ran) gives no holder: that letter is
    -- moved anyway, its trigger finds the key held, and the statement fails
    -- on job_unique_keys_pkey (dead_letters.py runs it again).
    SELECT needing.id,
           CASE WHEN needing.id IN (SELECT job_id FROM taken) THEN NULL
                ELSE coalesce(
                    (SELECT holder.job_id FROM awa.job_unique_keys AS holder
                     WHERE holder.unique_key = needing.unique_key),
                    (SELECT first_per_key.id FROM first_per_key
                     WHERE first_per_key.unique_key = needing.unique_key
                       AND first_per_key.id <> needing.id)) END AS holder_id
    FROM needing
), redriven AS (
    UPDATE awa.jobs AS jobs
    SET state = 'available', attempt = 0, crashes = 0, run_at = now(), finalized_at = NULL,
        failure_reason = NULL, attempt_deadline_at = NULL, worker_id = NULL
    FROM target LEFT JOIN checked ON checked.id = target.id
    WHERE jobs.id = target.id AND checked.holder_id IS NULL
    RETURNING jobs.id, jobs.queue
), notified AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM redriven) AS q
)
SELECT (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM redriven) AS ids,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM checked
        WHERE holder_id IS NOT NULL) AS conflicted_ids,
       (SELECT coalesce(array_agg(holder_id ORDER BY id), '{}') FROM checked
        WHERE holder_id IS NOT NULL) AS holder_ids,
       (SELECT count(*) FROM target) AS examined,
       (SELECT max(id) FROM target) AS last_id,
       (SELECT count(*) FROM notified) AS notified;

-- name: jobs_purge_dead_letters
-- Deletes up to $5 dead letters matching the filters (as jobs_dead_letters)
-- that failed before $6 (NULL: any time); returns how many.
WITH purged AS (
    DELETE FROM awa.jobs
    WHERE id IN (
        SELECT id FROM awa.jobs
        WHERE failure_reason IS NOT NULL AND state = 'failed'  -- jobs_dead_letter_idx
          AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
          AND ($2::text IS NULL OR queue = $2)
          AND ($3::text IS NULL OR kind = $3)
          AND ($4::text IS NULL OR failure_reason = $4)
          AND ($6::timestamptz IS NULL OR finalized_at < $6)
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: jobs_prune
-- Retention: deletes up to $4 finished jobs older than their state's
-- retention (seconds: $1 completed, $2 cancelled, $3 failed, the failed
-- ones per queue where $7/$8 name one) among the table's pages $5 to
-- $5 + $6 - 1. No index finds finished jobs by age (any index that read
-- finalized_at would cost every completion its HOT update, see migration
-- 0012), so retention walks the table's pages in turns instead. Skips rows
-- others hold, so it never waits. Returns how many it deleted, the page to
-- start from next (the same range while it was cut short by $4, 0 once the
-- walk passes the end of the table), whether it did pass the end, and the
-- table's size in pages.
WITH overrides AS (
    SELECT queue, seconds FROM unnest($7::text[], $8::float8[]) AS o(queue, seconds)
), pruned AS (
    DELETE FROM awa.jobs
    WHERE ctid = ANY (ARRAY(
        SELECT jobs.ctid FROM awa.jobs AS jobs
        WHERE jobs.ctid >= format('(%s,0)', $5::bigint)::tid
          AND jobs.ctid < format('(%s,0)', $5::bigint + $6::bigint)::tid
          AND jobs.state IN ('completed', 'cancelled', 'failed')
          AND jobs.finalized_at < now() - CASE jobs.state
                WHEN 'completed' THEN $1::float8
                WHEN 'cancelled' THEN $2::float8
                ELSE coalesce(
                    (SELECT seconds FROM overrides WHERE overrides.queue = jobs.queue), $3::float8)
              END * interval '1 second'
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
), counted AS (
    SELECT count(*) AS pruned FROM pruned
)
SELECT counted.pruned,
       CASE WHEN counted.pruned >= $4 THEN $5::bigint
            WHEN $5::bigint + $6::bigint >= size.pages THEN 0
            ELSE $5::bigint + $6::bigint END AS next_page,
       counted.pruned < $4 AND $5::bigint + $6::bigint >= size.pages AS wrapped,
       size.pages AS table_pages
FROM counted,
     (SELECT pg_relation_size('awa.jobs') / current_setting('block_size')::bigint AS pages) AS size;

-- name: jobs_hold
-- A worker claimed a job whose fingerprint is quarantined: it goes back
-- unrun, parked as scheduled at 'infinity' (never due) with its attempt
-- given back, until release_quarantine sets it due. Guarded like every
-- attempt write.
UPDATE awa.jobs
SET state = 'scheduled', run_at = 'infinity', attempt = attempt - 1, worker_id = NULL,
    attempt_deadline_at = NULL
WHERE id = $1 AND run_lease = $2 AND state::text = 'running'
RETURNING id;

-- name: jobs_park_undecodable
-- A worker claimed a job whose arguments it cannot decode ($3, why: an
-- undecodable reason; $4, the error entry, a JSON object): it goes back
-- unrun, parked as undecodable with its attempt given back, until
-- retry_undecodable makes it available again. Guarded like every attempt
-- write.
UPDATE awa.jobs AS jobs
SET state = 'undecodable', attempt = jobs.attempt - 1, worker_id = NULL,
    attempt_deadline_at = NULL, failure_reason = $3::text,
    errors = coalesce(jobs.errors, '[]'::jsonb)
             || jsonb_build_array($4::jsonb || jsonb_build_object(
                    'at', now(), 'started_at', jobs.attempted_at,
                    'worker_id', jobs.worker_id))
WHERE jobs.id = $1 AND jobs.run_lease = $2 AND jobs.state::text = 'running'
RETURNING jobs.id;

-- name: jobs_retry_undecodable
-- Sends up to $4 undecodable jobs matching ids ($1), queue ($2) and kind
-- ($3) where given back to work: available now, their reason forgotten
-- (their error entries stay). Their attempts were given back when they were
-- parked, and they kept their unique keys. Returns how many, and wakes
-- their queues.
WITH target AS (
    SELECT id FROM awa.jobs
    WHERE failure_reason IS NOT NULL AND state = 'undecodable'  -- jobs_dead_letter_idx
      AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
      AND ($2::text IS NULL OR queue = $2)
      AND ($3::text IS NULL OR kind = $3)
    ORDER BY id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE awa.jobs AS jobs
    SET state = 'available', run_at = now(), failure_reason = NULL, worker_id = NULL
    FROM target
    WHERE jobs.id = target.id
    RETURNING jobs.queue
), notified AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM retried) AS q
)
SELECT (SELECT count(*) FROM retried) AS retried, (SELECT count(*) FROM notified) AS notified;

-- name: jobs_release
-- Gives running jobs back at shutdown: available at once, the interrupted
-- attempt not counted. Guarded like every attempt write.
WITH released AS (
    UPDATE awa.jobs AS jobs
    SET state = 'available', attempt = jobs.attempt - 1, worker_id = NULL, run_at = now(),
        callback_id = NULL, callback_timeout_at = NULL, callback_config = NULL
    FROM unnest($1::bigint[], $2::bigint[]) AS held(id, run_lease)
    WHERE jobs.id = held.id AND jobs.run_lease = held.run_lease
      AND jobs.state::text = 'running'  -- as text: see jobs_finish_batch
    RETURNING jobs.queue
), notified AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM released) AS q
)
SELECT (SELECT count(*) FROM released) AS released, (SELECT count(*) FROM notified) AS notified;

-- name: jobs_promote_due
-- Makes due scheduled and retryable jobs available (up to a bound), and
-- wakes the queues that received some. They are found in awa.job_due (see
-- migration 0013), whose rows the state change deletes.
WITH due AS (
    SELECT jobs.id FROM awa.job_due AS due
    JOIN awa.jobs AS jobs ON jobs.id = due.job_id AND jobs.run_at = due.run_at
    WHERE due.run_at <= now() AND jobs.state IN ('scheduled', 'retryable')
    ORDER BY due.run_at
    LIMIT $1
    FOR UPDATE OF jobs SKIP LOCKED
), promoted AS (
    UPDATE awa.jobs AS jobs SET state = 'available'
    FROM due WHERE jobs.id = due.id
    RETURNING jobs.queue
), notified AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM promoted) AS q
)
SELECT (SELECT count(*) FROM promoted) AS promoted, (SELECT count(*) FROM notified) AS notified;

-- name: jobs_next_due
-- Seconds until the next scheduled or retryable job is due (NULL if none).
SELECT extract(epoch FROM min(run_at) - now())::float8 AS seconds
FROM awa.job_due
WHERE run_at < 'infinity';  -- jobs held by quarantine are never due

-- name: jobs_orphaned
-- Running jobs whose worker is gone or has not heartbeated for $1 seconds,
-- found through the claims that took them (awa.claims). Attempts more than
-- $1 seconds past their deadline belong to jobs_attempts_expired (a
-- timed-out attempt, not a crash): the two sets are disjoint, so one that
-- crosses its deadline during a pass is rescued by the next pass's deadline
-- step, never as a crash. Read worker by worker, so a worker's jobs split
-- across two batches only at a batch's end (quarantine_record_crashes counts
-- each dead worker once per fingerprint).
WITH orphaned AS (
    SELECT DISTINCT unnest(claims.job_ids) AS id, claims.worker_id
    FROM awa.claims
    WHERE NOT EXISTS (
        SELECT 1 FROM awa.workers
        WHERE workers.id = claims.worker_id
          AND workers.heartbeat_at > now() - $1::float8 * interval '1 second'
    )
)
SELECT jobs.id, jobs.run_lease, jobs.attempt, jobs.max_attempts, jobs.crashes, jobs.max_crashes,
       orphaned.worker_id
FROM orphaned
JOIN awa.jobs AS jobs ON jobs.id = orphaned.id
WHERE jobs.state = 'running' AND jobs.worker_id IS NOT DISTINCT FROM orphaned.worker_id
  AND (jobs.attempt_deadline_at IS NULL
       OR jobs.attempt_deadline_at >= now() - $1::float8 * interval '1 second')
ORDER BY orphaned.worker_id, jobs.id
LIMIT $2;

-- name: jobs_summary_by_tag
-- Jobs carrying a tag, counted by kind and state (the demo's summary).
SELECT kind, state::text AS state, count(*) AS count
FROM awa.jobs
WHERE $1 = ANY (tags)
GROUP BY kind, state
ORDER BY kind, state;

-- name: jobs_running_on_worker
-- The jobs the database says worker $1 is running, found through its claims
-- (the reconciler gives back those the worker does not hold).
SELECT DISTINCT jobs.id, jobs.run_lease
FROM awa.claims
JOIN awa.jobs AS jobs ON jobs.id = ANY (claims.job_ids)
WHERE claims.worker_id = $1 AND jobs.worker_id = $1 AND jobs.state = 'running';

-- name: jobs_explain
-- What decides when job $1 runs: its row's facts, whether its queue is
-- paused, whether its fingerprint is quarantined, how many live workers
-- (heartbeat within $2 seconds) serve its queue, its queue's ceiling and
-- the jobs holding it, its partition's cap and the jobs holding that, its
-- queue's rate limit and its rate class's, each
-- with the tokens its bucket holds now (as awa.claim_v2 reckons them), and
-- how many due jobs of its
-- queue a claim takes first (at most 10 000 counted). No row: no job.
SELECT j.id, j.state::text AS state, j.queue, j.priority, j.run_at, j.attempt,
       j.callback_timeout_at, j.failure_reason, now() AS now,
       coalesce(s.paused, false) AS paused, s.paused_by,
       s.global_max_running,
       (SELECT coalesce(array_agg(h.id ORDER BY h.id), '{}') FROM awa.jobs AS h
        WHERE h.id = ANY (s.running_ids) AND h.state = 'running') AS ceiling_holders,
       j.partition_key::text AS partition_key, s.max_workers_per_partition,
       (SELECT coalesce(array_agg(h.id ORDER BY h.id), '{}')
        FROM unnest(s.partition_running_keys, s.partition_running_ids) AS r(k, id)
        JOIN awa.jobs AS h ON h.id = r.id AND h.state = 'running'
        WHERE r.k = j.partition_key) AS partition_holders,
       s.rate_per_s, s.rate_burst,
       least(s.rate_burst::float8,
             coalesce(s.rate_tokens, s.rate_burst::float8)
             + s.rate_per_s * greatest(0, extract(epoch FROM
                   clock_timestamp() - coalesce(s.rate_tokens_at, clock_timestamp()))))
           AS rate_tokens,
       j.rate_class, rc.rate_per_s AS class_rate_per_s, rc.burst AS class_burst,
       least(rc.burst::float8,
             coalesce(rc.tokens, rc.burst::float8)
             + rc.rate_per_s * greatest(0, extract(epoch FROM
                   clock_timestamp() - coalesce(rc.tokens_at, clock_timestamp()))))
           AS class_tokens,
       EXISTS (SELECT FROM awa.quarantine AS q
               WHERE q.fingerprint = awa.job_fingerprint(j.kind, j.args)
                 AND q.quarantined_at IS NOT NULL) AS quarantined,
       (SELECT count(*) FROM awa.workers AS w
        WHERE j.queue = ANY (w.queues)
          AND w.heartbeat_at > now() - $2::float8 * interval '1 second') AS live_workers,
       CASE WHEN j.state = 'available' AND j.run_at <= now() THEN
           (SELECT count(*) FROM (
                SELECT FROM awa.jobs AS a
                WHERE a.queue = j.queue AND a.state = 'available' AND a.run_at <= now()
                  AND (a.priority, a.run_at, a.id) < (j.priority, j.run_at, j.id)
                LIMIT 10000) AS ahead)
       END AS ahead
FROM awa.jobs AS j
LEFT JOIN awa.queue_settings AS s ON s.queue = j.queue
LEFT JOIN awa.rate_classes AS rc ON rc.name = j.rate_class
WHERE j.id = $1::bigint;

-- name: jobs_drain_outstanding
-- What a drain of queue $1 still waits for (spec 002): running jobs, due
-- queued ones, and retries waiting for their backoff (attempt > 0); not
-- jobs delayed by their insert that never ran (at most 100 000 counted).
SELECT count(*) FROM (
    SELECT FROM awa.jobs
    WHERE queue = $1::text
      AND (state IN ('running', 'waiting_external', 'retryable')
           OR (state IN ('available', 'scheduled') AND (run_at <= now() OR attempt > 0)))
    LIMIT 100000) AS outstanding;

-- name: jobs_queue_depths
-- For the metrics: per queue of $1, the jobs due and waiting to be claimed
-- (counted up to $2) and how long the oldest of them has waited past its
-- run_at, in seconds. Reads each lane from its hint (docs/storage.md,
-- Lanes), in the family its claims use (a fair queue's partition lanes,
-- else its whole lanes): the jobs claims have passed are not read, so the
-- cost follows the backlog, not the table. A job a rolled-back claim left
-- behind a hint is missed until the sweep finds it; when the count reaches
-- $2, the lag is that of the first $2 jobs read.
SELECT q.queue, count(due.run_at)::bigint AS depth,
       extract(epoch FROM now() - min(due.run_at))::float8 AS lag_s
FROM unnest($1::text[]) AS q(queue)
LEFT JOIN awa.queue_settings AS s ON s.queue = q.queue
LEFT JOIN LATERAL (
    SELECT j.run_at
    FROM awa.lanes AS l
    CROSS JOIN LATERAL (SELECT mv.hint_run_at, mv.hint_id
                        FROM awa.lane_moves AS mv
                        WHERE mv.lane_id = l.id
                        ORDER BY mv.seq DESC LIMIT 1) AS newest
    JOIN awa.jobs AS j
      ON j.queue = l.queue AND j.priority = l.priority
     AND (j.run_at, j.id) > (newest.hint_run_at, newest.hint_id)
     AND (l.partition_key IS NULL OR j.partition_key IS NOT DISTINCT FROM nullif(l.partition_key, ''))
    WHERE l.queue = q.queue
      AND (l.partition_key IS NOT NULL) = coalesce(s.fair, false)
      AND j.run_at <= now() AND j.state = 'available'
    LIMIT $2::integer
) AS due ON true
GROUP BY q.queue
ORDER BY q.queue;

-- name: jobs_queue_stats
-- Per queue and state: how many jobs, how many of them finished in the
-- last $1 seconds (by finalized_at: completed, failed and cancelled jobs
-- have one), and, of the available ones, the age in seconds of the oldest
-- due one. Reads the whole table: no index may name the state or
-- finalized_at, which claims and outcomes write (their updates stay HOT).
SELECT j.queue::text AS queue, j.state::text AS state, count(*) AS jobs,
       count(*) FILTER (WHERE j.finalized_at >= now() - $1::float8 * interval '1 second')
           AS finished_in_window,
       extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.state = 'available'
                                                          AND j.run_at <= now()))::float8
           AS oldest_due_s
FROM awa.jobs AS j
GROUP BY j.queue, j.state
ORDER BY 1, 2;

-- name: jobs_queue_stats_of_queue
-- jobs_queue_stats for queue $2 only, whose rows jobs_lane_idx finds. A
-- query of its own: one statement for both would be planned once for all
-- queues (a scan of the whole table) and kept for one.
SELECT j.queue::text AS queue, j.state::text AS state, count(*) AS jobs,
       count(*) FILTER (WHERE j.finalized_at >= now() - $1::float8 * interval '1 second')
           AS finished_in_window,
       extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.state = 'available'
                                                          AND j.run_at <= now()))::float8
           AS oldest_due_s
FROM awa.jobs AS j
WHERE j.queue = $2::text
GROUP BY j.queue, j.state
ORDER BY 1, 2;

-- name: jobs_heartbeat_with_progress
-- A worker's heartbeat ($1, as workers_heartbeat) that also writes the
-- progress its running attempts reported since the last one: $2 job ids,
-- $3 their run leases, $4 progress (JSON text), aligned. Each row is
-- guarded by its run lease and a running (or waiting in place) state, so
-- an attempt that lost its job writes nothing. A row another transaction
-- is writing (its outcome, a flush_progress, a cancel) is skipped, not
-- waited for: the beat never waits on, or deadlocks with, the completer,
-- whose outcome carries the attempt's last report anyway. Returns the
-- worker's id, or nothing if its row was removed.
WITH reported AS (
    SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::text[]) AS r(id, run_lease, progress)
), held AS (
    SELECT jobs.id FROM awa.jobs
    JOIN reported ON jobs.id = reported.id AND jobs.run_lease = reported.run_lease
    WHERE jobs.state IN ('running', 'waiting_external')
    ORDER BY jobs.id
    FOR UPDATE OF jobs SKIP LOCKED
), progressed AS (
    UPDATE awa.jobs AS jobs
    SET progress = reported.progress::jsonb
    FROM held JOIN reported ON reported.id = held.id
    WHERE jobs.id = held.id
    RETURNING jobs.id
)
UPDATE awa.workers SET heartbeat_at = now() WHERE id = $1 RETURNING id;

-- name: jobs_set_progress
-- Writes one attempt's progress now (job.flush_progress), guarded like the
-- heartbeat's; returns the id, or nothing when the attempt lost its job.
UPDATE awa.jobs SET progress = $3::jsonb
WHERE id = $1 AND run_lease = $2 AND state IN ('running', 'waiting_external')
RETURNING id;

-- name: jobs_result
-- What client.result needs of one job: its state, its result, and why it
-- failed (the last error entry's type and message) or was cancelled.
-- Read after the waiter registered (result_waiters_add).
SELECT state::text AS state, result, failure_reason,
       errors -> -1 ->> 'type' AS error_type, errors -> -1 ->> 'message' AS error_message
FROM awa.jobs
WHERE id = $1
-- Waits for a write of the row in flight: a batch that completed the job
-- before this waiter registered did not notify it (result_awaited_v1).
FOR SHARE;

-- name: jobs_activity_by_minute
-- For the dashboard's sparklines: per queue and minute, the jobs completed
-- and failed for good from minute $1 (truncated, timestamptz) on, by
-- finalized_at. Reads the whole table, as jobs_queue_stats does: no index
-- may name finalized_at or the state, which outcomes write (their updates
-- stay HOT); the filter keeps only the last hour's rows for the grouping.
SELECT j.queue::text AS queue, date_trunc('minute', j.finalized_at) AS minute,
       count(*) FILTER (WHERE j.state = 'completed') AS completed,
       count(*) FILTER (WHERE j.state = 'failed') AS failed
FROM awa.jobs AS j
WHERE j.finalized_at >= $1::timestamptz
  AND j.state IN ('completed', 'failed')
GROUP BY 1, 2
ORDER BY 1, 2;
