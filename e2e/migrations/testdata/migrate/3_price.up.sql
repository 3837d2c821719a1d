-- The slow migration: one DDL transaction (golang-migrate sends a file as one query, which
-- PostgreSQL runs as one transaction) that takes a few seconds. The test SIGKILLs the
-- holder while it sleeps.
SELECT work_begin(3);
ALTER TABLE items ADD COLUMN price numeric NOT NULL DEFAULT 0;
SELECT pg_sleep(3);
SELECT work_end(3);
