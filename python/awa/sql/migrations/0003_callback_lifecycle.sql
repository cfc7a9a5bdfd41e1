-- awa schema, version 3: what a parked job's callback needs beyond its id.

-- Expressions evaluated by resolve_callback (on_complete, on_fail,
-- transform), set when the callback is registered.
ALTER TABLE awa.jobs ADD COLUMN callback_config jsonb;

-- Maintenance finds parked jobs whose callback deadline passed.
CREATE INDEX jobs_callback_timeout_idx ON awa.jobs (callback_timeout_at)
    WHERE state = 'waiting_external';
