-- awa schema, version 16: a worker that dies counts one crash against each
-- fingerprint it held, not one per job.
--
-- A worker holds many jobs at once (its slots and the jobs it prefetched),
-- and jobs of one kind often share their arguments. Counting every rescued
-- job as a crash quarantined such a fingerprint after one kill -9 of a
-- worker that held three of them, whatever had killed it. The rescue now
-- passes the worker that held each job, and awa.quarantine keeps the last
-- worker counted for a fingerprint, so a worker whose jobs the rescue reads
-- in two batches still counts once
-- (tests/acceptance/test_quarantine.py).

ALTER TABLE awa.quarantine ADD COLUMN last_worker_id bigint;
