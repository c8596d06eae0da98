-- PostgreSQL twin of ../0017_box_transitions.sql: identical statements (TEXT is TEXT on both).

ALTER TABLE boxes ADD COLUMN failure TEXT;
ALTER TABLE boxes ADD COLUMN last_boot TEXT;
