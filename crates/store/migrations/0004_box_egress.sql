-- berth store, version 4: a box's own egress policy (issue 4). JSON text, as the daemon's
-- `EgressPolicy` serialises it, already validated; NULL: the box uses its template's policy,
-- looked up at each start like the rest of the template.

ALTER TABLE boxes ADD COLUMN egress TEXT;
