-- PostgreSQL twin of ../0001_init.sql: INTEGER -> BIGINT, REAL -> DOUBLE PRECISION; api_keys gets a `rowid` identity column (the code orders by SQLite's implicit rowid); CHECKs named so later migrations can drop them.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

-- Keys are stored as the SHA-256 hex of the plaintext; the plaintext is shown once.
CREATE TABLE api_keys (
    key_hash    TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    is_admin    BIGINT NOT NULL DEFAULT 0
                CONSTRAINT api_keys_is_admin_check CHECK (is_admin IN (0, 1)),
    created_at  TEXT NOT NULL,
    -- Stands in for SQLite's implicit rowid: `ORDER BY rowid` (insertion order) works on both.
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY
);

CREATE TABLE boxes (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    name          TEXT NOT NULL,
    template      TEXT NOT NULL,
    -- Named: 0014 replaces it (adds 'snapshotted').
    state         TEXT NOT NULL
                  CONSTRAINT boxes_state_check
                  CHECK (state IN ('stopped', 'starting', 'running', 'stopping', 'paused', 'failed')),
    state_reason  TEXT,
    memory_mib    BIGINT NOT NULL,
    pids          BIGINT NOT NULL,
    cpus          DOUBLE PRECISION NOT NULL,
    -- Stable per box and never reused: the runtime maps it to a host uid range.
    id_slot       BIGINT UNIQUE NOT NULL,
    -- Bumped by every state change; updates apply only to the generation they read.
    generation    BIGINT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    -- Postgres names it boxes_tenant_id_name_key: the store recognises a taken name by it.
    UNIQUE (tenant_id, name)
);

-- Monotonic counters (never decremented, so a deleted box's id slot is never handed out again).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('id_slot', 0);
