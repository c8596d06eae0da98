-- berth store, version 8: a box's record can be changed after creation (issue 12).

-- Key/value labels for the tenant's own bookkeeping and list filters: a JSON object of
-- strings.
ALTER TABLE boxes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
-- Variables for the box's processes (exec, terminals, the harness), not secrets: a JSON
-- object of strings, in plain text.
ALTER TABLE boxes ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
-- Limits changed while the box may have processes: its next start applies them (all three
-- or none). NULL: nothing pending.
ALTER TABLE boxes ADD COLUMN pending_memory_mib INTEGER;
ALTER TABLE boxes ADD COLUMN pending_pids INTEGER;
ALTER TABLE boxes ADD COLUMN pending_cpus REAL;
