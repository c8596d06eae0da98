-- PostgreSQL twin of ../0005_box_runtime.sql: INTEGER -> BIGINT.

ALTER TABLE boxes ADD COLUMN runtime TEXT NOT NULL DEFAULT 'sandbox';
ALTER TABLE boxes ADD COLUMN disk_mib BIGINT;
