-- berth store, version 24 (issue 25): a box's volume survives its host. `durable_copy` is
-- its newest copy in the chunk store (JSON: generation, taken_at, image_bytes,
-- stored_bytes), `durable_generation` that copy's number for conditional writes (0: none
-- yet), and `volume_epoch` rises each time the box's volume is taken from a node that was
-- lost: a node whose local image is of an older epoch drops it.

ALTER TABLE boxes ADD COLUMN durable_copy TEXT;
ALTER TABLE boxes ADD COLUMN durable_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE boxes ADD COLUMN volume_epoch INTEGER NOT NULL DEFAULT 0;

-- A box's runs: one row from its start to its stop, on the node it ran on, at the volume
-- epoch it ran with. The index is the database's own guarantee that a box never runs in
-- two places at once (a lost node's box starts elsewhere only once its run is ended).
CREATE TABLE box_runs (
    box_id     TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    node_id    TEXT,
    epoch      INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    ended_at   TEXT
);
CREATE UNIQUE INDEX box_runs_open ON box_runs (box_id) WHERE ended_at IS NULL;
INSERT INTO box_runs (box_id, node_id, epoch, started_at)
    SELECT id, node_id, volume_epoch, updated_at FROM boxes
    WHERE state IN ('starting', 'running', 'paused', 'stopping');
