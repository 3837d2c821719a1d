INSERT INTO items VALUES (1, 'one'), (2, 'two');
SELECT pg_sleep(seconds) FROM migration_sleep;
INSERT INTO applied (version) VALUES (2);
