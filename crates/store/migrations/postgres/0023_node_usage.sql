-- PostgreSQL twin of ../0023_node_usage.sql.

ALTER TABLE nodes ADD COLUMN used_cpus DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN used_memory_mib BIGINT NOT NULL DEFAULT 0;
