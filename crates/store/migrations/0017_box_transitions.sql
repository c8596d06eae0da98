-- What the last failed transition of a box was (JSON: step, cause, hint), and how its last
-- successful boot went (JSON: total and per-phase timings). NULL on boxes from before,
-- which read as "no failure recorded" and "no boot measured".
ALTER TABLE boxes ADD COLUMN failure TEXT;
ALTER TABLE boxes ADD COLUMN last_boot TEXT;
