-- What the session that runs a migration was given: its application_name and the setting
-- PGOPTIONS carries. The sleep lets the test read the session in pg_stat_activity.
CREATE TABLE probe (app text, check_interval text, pid int);
INSERT INTO probe VALUES (current_setting('application_name'),
  current_setting('client_connection_check_interval'), pg_backend_pid());
SELECT pg_sleep(0.3);
