-- awa schema, version 29: which job a follow-up followed.
--
-- parent_id: the job whose transition inserted this one (an on_*_enqueue
-- spec's follow-up, or one its handler staged), so that a job's page lists
-- its follow-ups and a follow-up's names its origin. The insert writes it
-- once; no claim and no outcome writes it, so the index below leaves their
-- updates HOT (tests/queries/test_hot_path_indexes.py), and it is partial:
-- jobs inserted any other way (parent_id NULL) are not in it, so plain
-- inserts maintain nothing more. No foreign key: retention may delete the
-- parent first.

ALTER TABLE awa.jobs ADD COLUMN parent_id bigint;

CREATE INDEX jobs_parent_idx ON awa.jobs (parent_id) WHERE parent_id IS NOT NULL;
