-- berth store, version 2: durable messages, the per-box event log, idle timeout, boot token.

-- Seconds without activity before the box is reclaimed.
ALTER TABLE boxes ADD COLUMN idle_timeout_s INTEGER NOT NULL DEFAULT 300;
-- The guest channel's boot token while the box runs (NULL when stopped), so a restarted
-- daemon can reattach to a box that outlived it. The data directory is 0700 root.
ALTER TABLE boxes ADD COLUMN boot_token TEXT;
-- The guest event journal's seq stored so far (guest events up to it are in `events`).
ALTER TABLE boxes ADD COLUMN event_cursor INTEGER NOT NULL DEFAULT 0;

-- Accepted messages: committed (fsync'd) before the API answers 202, delivered in seq order.
CREATE TABLE messages (
    box_id        TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    id            TEXT NOT NULL,
    content       TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('queued', 'delivered')),
    created_at    TEXT NOT NULL,
    delivered_at  TEXT,
    PRIMARY KEY (box_id, seq),
    UNIQUE (box_id, id)
) WITHOUT ROWID;
CREATE INDEX messages_queued ON messages (box_id, seq) WHERE state = 'queued';

-- Every harness event and box state change, numbered per box from 1 with no gaps.
CREATE TABLE events (
    box_id      TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (box_id, seq)
) WITHOUT ROWID;
