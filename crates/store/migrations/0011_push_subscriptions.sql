-- berth store, version 11 (issue 13): Web Push subscriptions. A browser that allows
-- notifications gives its push service's endpoint and its message-encryption keys; the
-- daemon posts to the endpoint when a turn ends unwatched.

CREATE TABLE push_subscriptions (
    -- 'ps_' + 16 random hex characters.
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    -- The push service's URL for this browser (at most 2 KiB, checked by the daemon).
    endpoint    TEXT NOT NULL,
    -- The browser's P-256 public key (65-byte uncompressed point) and its 16-byte auth
    -- secret, base64url without padding as the browser gave them (RFC 8291).
    p256dh      TEXT NOT NULL,
    auth        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (tenant_id, endpoint)
);
