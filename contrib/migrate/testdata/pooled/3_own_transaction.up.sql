-- A migration that brings its own transaction: its COMMIT ends the migration's transaction on
-- the driver's connection, not the holding's.
BEGIN;
INSERT INTO applied (version) VALUES (3);
INSERT INTO own_tx (app, advisory_locks) SELECT current_setting('application_name'),
	(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid());
COMMIT;
