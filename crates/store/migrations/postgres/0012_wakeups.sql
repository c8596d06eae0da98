-- PostgreSQL twin of ../0012_wakeups.sql: INTEGER -> BIGINT; wakeups gets a `rowid` identity column (due and per-box listings order by SQLite's implicit rowid).

CREATE TABLE wakeups (
    id           TEXT PRIMARY KEY,
    box_id       TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    message      TEXT NOT NULL,
    kind         TEXT NOT NULL
                 CONSTRAINT wakeups_kind_check CHECK (kind IN ('at', 'in', 'cron')),
    cron         TEXT,
    tz           TEXT,
    next_due_ms  BIGINT NOT NULL,
    fired        BIGINT NOT NULL DEFAULT 0,
    created_by   TEXT NOT NULL
                 CONSTRAINT wakeups_created_by_check CHECK (created_by IN ('api', 'box')),
    created_at   TEXT NOT NULL,
    -- Stands in for SQLite's implicit rowid (`ORDER BY next_due_ms, rowid`).
    rowid        BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX wakeups_due ON wakeups (next_due_ms);
CREATE INDEX wakeups_box ON wakeups (box_id);

CREATE TABLE wakeup_box_requests (
    box_id  TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    at_ms   BIGINT NOT NULL
);
CREATE INDEX wakeup_box_requests_box ON wakeup_box_requests (box_id, at_ms);
