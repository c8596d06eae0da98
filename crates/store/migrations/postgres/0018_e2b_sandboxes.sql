-- PostgreSQL twin of ../0018_e2b_sandboxes.sql: INTEGER -> BIGINT (0/1 flags stay BIGINT with their CHECKs, named explicitly).

CREATE TABLE e2b_sandboxes (
    box_id                 TEXT PRIMARY KEY REFERENCES boxes(id) ON DELETE CASCADE,
    tenant_id              TEXT NOT NULL REFERENCES tenants(id),
    sandbox_id             TEXT NOT NULL UNIQUE,
    template_id            TEXT NOT NULL,
    metadata               TEXT NOT NULL,
    started_at_ms          BIGINT NOT NULL,
    end_at_ms              BIGINT NOT NULL,
    timeout_armed          BIGINT NOT NULL
        CONSTRAINT e2b_sandboxes_timeout_armed_check CHECK (timeout_armed IN (0, 1)),
    auto_pause             BIGINT NOT NULL
        CONSTRAINT e2b_sandboxes_auto_pause_check CHECK (auto_pause IN (0, 1)),
    auto_pause_memory      BIGINT NOT NULL
        CONSTRAINT e2b_sandboxes_auto_pause_memory_check CHECK (auto_pause_memory IN (0, 1)),
    secure                 BIGINT NOT NULL
        CONSTRAINT e2b_sandboxes_secure_check CHECK (secure IN (0, 1)),
    allow_internet_access  BIGINT
        CONSTRAINT e2b_sandboxes_allow_internet_access_check CHECK (allow_internet_access IN (0, 1)),
    idempotency_key        TEXT,
    request_hash           TEXT,
    -- NULL keys are distinct, as in SQLite (Postgres' default, NULLS DISTINCT).
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX e2b_sandboxes_tenant ON e2b_sandboxes (tenant_id);
CREATE INDEX e2b_sandboxes_deadline ON e2b_sandboxes (end_at_ms) WHERE timeout_armed = 1;
