-- berth store, version 9 (issue 12): share links to a box's port, and the browser
-- sessions opened with them. Only SHA-256 hashes of their tokens are stored.

-- A link grants access to one port of one box until it expires or is revoked.
CREATE TABLE port_links (
    -- 'pl_' + 16 random hex characters: names the link in listings and revocation.
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    box_id      TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE INDEX port_links_box ON port_links (box_id, port);

-- A cookie given for a link: never outlives its link, and goes with it.
CREATE TABLE port_link_sessions (
    token_hash  TEXT PRIMARY KEY,
    link_id     TEXT NOT NULL REFERENCES port_links(id) ON DELETE CASCADE,
    expires_at  TEXT NOT NULL
);
CREATE INDEX port_link_sessions_link ON port_link_sessions (link_id);
