-- berth store, version 18 (issue 22): what only the E2B API (`/e2b`, docs/e2b.md) knows of a
-- box made through it. The box itself is an ordinary box row; this row adds the sandbox id
-- the SDK knows it by, the template name it asked for, its metadata, and its lifetime (E2B's
-- timeout: at `end_at_ms` the box is deleted, or paused when `auto_pause` is set). A box has
-- at most one such row, and the row goes with the box. Boxes made before, or through berth's
-- own API, have none.
CREATE TABLE e2b_sandboxes (
    box_id                 TEXT PRIMARY KEY REFERENCES boxes(id) ON DELETE CASCADE,
    tenant_id              TEXT NOT NULL REFERENCES tenants(id),
    -- The box's name when it was made: 20 random lowercase letters and digits. Unique on
    -- the host, so the in-sandbox API (which has no API key) finds one box by it.
    sandbox_id             TEXT NOT NULL UNIQUE,
    -- As the client named it (`base`, or a berth template's name).
    template_id            TEXT NOT NULL,
    -- A JSON object of strings.
    metadata               TEXT NOT NULL,
    started_at_ms          INTEGER NOT NULL,
    end_at_ms              INTEGER NOT NULL,
    -- 1 while `end_at_ms` will act; 0 once it acted as a pause, or after a pause by hand
    -- (E2B keeps a paused sandbox until it is killed).
    timeout_armed          INTEGER NOT NULL CHECK (timeout_armed IN (0, 1)),
    auto_pause             INTEGER NOT NULL CHECK (auto_pause IN (0, 1)),
    -- With `auto_pause`: 1 keeps the processes (a pause), 0 only the disk (a stop).
    auto_pause_memory      INTEGER NOT NULL CHECK (auto_pause_memory IN (0, 1)),
    secure                 INTEGER NOT NULL CHECK (secure IN (0, 1)),
    -- NULL: not given at creation.
    allow_internet_access  INTEGER CHECK (allow_internet_access IN (0, 1)),
    -- The create request's `Idempotency-Key` and the SHA-256 of what it asked for: a
    -- retry with the same key gets this sandbox, never a second one.
    idempotency_key        TEXT,
    request_hash           TEXT,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX e2b_sandboxes_tenant ON e2b_sandboxes (tenant_id);
CREATE INDEX e2b_sandboxes_deadline ON e2b_sandboxes (end_at_ms) WHERE timeout_armed = 1;
