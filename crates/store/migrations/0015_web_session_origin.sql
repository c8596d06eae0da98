-- berth store, version 15 (issue 20): what opened each browser session, and which sessions
-- still use the cookie's old name.
--
-- A session opened with an API key ends when that key is revoked (`api_key_id`). One
-- opened before this version is of unknown origin: it ends when any key of its tenant is
-- revoked, as it may have been opened with that key.
--
-- The session cookie is now `__Host-berth_session` (host-only, `Path=/`, `Secure`), which
-- a box's app on a sibling host cannot set. The old name, `berth_session`, is accepted
-- only for sessions made before this version (`legacy_cookie = 1`), so a browser signed in
-- before the upgrade stays signed in; the flag is cleared once the browser shows the new
-- name, and a session made later is never accepted under the old one.

ALTER TABLE web_sessions ADD COLUMN opened_with TEXT NOT NULL DEFAULT 'unknown'
    CHECK (opened_with IN ('pairing', 'api_key', 'unknown'));
-- The key that opened it (`opened_with = 'api_key'`); no reference, as a revoked key's
-- row may go while this one is being ended.
ALTER TABLE web_sessions ADD COLUMN api_key_id TEXT;
ALTER TABLE web_sessions ADD COLUMN legacy_cookie INTEGER NOT NULL DEFAULT 0;
UPDATE web_sessions SET legacy_cookie = 1;
CREATE INDEX web_sessions_api_key ON web_sessions (api_key_id) WHERE api_key_id IS NOT NULL;
