-- berth store, version 7: a box's event log is bounded in bytes and age (issue 11). Old
-- events are pruned from the front of the log and the newest is always kept, so the kept
-- events are the seqs after `event_pruned_through` up to MAX(seq), and no seq is reused.

-- The newest seq pruned (0: none yet): a reader asking from before it is told what it missed.
ALTER TABLE boxes ADD COLUMN event_pruned_through INTEGER NOT NULL DEFAULT 0;
-- The bytes of the box's kept events (their `bytes` summed), checked against the budget.
ALTER TABLE boxes ADD COLUMN event_bytes INTEGER NOT NULL DEFAULT 0;
-- An event's size: the bytes of its type and data (bounds pages and the budget).
ALTER TABLE events ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;

UPDATE events SET bytes = length(CAST(type AS BLOB)) + length(CAST(data AS BLOB));
UPDATE boxes SET
    event_bytes = (SELECT COALESCE(SUM(bytes), 0) FROM events WHERE events.box_id = boxes.id);
