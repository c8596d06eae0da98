-- berth store, version 16 (issue 20): the per-hour limit of a box's own wakeups counts the
-- slots they fire, not only the wakeups made (32 crons made once fired every minute, about
-- 1,900 turns an hour). A slot of a box-made wakeup past the limit is skipped, not queued:
-- the wakeup moves on to its next slot and counts it in `skipped`.

ALTER TABLE wakeups ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;

-- The slots of box-made wakeups fired within the last hour, and the skips the box's log was
-- told of (older rows are deleted as slots come): the limit counts the fired ones; a skip
-- is told at most once an hour (the others are only counted in `skipped`), so skips cannot
-- push the box's own events out of its bounded log. At most the limit plus one row a box.
CREATE TABLE wakeup_box_slots (
    box_id   TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    -- When the scheduler reached the slot, Unix milliseconds.
    at_ms    INTEGER NOT NULL,
    outcome  TEXT NOT NULL CHECK (outcome IN ('fired', 'skip_told'))
);
CREATE INDEX wakeup_box_slots_box ON wakeup_box_slots (box_id, at_ms);
