-- PostgreSQL twin of ../0013_warm_pool.sql: INSERT OR IGNORE -> INSERT ... ON CONFLICT DO NOTHING; strftime('%Y-%m-%dT%H:%M:%SZ', 'now') -> to_char(now() AT TIME ZONE 'UTC', ...).

INSERT INTO tenants (id, name, created_at)
    VALUES ('tn_warmpoolwarmpoolwarm', '(warm pool)',
            to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
    ON CONFLICT DO NOTHING;
