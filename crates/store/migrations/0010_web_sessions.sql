-- berth store, version 10 (issue 13): browser sign-ins to the web app, and the one-time
-- pairing codes that open them. Only SHA-256 hashes of codes and tokens are stored.

-- A browser signed in as a tenant (never as the admin), until revoked or unused for 30 days.
CREATE TABLE web_sessions (
    -- 'ws_' + 16 random hex characters: names the session in listings and revocation.
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    token_hash    TEXT NOT NULL UNIQUE,
    -- What the person called the device, or what its User-Agent says (64 chars at most).
    device        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    -- Written at most once a minute per session.
    last_used_at  TEXT NOT NULL
);
CREATE INDEX web_sessions_tenant ON web_sessions (tenant_id, last_used_at);

-- A pairing code: one use, until it expires.
CREATE TABLE web_pairings (
    code_hash   TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX web_pairings_tenant ON web_pairings (tenant_id, created_at);
