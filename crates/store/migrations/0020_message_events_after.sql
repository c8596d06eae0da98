-- berth store, version 20 (issue 23): where a message's turn starts in its box's event log.
-- The box's newest event seq when the message was stored (NULL for older messages): the
-- turn's events, its `result` among them, come after it, so a client follows the log from
-- there instead of reading it from the start.
ALTER TABLE messages ADD COLUMN events_after INTEGER;
