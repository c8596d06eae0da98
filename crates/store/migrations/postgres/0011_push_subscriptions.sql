-- PostgreSQL twin of ../0011_push_subscriptions.sql: push_subscriptions gets a `rowid` identity column (the listing orders by SQLite's implicit rowid).

CREATE TABLE push_subscriptions (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    endpoint    TEXT NOT NULL,
    p256dh      TEXT NOT NULL,
    auth        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    -- Stands in for SQLite's implicit rowid (`ORDER BY created_at, rowid`).
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY,
    UNIQUE (tenant_id, endpoint)
);
