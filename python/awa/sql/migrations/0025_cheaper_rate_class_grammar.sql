-- awa schema, version 25: the rate class grammar checked without a bounded
-- repetition. PostgreSQL's regular expressions unroll '{0,63}' into 63
-- copies of the character class, so the check cost about 2.6 µs a value
-- where '*' with a length limit costs 0.17 µs: a COPY of 20 000 jobs, each
-- with a partition key and a rate class, spent a third of its server time
-- on it (docs/benchmarks.md, "Outcomes as array literals; a cheaper rate
-- class check"). The grammar is the same: 1 to 64 characters, the first a
-- letter or digit, the others letters, digits, '.', '_' or '-'.
--
-- Adding the constraint checks the rate class of every job (a scan of
-- awa.jobs; writes to it wait until it ends, as docs/operations.md says).

ALTER DOMAIN awa.rate_class DROP CONSTRAINT rate_class_grammar;
ALTER DOMAIN awa.rate_class ADD CONSTRAINT rate_class_grammar
    CHECK (char_length(VALUE) <= 64 AND VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$');
