-- awa schema, version 17: fleet-wide queue settings, kept in PostgreSQL so
-- every worker process and host agrees and a change applies without a
-- restart.
--
-- One row per queue that has a setting. A paused queue is not claimed from
-- by any worker (inserts go on); workers reload this table when told on
-- awa_control and at every poll interval, so a pause lost with a dropped
-- notification still applies within one poll interval
-- (tests/acceptance/test_pause.py). Queue names follow the grammar every
-- insert and worker checks (docs/flow-control.md).

CREATE TABLE awa.queue_settings (
    queue      text PRIMARY KEY
               CONSTRAINT queue_settings_queue_grammar
               CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    paused     boolean NOT NULL DEFAULT false,
    paused_at  timestamptz,
    paused_by  text,  -- who paused it (pause_queue(..., paused_by=)), while paused
    updated_at timestamptz NOT NULL DEFAULT now()
);
