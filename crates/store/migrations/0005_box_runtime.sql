-- berth store, version 5: which runtime a box runs on (issue 5: `sandbox` or `qemu`), fixed
-- at creation, and its own volume size. Boxes made before this ran on the sandbox.
-- disk_mib NULL: the template's `disk_mib` (or the default), looked up at each start.

ALTER TABLE boxes ADD COLUMN runtime TEXT NOT NULL DEFAULT 'sandbox';
ALTER TABLE boxes ADD COLUMN disk_mib INTEGER;
