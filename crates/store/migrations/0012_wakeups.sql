-- berth store, version 12 (issue 14): scheduled wakeups. A wakeup posts its message to its
-- box at each of its slots; `next_due_ms` is the slot not yet fired. Firing a slot posts
-- the message with an idempotency key made of the wakeup's id and the slot, then moves
-- `next_due_ms` on (or deletes the row) only if it still names that slot: a crash between
-- the two re-posts the same key, which the messages table dedupes.

CREATE TABLE wakeups (
    -- 'wk_' + 16 random hex characters.
    id           TEXT PRIMARY KEY,
    box_id       TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    message      TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('at', 'in', 'cron')),
    -- 'cron' only: the 5-field expression and the IANA time zone it is read in.
    cron         TEXT,
    tz           TEXT,
    -- The next slot, Unix milliseconds.
    next_due_ms  INTEGER NOT NULL,
    -- Slots fired so far.
    fired        INTEGER NOT NULL DEFAULT 0,
    created_by   TEXT NOT NULL CHECK (created_by IN ('api', 'box')),
    created_at   TEXT NOT NULL
);
CREATE INDEX wakeups_due ON wakeups (next_due_ms);
CREATE INDEX wakeups_box ON wakeups (box_id);

-- When each of the last hour's wakeups set from inside a box was made: the per-hour limit
-- counts these (a wakeup fired or deleted since still counts).
CREATE TABLE wakeup_box_requests (
    box_id  TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    at_ms   INTEGER NOT NULL
);
CREATE INDEX wakeup_box_requests_box ON wakeup_box_requests (box_id, at_ms);
