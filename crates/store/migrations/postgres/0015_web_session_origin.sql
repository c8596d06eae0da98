-- PostgreSQL twin of ../0015_web_session_origin.sql: INTEGER -> BIGINT; CHECK named explicitly.

ALTER TABLE web_sessions ADD COLUMN opened_with TEXT NOT NULL DEFAULT 'unknown'
    CONSTRAINT web_sessions_opened_with_check CHECK (opened_with IN ('pairing', 'api_key', 'unknown'));
ALTER TABLE web_sessions ADD COLUMN api_key_id TEXT;
ALTER TABLE web_sessions ADD COLUMN legacy_cookie BIGINT NOT NULL DEFAULT 0;
UPDATE web_sessions SET legacy_cookie = 1;
CREATE INDEX web_sessions_api_key ON web_sessions (api_key_id) WHERE api_key_id IS NOT NULL;
