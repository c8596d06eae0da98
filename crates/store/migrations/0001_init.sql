-- berth store, version 1: tenants, API keys (hashed), boxes.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

-- Keys are stored as the SHA-256 hex of the plaintext; the plaintext is shown once.
CREATE TABLE api_keys (
    key_hash    TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    is_admin    INTEGER NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    created_at  TEXT NOT NULL
);

CREATE TABLE boxes (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    name          TEXT NOT NULL,
    template      TEXT NOT NULL,
    state         TEXT NOT NULL
                  CHECK (state IN ('stopped', 'starting', 'running', 'stopping', 'paused', 'failed')),
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
    UNIQUE (tenant_id, name)
);

-- Monotonic counters (never decremented, so a deleted box's id slot is never handed out again).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('id_slot', 0);
