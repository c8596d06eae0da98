-- PostgreSQL twin of ../0024_durable_copies.sql.

ALTER TABLE boxes ADD COLUMN durable_copy TEXT;
ALTER TABLE boxes ADD COLUMN durable_generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boxes ADD COLUMN volume_epoch BIGINT NOT NULL DEFAULT 0;

CREATE TABLE box_runs (
    box_id     TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    node_id    TEXT,
    epoch      BIGINT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at   TEXT
);
CREATE UNIQUE INDEX box_runs_open ON box_runs (box_id) WHERE ended_at IS NULL;
INSERT INTO box_runs (box_id, node_id, epoch, started_at)
    SELECT id, node_id, volume_epoch, updated_at FROM boxes
    WHERE state IN ('starting', 'running', 'paused', 'stopping');
