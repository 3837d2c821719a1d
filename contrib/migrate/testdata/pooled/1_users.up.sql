CREATE TABLE users (user_id serial PRIMARY KEY, email text);
INSERT INTO applied (version) VALUES (1);
