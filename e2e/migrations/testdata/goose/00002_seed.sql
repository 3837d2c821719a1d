-- +goose Up
SELECT work_begin(2);
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 1000) g;
SELECT work_end(2);
