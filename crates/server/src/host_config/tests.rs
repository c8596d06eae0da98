use super::*;

fn parse(text: &str) -> Result<HostConfig, HostConfigError> {
    HostConfig::parse(Path::new("berth.toml"), text)
}

#[test]
fn an_empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), HostConfig::default());
    let dir = Path::new("/var/lib/berth");
    assert_eq!(
        HostConfig::default().secrets.key_file(dir),
        dir.join("secrets.key")
    );
}

#[test]
fn reads_every_setting() {
    let config = parse(
        r#"
[egress]
resolve_overrides = { "api.example.test" = "127.0.0.1:8443", "v6.example.test" = "[::1]:443" }
extra_roots = ["/etc/berth/ca.pem"]

[secrets]
key_file = "/etc/berth/secrets.key"

[storage]
min_free_percent = 10
"#,
    )
    .unwrap();
    assert_eq!(config.storage.min_free_percent, 10.0);
    assert_eq!(
        parse("").unwrap().storage.min_free_percent,
        crate::disk_space::DEFAULT_MIN_FREE_PERCENT
    );
    for bad in ["-1", "51", "nan"] {
        let err = parse(&format!("[storage]\nmin_free_percent = {bad}\n")).unwrap_err();
        assert!(
            matches!(err, HostConfigError::MinFreeOutOfRange { .. }),
            "{bad}: {err}"
        );
    }
    assert_eq!(
        config.egress.resolve_overrides["api.example.test"],
        "127.0.0.1:8443".parse().unwrap()
    );
    assert_eq!(
        config.egress.resolve_overrides["v6.example.test"],
        "[::1]:443".parse().unwrap()
    );
    assert_eq!(
        config.egress.extra_roots,
        [PathBuf::from("/etc/berth/ca.pem")]
    );
    assert_eq!(
        config.secrets.key_file(Path::new("/d")),
        PathBuf::from("/etc/berth/secrets.key")
    );
}

#[test]
fn mistakes_name_the_line() {
    let cases = [
        (
            "[egress]\nresolve_overrides = { \"a.test\" = \"nope\" }\n",
            2,
        ),
        // An unknown key is reported at its table.
        ("\n[egress]\nallow = [\"x\"]\n", 2),
        ("\n\n[gateway]\n", 3),
    ];
    for (text, line) in cases {
        let err = parse(text).unwrap_err();
        let HostConfigError::Syntax { line: got, .. } = &err else {
            panic!("{text:?}: {err}");
        };
        assert_eq!(*got, Some(line), "{text:?}: {err}");
        assert!(
            err.to_string().starts_with(&format!("berth.toml:{line}: ")),
            "{err}"
        );
    }
}

#[test]
fn events_and_server_limits_have_defaults_and_bounds() {
    let config = parse(
        "[events]\nmax_bytes_per_box = 10485760\nmax_age_days = 7\n\
         [server]\nmax_connections = 16\nmax_streams_per_tenant = 2\n",
    )
    .unwrap();
    assert_eq!(config.events.max_bytes_per_box, 10 << 20);
    assert_eq!(config.events.max_age_days, 7);
    assert_eq!(config.events.prune_every_s, 60);
    assert_eq!(config.server.max_connections, 16);
    assert_eq!(config.server.header_timeout_s, 10);
    assert_eq!(config.server.max_streams_per_tenant, 2);
    assert!(config.warnings().is_empty());
    let defaults = parse("").unwrap();
    assert_eq!(defaults.events.max_bytes_per_box, 64 << 20);
    assert_eq!(defaults.events.max_age_days, 30);
    assert_eq!(defaults.server.max_connections, 1024);
    assert_eq!(defaults.server, ServerHostConfig::default());
    assert_eq!(defaults.server.max_streams_per_tenant, 128);
    assert_eq!(defaults.server.send_timeout_s, 90);
    assert_eq!(
        (
            defaults.terminals.ping_every_s,
            defaults.terminals.silent_limit_s
        ),
        (30, 90)
    );
    let set =
        parse("[server]\nsend_timeout_s = 5\n[terminals]\nping_every_s = 1\nsilent_limit_s = 2\n")
            .unwrap();
    assert_eq!(set.server.send_timeout_s, 5);
    assert_eq!(
        (set.terminals.ping_every_s, set.terminals.silent_limit_s),
        (1, 2)
    );
    for bad in [
        "[events]\nmax_bytes_per_box = 1000\n",
        "[server]\nmax_connections = 0\n",
        "[server]\nheader_timeout_s = 0\n",
        "[server]\nmax_streams_per_tenant = 0\n",
        "[server]\nmax_anonymous_connections_per_address = 0\n",
        "[server]\nfirst_request_timeout_s = 0\n",
        "[server]\nconnections_kept_for_others_percent = 91\n",
        "[server]\nsend_timeout_s = 0\n",
        "[terminals]\nping_every_s = 0\n",
        // Silent for no longer than between two pings: a live client would be cut.
        "[terminals]\nping_every_s = 30\nsilent_limit_s = 30\n",
    ] {
        let err = parse(bad).unwrap_err();
        assert!(
            matches!(err, HostConfigError::OutOfRange { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_old_event_stream_key_still_sets_the_stream_budget_with_a_warning() {
    let config = parse("[server]\nmax_event_streams_per_tenant = 7\n").unwrap();
    assert_eq!(config.server.max_streams_per_tenant, 7);
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("max_event_streams_per_tenant = 7") && warnings[0].contains("rename"),
        "{warnings:?}"
    );
    // The new key wins; the old one is still named.
    let both =
        parse("[server]\nmax_event_streams_per_tenant = 7\nmax_streams_per_tenant = 9\n").unwrap();
    assert_eq!(both.server.max_streams_per_tenant, 9);
    assert_eq!(both.warnings().len(), 1);
    // Out of range under its old name too.
    let err = parse("[server]\nmax_event_streams_per_tenant = 0\n").unwrap_err();
    assert!(err.to_string().contains("max_streams_per_tenant"), "{err}");
    // A misspelt key is still refused.
    let err = parse("[server]\nmax_stream_per_tenant = 9\n").unwrap_err();
    assert!(matches!(err, HostConfigError::Syntax { .. }), "{err}");
}

#[test]
fn egress_limits_have_defaults_and_bounds() {
    let defaults = parse("").unwrap().egress;
    assert_eq!(defaults.max_connections_per_box, 256);
    assert_eq!(defaults.idle_timeout_secs, 300);
    assert_eq!(defaults.audit_max_files, 4);
    let set = parse("[egress]\nmax_connections_per_box = 8\nidle_timeout_secs = 60\naudit_max_file_bytes = 1048576\naudit_max_files = 2\naudit_queue = 16\n").unwrap().egress;
    assert_eq!(
        (
            set.max_connections_per_box,
            set.idle_timeout_secs,
            set.audit_max_file_bytes,
            set.audit_max_files,
            set.audit_queue
        ),
        (8, 60, 1 << 20, 2, 16)
    );
    for bad in [
        "[egress]\nmax_connections_per_box = 0\n",
        "[egress]\nidle_timeout_secs = 0\n",
        "[egress]\naudit_max_file_bytes = 10\n",
        "[egress]\naudit_max_files = 0\n",
        "[egress]\naudit_queue = 0\n",
    ] {
        let err = parse(bad).unwrap_err();
        assert!(
            matches!(err, HostConfigError::OutOfRange { .. }),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("[egress]"), "{err}");
    }
}

#[test]
fn extra_roots_must_be_absolute() {
    let err = parse("[egress]\nextra_roots = [\"ca.pem\"]\n").unwrap_err();
    assert!(matches!(err, HostConfigError::RelativeRoot { .. }), "{err}");
}

#[test]
fn a_missing_default_file_is_fine_a_named_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        HostConfig::load_default(dir.path()).unwrap(),
        HostConfig::default()
    );
    let err = HostConfig::load(&dir.path().join("nope.toml")).unwrap_err();
    assert!(matches!(err, HostConfigError::Read { .. }), "{err}");
}

#[test]
fn overcommit_defaults_to_none_and_is_bounded() {
    assert_eq!(parse("").unwrap().storage.overcommit, 1.0);
    let config = parse("[storage]\novercommit = 4\n").unwrap();
    assert_eq!(config.storage.overcommit, 4.0);
    for bad in ["0.5", "0", "101", "nan"] {
        let err = parse(&format!("[storage]\novercommit = {bad}\n")).unwrap_err();
        assert!(
            matches!(err, HostConfigError::OvercommitOutOfRange { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn ports_settings_are_read_and_checked() {
    let path = Path::new("berth.toml");
    let config = HostConfig::parse(
        path,
        "[ports]\nbase_domain = \"boxes.example.com\"\nlisten_wait_s = 5\n",
    )
    .unwrap();
    assert_eq!(
        config.ports.base_domain.as_deref(),
        Some("boxes.example.com")
    );
    assert_eq!(config.ports.listen_wait_s, 5);
    assert_eq!(config.ports.max_connections_per_tenant, 64);
    let err = HostConfig::parse(path, "[ports]\nbase_domain = \"Example\"\n").unwrap_err();
    assert!(matches!(err, HostConfigError::BaseDomain { .. }), "{err}");
    let err = HostConfig::parse(path, "[ports]\nlisten_wait_s = 601\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("[ports] listen_wait_s must be between 0 and 600"),
        "{err}"
    );
}

#[test]
fn memory_retention_is_read_with_defaults_for_what_it_leaves_out() {
    let config = parse("[memory]\nretention = { daily_days = 7 }\n").unwrap();
    let retention = config.memory.retention;
    assert_eq!(
        (
            retention.all_days,
            retention.daily_days,
            retention.weekly_weeks
        ),
        (1, 7, 52)
    );
    let err = parse("[memory]\nretention = { hourly = 3 }\n").unwrap_err();
    assert!(err.to_string().contains("hourly"), "{err}");
}
