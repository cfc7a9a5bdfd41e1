-- awa.lanes and their moves: where claims start in each queue and priority
-- (migration 0014, docs/storage.md, Lanes).

-- name: lanes_list
-- Every lane's id, queue, priority and partition (NULL: a whole lane; '':
-- the partition lane of jobs without a partition key).
SELECT id, queue, priority, partition_key FROM awa.lanes ORDER BY id;

-- name: lanes_to_sweep
-- The lanes a sweep pass has work in: when $1 (a pass from the start),
-- every lane whose hint has left the start (one still there has no job
-- behind it: a new leader's first pass, at a worker's start on a new
-- queue, swept every lane of every tenant for nothing); and always those
-- claimed from since their last sweep, with lowerings, with older moves to
-- delete, or whose clock is ahead of the database's (it went back). An
-- idle lane, of which a fair queue may have thousands, costs a pass
-- nothing more than this read.
SELECT lanes.id, lanes.queue, lanes.priority, lanes.partition_key
FROM awa.lanes
CROSS JOIN LATERAL (SELECT mv.seq, mv.hint_run_at, mv.hint_id, mv.swept_run_at, mv.swept_id,
                           mv.clock
                    FROM awa.lane_moves AS mv
                    WHERE mv.lane_id = lanes.id
                    ORDER BY mv.seq DESC LIMIT 1) AS newest
WHERE ($1::boolean AND (newest.hint_run_at, newest.hint_id) > ('-infinity', 0))
   OR (newest.swept_run_at, newest.swept_id) < (newest.hint_run_at, newest.hint_id)
   OR newest.clock > clock_timestamp() + interval '1 second'
   OR EXISTS (SELECT FROM awa.lane_lowerings AS l WHERE l.lane_id = lanes.id)
   OR EXISTS (SELECT FROM awa.lane_moves AS older
              WHERE older.lane_id = lanes.id AND older.seq < newest.seq)
ORDER BY lanes.id;

-- name: lanes_sweep
-- Sweeps lane $1 for jobs a rolled-back claim left behind its hint (walking
-- at most $3 jobs; from the lane's start when $2), and deletes its older
-- moves (awa.sweep_lane_v1). Whether it found such a job.
SELECT awa.sweep_lane_v1($1::integer, $2::boolean, $3::integer) AS left_behind;

-- name: lanes_state
-- Each lane's newest move: its hint, how far the sweep has looked and the
-- transactions it has noted, and its pending lowerings (for tests and
-- operators).
SELECT DISTINCT ON (lanes.id)
       lanes.id, lanes.queue, lanes.priority, lanes.partition_key, moves.seq, moves.hint_run_at, moves.hint_id,
       moves.swept_run_at, moves.swept_id, moves.note_xid,
       (SELECT count(*) FROM awa.lane_lowerings WHERE lane_lowerings.lane_id = lanes.id)
           AS lowerings
FROM awa.lanes
JOIN awa.lane_moves AS moves ON moves.lane_id = lanes.id
ORDER BY lanes.id, moves.seq DESC;

-- name: lanes_open
-- Opens the lanes of queues $1 that have none (at all four priorities, the
-- whole lane and the partition lane of jobs without a partition key, each
-- starting before every job); a worker does it as it starts, so its claims
-- do not (a claim that opens lanes holds them until it commits). Returns
-- how many lanes it made.
SELECT coalesce(sum(awa.open_lanes_v1(queue)), 0)::integer AS opened
FROM unnest($1::text[]) AS queue;
