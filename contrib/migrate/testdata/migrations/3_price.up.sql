ALTER TABLE items ADD COLUMN price numeric;
INSERT INTO applied (version) VALUES (3);
