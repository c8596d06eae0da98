-- PostgreSQL twin of ../0004_box_egress.sql: identical statement (TEXT is TEXT on both).

ALTER TABLE boxes ADD COLUMN egress TEXT;
