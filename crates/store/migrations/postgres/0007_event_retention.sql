-- PostgreSQL twin of ../0007_event_retention.sql: INTEGER -> BIGINT; length(CAST(x AS BLOB)) (UTF-8 bytes) -> octet_length(convert_to(x, 'UTF8')); SUM() cast back to BIGINT.

ALTER TABLE boxes ADD COLUMN event_pruned_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boxes ADD COLUMN event_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;

-- The UTF-8 bytes of type and data, as SQLite counts them (and as the daemon does, from
-- Rust's `str::len`), whatever the database's encoding.
UPDATE events SET bytes = octet_length(convert_to(type, 'UTF8')) + octet_length(convert_to(data, 'UTF8'));
UPDATE boxes SET
    event_bytes = (SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM events WHERE events.box_id = boxes.id);
