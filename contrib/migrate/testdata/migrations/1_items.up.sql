CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO applied (version) VALUES (1);
