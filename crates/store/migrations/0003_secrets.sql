-- berth store, version 3: the secret store. Values are encrypted by the daemon (ChaCha20-
-- Poly1305, key outside the database); this table never holds a plaintext.

CREATE TABLE secrets (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    -- Which key sealed the row (hex of the first 8 bytes of the key's SHA-256): the daemon
    -- refuses to start with a key that does not match.
    key_id      TEXT NOT NULL,
    nonce       BLOB NOT NULL,
    ciphertext  BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
