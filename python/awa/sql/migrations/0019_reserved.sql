-- awa schema, version 19: reserved.
--
-- Version 19 is the claim and queue-settings migration written on main at
-- the same time as version 20 (schema versions and undecodable jobs) on this
-- branch. Migrations are numbered without gaps, so this branch holds the
-- number with a migration that does nothing; when the two branches meet,
-- this file is deleted in favour of main's 0019.
SELECT 1;
