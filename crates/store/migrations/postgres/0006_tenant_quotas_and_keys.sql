-- PostgreSQL twin of ../0006_tenant_quotas_and_keys.sql: INTEGER -> BIGINT; substr() and || mean the same on both, so the backfill is unchanged.

ALTER TABLE tenants ADD COLUMN max_boxes BIGINT;
ALTER TABLE tenants ADD COLUMN max_running BIGINT;
ALTER TABLE tenants ADD COLUMN max_memory_mib BIGINT;
ALTER TABLE tenants ADD COLUMN max_disk_mib BIGINT;

ALTER TABLE api_keys ADD COLUMN id TEXT;
ALTER TABLE api_keys ADD COLUMN prefix TEXT;
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
UPDATE api_keys SET id = 'key_' || substr(key_hash, 1, 16);
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

DROP TABLE counters;
