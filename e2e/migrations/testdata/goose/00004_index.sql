-- +goose Up
SELECT work_begin(4);
CREATE INDEX items_by_price ON items (price);
SELECT work_end(4);
