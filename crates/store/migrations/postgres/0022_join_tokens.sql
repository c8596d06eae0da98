-- PostgreSQL twin of ../0022_join_tokens.sql: BIGINT for INTEGER.

CREATE TABLE join_tokens (
    id                 TEXT PRIMARY KEY,
    secret_sha256      TEXT NOT NULL,
    uses_left          BIGINT NOT NULL,
    expires_ms         BIGINT NOT NULL,
    created_at         TEXT NOT NULL
);
