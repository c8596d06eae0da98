-- PostgreSQL twin of ../0002_messages_events.sql: INTEGER -> BIGINT; `WITHOUT ROWID` dropped (SQLite storage option; a Postgres table has no rowid anyway).

ALTER TABLE boxes ADD COLUMN idle_timeout_s BIGINT NOT NULL DEFAULT 300;
ALTER TABLE boxes ADD COLUMN boot_token TEXT;
ALTER TABLE boxes ADD COLUMN event_cursor BIGINT NOT NULL DEFAULT 0;

CREATE TABLE messages (
    box_id        TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    id            TEXT NOT NULL,
    content       TEXT NOT NULL,
    state         TEXT NOT NULL
                  CONSTRAINT messages_state_check CHECK (state IN ('queued', 'delivered')),
    created_at    TEXT NOT NULL,
    delivered_at  TEXT,
    PRIMARY KEY (box_id, seq),
    UNIQUE (box_id, id)
);
CREATE INDEX messages_queued ON messages (box_id, seq) WHERE state = 'queued';

CREATE TABLE events (
    box_id      TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    type        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (box_id, seq)
);
