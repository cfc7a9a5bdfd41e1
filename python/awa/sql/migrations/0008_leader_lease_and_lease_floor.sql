-- awa schema, version 8: leadership by a lease row, and run leases that
-- never repeat after a server restart.

-- Who runs a fleet-wide role (the maintenance leader) and until when. A
-- leader renews its lease well before it expires; a leader that stops
-- renewing (dead, partitioned, or its event loop blocked) loses the role
-- when the lease runs out, and another worker takes it. A row rather than
-- a session advisory lock, so it works through a pooler in transaction mode
-- and lapses even while the holder's connection stays open.
CREATE TABLE awa.leaders (
    role        text PRIMARY KEY,
    worker_id   bigint NOT NULL,
    -- Bumped whenever the role changes hands, so a former leader's renewal
    -- can never extend its successor's lease.
    term        bigint NOT NULL,
    elected_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- The least run lease a claim may hand out now: the server's start time in
-- microseconds. Claims take greatest(run_lease, floor) + 1, so after a
-- restart every new lease is above any lease handed out before it, even one
-- whose asynchronously committed claim the crash forgot (a job cannot be
-- claimed twice within one microsecond).
CREATE FUNCTION awa.run_lease_floor() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint $$;
