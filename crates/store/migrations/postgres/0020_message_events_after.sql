-- PostgreSQL twin of ../0020_message_events_after.sql: INTEGER -> BIGINT.

ALTER TABLE messages ADD COLUMN events_after BIGINT;
