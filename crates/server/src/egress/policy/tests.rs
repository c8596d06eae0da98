use super::*;

fn rule(hosts: &[&str]) -> CredentialSpec {
    CredentialSpec {
        name: "anthropic".into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        header: "X-Api-Key".into(),
        placeholder_env: "ANTHROPIC_API_KEY".into(),
        methods: vec![],
        paths: vec![],
    }
}

#[test]
fn methods_and_paths_are_kept_in_normal_form() {
    let policy = EgressPolicy {
        allow: vec!["a.test".into()],
        credentials: vec![CredentialSpec {
            methods: vec!["POST".into(), "POST".into()],
            paths: vec!["/v1/messages/".into(), "/v1/messages".into()],
            ..rule(&["a.test"])
        }],
    }
    .validated()
    .unwrap();
    assert_eq!(policy.credentials[0].methods, ["POST"]);
    assert_eq!(policy.credentials[0].paths, ["/v1/messages"]);
}

#[test]
fn canonicalises_names_and_headers() {
    let policy = EgressPolicy {
        allow: vec![
            "API.Anthropic.com.".into(),
            "*.GitHub.com".into(),
            "api.anthropic.com".into(),
        ],
        credentials: vec![rule(&["api.anthropic.com."])],
    }
    .validated()
    .unwrap();
    assert_eq!(policy.allow, ["api.anthropic.com", "*.github.com"]);
    assert_eq!(policy.credentials[0].hosts, ["api.anthropic.com"]);
    assert_eq!(policy.credentials[0].header, "x-api-key");
    assert_eq!(policy.pinned_hosts(), ["api.anthropic.com"]);
    assert!(policy.allowlist().allows("x.github.com"));
}

#[test]
fn refuses_each_mistake() {
    let allow = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: Vec<(EgressPolicy, &str)> = vec![
        (
            EgressPolicy {
                allow: allow(&["*"]),
                credentials: vec![],
            },
            "allow[0]",
        ),
        (
            EgressPolicy {
                allow: allow(&["10.0.0.1"]),
                credentials: vec![],
            },
            "allow[0]",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test", "b c"]),
                credentials: vec![],
            },
            "allow[1]",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![rule(&["b.test"])],
            },
            "not allowed",
        ),
        (
            EgressPolicy {
                allow: allow(&["*.a.test"]),
                credentials: vec![rule(&["*.a.test"])],
            },
            "exact host",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![rule(&[])],
            },
            "no host",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    header: "x api".into(),
                    ..rule(&["a.test"])
                }],
            },
            "header",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    placeholder_env: "A=B".into(),
                    ..rule(&["a.test"])
                }],
            },
            "placeholder_env",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    name: "Bad Name".into(),
                    ..rule(&["a.test"])
                }],
            },
            "secret name",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![
                    rule(&["a.test"]),
                    CredentialSpec {
                        name: "other".into(),
                        ..rule(&["a.test"])
                    },
                ],
            },
            "already used",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    placeholder_env: "HTTPS_PROXY".into(),
                    ..rule(&["a.test"])
                }],
            },
            "set by berth-init",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    methods: vec!["post".into()],
                    ..rule(&["a.test"])
                }],
            },
            "method \"post\"",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    paths: vec!["/v1/../admin".into()],
                    ..rule(&["a.test"])
                }],
            },
            "path \"/v1/../admin\"",
        ),
        (
            EgressPolicy {
                allow: allow(&["a.test"]),
                credentials: vec![CredentialSpec {
                    paths: vec!["v1/messages".into()],
                    ..rule(&["a.test"])
                }],
            },
            "must start with `/`",
        ),
    ];
    for (policy, want) in cases {
        let err = policy.validated().expect_err(want).to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn long_lists_are_refused_before_any_work() {
    let many = |n: usize| {
        (0..n)
            .map(|i| format!("h{i}.example.test"))
            .collect::<Vec<_>>()
    };
    let at_most = EgressPolicy {
        allow: many(MAX_ALLOW),
        credentials: vec![],
    };
    assert!(at_most.validated().is_ok());
    let over = EgressPolicy {
        allow: many(MAX_ALLOW + 1),
        credentials: vec![],
    };
    let err = over.validated().unwrap_err();
    assert!(
        matches!(err, PolicyError::TooMany { list: "allow", .. }),
        "{err}"
    );
    let hosts = EgressPolicy {
        allow: vec!["*.example.test".into()],
        credentials: vec![CredentialSpec {
            hosts: many(MAX_RULE_HOSTS + 1),
            ..rule(&[])
        }],
    };
    let err = hosts.validated().unwrap_err();
    assert!(
        matches!(err, PolicyError::TooManyHosts { index: 0, .. }),
        "{err}"
    );
}

#[test]
fn a_wildcard_allows_a_rule_host_below_it() {
    let policy = EgressPolicy {
        allow: vec!["*.example.test".into()],
        credentials: vec![rule(&["api.example.test"])],
    };
    assert!(policy.validated().is_ok());
}
