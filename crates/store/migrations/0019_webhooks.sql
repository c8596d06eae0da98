-- berth store, version 19 (issue 23): webhooks. A tenant registers endpoints for kinds of
-- box events; the events are queued in the transaction that stores them (so a daemon that
-- dies loses none), fanned out to one delivery per endpoint, and each delivery is retried
-- until it is answered with a 2xx or its day is over.

CREATE TABLE webhooks (
    -- 'wh_' + 16 random hex characters.
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    -- Where deliveries are POSTed (checked by the daemon: https, or an allowed origin).
    url          TEXT NOT NULL,
    -- The event names it wants, a JSON array of strings.
    events       TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    -- The signing secret, sealed like a secret (key id, nonce, ciphertext).
    key_id       TEXT NOT NULL,
    nonce        BLOB NOT NULL,
    ciphertext   BLOB NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id);

-- Box events some webhook of the box's tenant may want, queued with the event (a copy:
-- the box and its log may be gone by the time it is fanned out).
CREATE TABLE webhook_queue (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id   TEXT NOT NULL,
    box_id      TEXT NOT NULL,
    box_name    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- One event for one endpoint: its id is the `webhook-id` every attempt carries.
CREATE TABLE webhook_deliveries (
    -- 'msg_' + 24 random hex characters.
    id               TEXT PRIMARY KEY,
    webhook_id       TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    tenant_id        TEXT NOT NULL,
    event            TEXT NOT NULL,
    -- The JSON body, the same on every attempt.
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    -- Unix milliseconds: retries may be seconds apart.
    next_attempt_ms  INTEGER NOT NULL,
    last_attempt_at  TEXT,
    -- The HTTP status of the last attempt (NULL: no answer), or why it failed.
    last_status      INTEGER,
    last_error       TEXT,
    created_at       TEXT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
