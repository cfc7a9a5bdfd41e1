-- name: rate_classes_configure
-- Sets rate class $1 to $2 tokens a second with a burst of $3; a class set
-- again keeps the tokens its bucket holds (up to the new burst). Returns it.
INSERT INTO awa.rate_classes AS rc (name, rate_per_s, burst, updated_at)
VALUES ($1::text, $2::float8, $3::integer, now())
ON CONFLICT (name) DO UPDATE SET
    rate_per_s = excluded.rate_per_s,
    burst = excluded.burst,
    updated_at = now()
RETURNING name, rate_per_s, burst, updated_at;

-- name: rate_classes_delete
-- Removes rate class $1 (its jobs are then limited by nothing); returns
-- whether it existed.
DELETE FROM awa.rate_classes WHERE name = $1::text
RETURNING name;

-- name: rate_classes_list
-- Every rate class, by name.
SELECT name, rate_per_s, burst, updated_at
FROM awa.rate_classes
ORDER BY name;

-- name: rate_classes_announce
-- Tells every worker on awa_control that the rate classes changed (they
-- reread whether any is configured; claims check classes only then).
SELECT pg_notify('awa_control', 'queues:*');
