INSERT INTO applied (version) VALUES (4);
