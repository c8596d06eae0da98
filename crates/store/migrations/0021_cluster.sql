-- berth store, version 21 (issue 24): the records of many hosts sharing one database.
-- Nodes (one `berth node` per machine) register and renew a lease; a box lives on one node;
-- work for a node is a row in `ops`, at most one open per box; jobs that must run once in
-- the cluster (the wakeup scheduler, the reclaim policy) hold a lease row with a term that
-- every write they make is checked against. Times are Unix milliseconds of the database's
-- clock, so hosts whose clocks disagree still agree on who holds what.

CREATE TABLE nodes (
    -- 'node_' + 16 random hex characters.
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE,
    -- host:port where the node's API answers the API tier (mutually authenticated TLS).
    address            TEXT NOT NULL,
    -- Changes at each start of the node's process: ops claimed under an older boot are lost.
    boot_id            TEXT NOT NULL,
    cpus               REAL NOT NULL,
    memory_mib         INTEGER NOT NULL,
    -- key/value labels, a JSON object (placement filters on them).
    labels             TEXT NOT NULL DEFAULT '{}',
    -- 'active' takes new boxes; 'draining' keeps its boxes and takes none.
    state              TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining')),
    lease_expires_ms   INTEGER NOT NULL,
    renewed_ms         INTEGER NOT NULL,
    registered_at      TEXT NOT NULL
);

-- The node a box lives on (NULL: the single host, or not placed yet).
ALTER TABLE boxes ADD COLUMN node_id TEXT REFERENCES nodes(id);
CREATE INDEX boxes_node ON boxes (node_id) WHERE node_id IS NOT NULL;

CREATE TABLE ops (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    box_id             TEXT NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    node_id            TEXT NOT NULL REFERENCES nodes(id),
    -- what to do: 'start', 'stop', 'delete', … (the node knows them), and its arguments.
    kind               TEXT NOT NULL,
    args               TEXT NOT NULL DEFAULT '{}',
    state              TEXT NOT NULL DEFAULT 'queued'
                       CHECK (state IN ('queued', 'claimed', 'done', 'failed')),
    -- the node's boot that claimed it
    claimed_by_boot    TEXT,
    result             TEXT,
    error              TEXT,
    created_ms         INTEGER NOT NULL,
    claimed_ms         INTEGER,
    finished_ms        INTEGER
);
-- One open op per box: a second is refused until the first is done or failed.
CREATE UNIQUE INDEX ops_one_open_per_box ON ops (box_id) WHERE state IN ('queued', 'claimed');
CREATE INDEX ops_queued ON ops (node_id, id) WHERE state = 'queued';

CREATE TABLE leases (
    name               TEXT PRIMARY KEY,
    holder             TEXT NOT NULL,
    -- Rises by one at each change of holder: the fencing token of the holder's writes.
    term               INTEGER NOT NULL,
    expires_ms         INTEGER NOT NULL
);
