-- berth store, version 13 (issue 14): warm pools. A template's pool boxes belong to this
-- reserved tenant until a create claims one and moves it to the caller's tenant. Its name
-- is no tenant name (they are DNS labels), so no one can create or name it; the store
-- leaves it out of tenant lookups and listings, so no key can be made for it and no quota
-- set on it (it has none: pool boxes count against nobody's).
INSERT OR IGNORE INTO tenants (id, name, created_at)
    VALUES ('tn_warmpoolwarmpoolwarm', '(warm pool)', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
