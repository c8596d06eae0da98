-- PostgreSQL twin of ../0016_wakeup_box_slots.sql: INTEGER -> BIGINT; CHECK named explicitly.

ALTER TABLE wakeups ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;

CREATE TABLE wakeup_box_slots (
    box_id   TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    at_ms    BIGINT NOT NULL,
    outcome  TEXT NOT NULL
             CONSTRAINT wakeup_box_slots_outcome_check CHECK (outcome IN ('fired', 'skip_told'))
);
CREATE INDEX wakeup_box_slots_box ON wakeup_box_slots (box_id, at_ms);
