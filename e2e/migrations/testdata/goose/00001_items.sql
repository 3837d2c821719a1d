-- +goose Up
SELECT work_begin(1);
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
SELECT work_end(1);
