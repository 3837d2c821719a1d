CREATE TABLE accounts (id int PRIMARY KEY);
