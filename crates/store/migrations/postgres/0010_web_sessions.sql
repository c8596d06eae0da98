-- PostgreSQL twin of ../0010_web_sessions.sql: INTEGER -> BIGINT; web_sessions and web_pairings get a `rowid` identity column (their queries order by SQLite's implicit rowid).

CREATE TABLE web_sessions (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    token_hash    TEXT NOT NULL UNIQUE,
    device        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    last_used_at  TEXT NOT NULL,
    -- Stands in for SQLite's implicit rowid (`ORDER BY ..., s.rowid DESC`).
    rowid         BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX web_sessions_tenant ON web_sessions (tenant_id, last_used_at);

CREATE TABLE web_pairings (
    code_hash   TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used        BIGINT NOT NULL DEFAULT 0,
    -- Stands in for SQLite's implicit rowid (`ORDER BY created_at DESC, rowid DESC`).
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX web_pairings_tenant ON web_pairings (tenant_id, created_at);
