-- PostgreSQL twin of ../0014_sleep_ladder.sql: SQLite's table rebuild (new table, copy, drop, rename) becomes ALTER TABLE in place; same columns, order and constraint names (boxes_tenant_id_name_key kept).

-- `idle_timeout_s` becomes `stop_after_s` (its NOT NULL DEFAULT 300 and position stay).
ALTER TABLE boxes RENAME COLUMN idle_timeout_s TO stop_after_s;

-- A box may be `snapshotted`.
ALTER TABLE boxes DROP CONSTRAINT boxes_state_check;
ALTER TABLE boxes ADD CONSTRAINT boxes_state_check
    CHECK (state IN ('stopped', 'starting', 'running', 'stopping', 'paused',
                     'snapshotted', 'failed'));

-- The rest of the ladder; existing boxes get the defaults, as SQLite's copy leaves them.
ALTER TABLE boxes ADD COLUMN pause_after_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boxes ADD COLUMN snapshot_after_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boxes ADD COLUMN auto_resume BIGINT NOT NULL DEFAULT 1
    CONSTRAINT boxes_auto_resume_check CHECK (auto_resume IN (0, 1));
