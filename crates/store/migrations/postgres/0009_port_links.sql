-- PostgreSQL twin of ../0009_port_links.sql: INTEGER -> BIGINT; port_links gets a `rowid` identity column (listings order by SQLite's implicit rowid).

CREATE TABLE port_links (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    box_id      TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    port        BIGINT NOT NULL
                CONSTRAINT port_links_port_check CHECK (port BETWEEN 1 AND 65535),
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    revoked_at  TEXT,
    -- Stands in for SQLite's implicit rowid: `ORDER BY created_at, rowid` works on both.
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX port_links_box ON port_links (box_id, port);

CREATE TABLE port_link_sessions (
    token_hash  TEXT PRIMARY KEY,
    link_id     TEXT NOT NULL REFERENCES port_links(id) ON DELETE CASCADE,
    expires_at  TEXT NOT NULL
);
CREATE INDEX port_link_sessions_link ON port_link_sessions (link_id);
