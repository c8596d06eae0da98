-- berth store, version 6 (issue 11): tenant quotas, listable and revocable API keys, id
-- slots handed out again once a deleted box's files are gone.

-- A tenant's limits, set by the admin; NULL: no limit.
ALTER TABLE tenants ADD COLUMN max_boxes INTEGER;
ALTER TABLE tenants ADD COLUMN max_running INTEGER;
-- The sum of its boxes' memory limits, and of their volume sizes.
ALTER TABLE tenants ADD COLUMN max_memory_mib INTEGER;
ALTER TABLE tenants ADD COLUMN max_disk_mib INTEGER;

-- A key's public handle ('key_' + the first 16 hex characters of its hash: names it in
-- listings and revocation without revealing it), the first characters of its plaintext
-- (NULL for keys made before this version), and when it was last used (updated at most
-- once a minute).
ALTER TABLE api_keys ADD COLUMN id TEXT;
ALTER TABLE api_keys ADD COLUMN prefix TEXT;
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
UPDATE api_keys SET id = 'key_' || substr(key_hash, 1, 16);
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

-- A new box takes the lowest id slot no box holds (a box's row, and so its slot, goes only
-- after its files, mounts and processes are gone): the counter is no longer used.
DROP TABLE counters;
