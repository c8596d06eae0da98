-- berth store, version 22 (issue 24): one-time join tokens. `berth cluster token` makes one;
-- a new `berth node` presents it once to have its certificate signed by the cluster CA. Only
-- the SHA-256 of the secret half is kept, so a copy of the database joins nothing. Times are
-- Unix milliseconds of the database's clock, like the leases of version 21.

CREATE TABLE join_tokens (
    -- 16 random hex characters: the part before the dot, shown in listings.
    id                 TEXT PRIMARY KEY,
    -- SHA-256 of the 64 hex characters after the dot, as hex.
    secret_sha256      TEXT NOT NULL,
    -- Joins it still allows; the row is deleted with its last use.
    uses_left          INTEGER NOT NULL,
    expires_ms         INTEGER NOT NULL,
    created_at         TEXT NOT NULL
);
