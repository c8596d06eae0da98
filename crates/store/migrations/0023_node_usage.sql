-- berth store, version 23 (issue 24): what a node says it uses, renewed with its lease, so
-- placement weighs what runs outside berth's own accounting (the host's own processes, a
-- box using less than its limit).

ALTER TABLE nodes ADD COLUMN used_cpus REAL NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN used_memory_mib INTEGER NOT NULL DEFAULT 0;
