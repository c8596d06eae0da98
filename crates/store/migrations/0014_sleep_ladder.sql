-- berth store, version 14: boxes sleep on a ladder (issue 14). A box may be `snapshotted`
-- (its memory saved next to its volume, no VMM running), and each box says after how many
-- idle seconds it is paused, snapshotted and stopped (0: never), and whether a call wakes a
-- paused or snapshotted box (`auto_resume`). `idle_timeout_s` becomes `stop_after_s`.
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt (the documented
-- twelve steps; the migration runs with foreign keys off, so dropping the old table
-- deletes none of the messages, events and links that name its rows).
CREATE TABLE boxes_new (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    name          TEXT NOT NULL,
    template      TEXT NOT NULL,
    state         TEXT NOT NULL
                  CHECK (state IN ('stopped', 'starting', 'running', 'stopping', 'paused',
                                   'snapshotted', 'failed')),
    state_reason  TEXT,
    memory_mib    INTEGER NOT NULL,
    pids          INTEGER NOT NULL,
    cpus          REAL NOT NULL,
    -- Stable per box and never reused: the runtime maps it to a host uid range.
    id_slot       INTEGER UNIQUE NOT NULL,
    -- Bumped by every state change; updates apply only to the generation they read.
    generation    INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    stop_after_s  INTEGER NOT NULL DEFAULT 300,
    boot_token    TEXT,
    event_cursor  INTEGER NOT NULL DEFAULT 0,
    egress        TEXT,
    runtime       TEXT NOT NULL DEFAULT 'sandbox',
    disk_mib      INTEGER,
    event_pruned_through INTEGER NOT NULL DEFAULT 0,
    event_bytes   INTEGER NOT NULL DEFAULT 0,
    labels        TEXT NOT NULL DEFAULT '{}',
    env           TEXT NOT NULL DEFAULT '{}',
    pending_memory_mib INTEGER,
    pending_pids  INTEGER,
    pending_cpus  REAL,
    pause_after_s    INTEGER NOT NULL DEFAULT 0,
    snapshot_after_s INTEGER NOT NULL DEFAULT 0,
    auto_resume   INTEGER NOT NULL DEFAULT 1 CHECK (auto_resume IN (0, 1)),
    UNIQUE (tenant_id, name)
);
INSERT INTO boxes_new (id, tenant_id, name, template, state, state_reason, memory_mib, pids,
                       cpus, id_slot, generation, created_at, updated_at, stop_after_s,
                       boot_token, event_cursor, egress, runtime, disk_mib,
                       event_pruned_through, event_bytes, labels, env, pending_memory_mib,
                       pending_pids, pending_cpus)
    SELECT id, tenant_id, name, template, state, state_reason, memory_mib, pids,
           cpus, id_slot, generation, created_at, updated_at, idle_timeout_s,
           boot_token, event_cursor, egress, runtime, disk_mib,
           event_pruned_through, event_bytes, labels, env, pending_memory_mib,
           pending_pids, pending_cpus
    FROM boxes;
DROP TABLE boxes;
ALTER TABLE boxes_new RENAME TO boxes;
