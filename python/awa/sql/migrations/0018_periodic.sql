-- awa schema, version 18: periodic jobs (client.periodic).
--
-- One row per schedule. The maintenance leader upserts the schedules its
-- code registers, retires those it no longer registers (retired_at: never
-- fired again), and enqueues each due fire time in one transaction with a
-- compare-and-set on next_fire_at, so a fire time is enqueued once across
-- the fleet through restarts and leader changes
-- (tests/acceptance/test_periodic.py).

CREATE TABLE awa.periodic (
    name               text PRIMARY KEY
                       CONSTRAINT periodic_name_length CHECK (length(name) BETWEEN 1 AND 200),
    cron               text NOT NULL,
    timezone           text NOT NULL,
    kind               text NOT NULL,
    args               jsonb NOT NULL,
    options            jsonb NOT NULL,
    missed_fire_policy text NOT NULL
                       CONSTRAINT periodic_missed_fire_policy
                       CHECK (missed_fire_policy IN ('coalesce', 'catch_up', 'skip')),
    paused             boolean NOT NULL DEFAULT false,
    retired_at         timestamptz,
    last_fire_at       timestamptz,
    next_fire_at       timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
