//! The registry against real files in a temp data dir.

use std::path::{Path, PathBuf};

use berth_protocol::harness::AckMode;

use super::*;

struct Data {
    dir: tempfile::TempDir,
}

impl Data {
    fn new() -> Data {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(templates_dir(dir.path()).join("host/rootfs")).unwrap();
        Data { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = templates_dir(self.path()).join(file);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A directory to use as a layer source.
    fn layer(&self, name: &str) -> PathBuf {
        let path = self.path().join("layers").join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn load(&self) -> (TemplateRegistry, Vec<TemplateError>) {
        TemplateRegistry::load(self.path(), vec![builtin_host()])
    }
}

fn builtin_host() -> Template {
    Template {
        name: "host".into(),
        base: Base::Host,
        disk_mib: berth_runtime::DEFAULT_DISK_MIB,
        sleep: DEFAULT_SLEEP,
        limits: berth_runtime::Limits::default(),
        layers: Vec::new(),
        harness: None,
        egress: Default::default(),
        warm: 0,
        node_labels: Default::default(),
        memory: None,
        services: Vec::new(),
        origin: Origin::Builtin,
        unavailable: None,
        warnings: Vec::new(),
    }
}

fn only_error(errors: &[TemplateError]) -> &TemplateError {
    assert_eq!(errors.len(), 1, "{errors:?}");
    &errors[0]
}

#[test]
fn a_full_file_loads_with_every_key() {
    let data = Data::new();
    let layer = data.layer("harness");
    let file = data.write(
        "mine.toml",
        &format!(
            r#"name = "mine"
base = "host"
stop_after_s = 600
warm = 3
node_labels = {{ gpu = "yes" }}

[limits]
memory_mib = 1024
pids = 128
cpus = 2

[[layers]]
source = "{}"
target = "/opt/harness"

[harness]
command = ["/opt/harness/bin/agent", "--stream"]
resume_args = ["--resume", "{{session}}"]
session = "main"
env = {{ LANG = "C.UTF-8" }}
ack = "write"
max_restarts = 3
turn_timeout_s = 60
"#,
            layer.display()
        ),
    );
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let t = registry.get("mine").expect("mine loaded");
    assert_eq!(t.origin, Origin::File(file.clone()));
    assert_eq!(t.origin.to_string(), file.display().to_string());
    assert_eq!(
        (t.base.clone(), t.sleep.stop_after_s, t.warm),
        (Base::Host, 600, 3)
    );
    assert_eq!(
        (t.limits.memory_mib, t.limits.pids, t.limits.cpus),
        (1024, 128, 2.0)
    );
    assert_eq!(
        t.layers,
        [LayerSpec {
            source: layer,
            target: "/opt/harness".into()
        }]
    );
    let h = t.harness.as_ref().unwrap();
    assert_eq!(h.command, ["/opt/harness/bin/agent", "--stream"]);
    assert_eq!(h.resume_args, ["--resume", "{session}"]);
    assert_eq!(h.session.as_deref(), Some("main"));
    assert_eq!(h.env["LANG"], "C.UTF-8");
    assert_eq!(
        (h.ack, h.max_restarts, h.turn_timeout_s),
        (AckMode::Write, 3, 60)
    );
    assert_eq!(t.node_labels["gpu"], "yes");
    assert!(t.unavailable.is_none());
    let names: Vec<String> = registry.list().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["host", "mine"]);
}

#[test]
fn a_minimal_file_gets_the_documented_defaults() {
    let data = Data::new();
    data.write(
        "tiny.toml",
        "name = \"tiny\"\n[harness]\ncommand = [\"agent\"]\n",
    );
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let t = registry.get("tiny").unwrap();
    assert_eq!(t.base, Base::Host);
    assert_eq!(t.sleep, DEFAULT_SLEEP);
    assert_eq!(t.warm, 0);
    assert_eq!(t.limits, berth_runtime::Limits::default());
    let h = t.harness.as_ref().unwrap();
    assert_eq!(
        (h.ack, h.max_restarts, h.turn_timeout_s),
        (AckMode::Replay, 5, 1800)
    );
    // The protocol's own default agrees.
    let protocol: berth_protocol::harness::HarnessConfig =
        serde_json::from_str(r#"{"command":["agent"]}"#).unwrap();
    assert_eq!(&protocol, h);
}

#[test]
fn a_syntax_error_is_reported_at_its_line() {
    let data = Data::new();
    let file = data.write(
        "broken.toml",
        "name = \"broken\"\nstop_after_s = 300\n[limits\nmemory_mib = 512\n",
    );
    let (registry, errors) = data.load();
    let e = only_error(&errors);
    eprintln!("{e}");
    assert_eq!((e.file.as_path(), e.line), (file.as_path(), Some(3)));
    assert!(matches!(*e.kind, TemplateErrorKind::Syntax(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("{}:3: ", file.display())),
        "{e}"
    );
    assert!(registry.get("broken").is_none());
}

#[test]
fn an_unknown_key_is_reported_at_its_line() {
    let data = Data::new();
    data.write(
        "typo.toml",
        "name = \"typo\"\n\n[harness]\ncommand = [\"agent\"]\nresume_arg = [\"--continue\"]\n",
    );
    let (_, errors) = data.load();
    let e = only_error(&errors);
    eprintln!("{e}");
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message().contains("resume_arg"), "{e}");

    data.write("typo.toml", "name = \"typo\"\nidle_timeout = 5\n");
    let (_, errors) = data.load();
    assert_eq!(only_error(&errors).line, Some(2));
}

#[test]
fn validation_errors_point_at_the_offending_key() {
    let data = Data::new();
    let layer = data.layer("l");
    for (text, line, want) in [
        ("name = \"other\"\n", 1, "must equal the file name"),
        ("name = \"v\"\nbase = \"ubuntu\"\n", 2, "is not one of \"host\", \"minimal\""),
        ("name = \"v\"\n\nbase = \"debian:Sid\"\n", 3, "the Debian suite \"Sid\""),
        ("name = \"v\"\nbase = \"dir:rel\"\n", 2, "must be absolute"),
        ("name = \"v\"\nbase = \"tarball:/a/../b.tar\"\n", 2, "no `..`"),
        ("name = \"v\"\ndisk_mib = 10\n", 2, "`disk_mib` = 10 is out of range 64..=1048576"),
        ("name = \"v\"\n\nstop_after_s = 604801\n", 3, "`stop_after_s` = 604801 is out of range 0..=604800"),
        ("name = \"v\"\npause_after_s = 60\nstop_after_s = 30\n", 3, "`stop_after_s` (30 s) must be longer than `pause_after_s` (60 s)"),
        ("name = \"v\"\nwarm = 17\n", 2, "`warm` = 17 is out of range 0..=16"),
        ("name = \"v\"\n[limits]\npids = 1\n", 3, "limits.pids"),
        ("name = \"v\"\n[limits]\ncpus = 0.0\n", 3, "limits.cpus"),
        ("name = \"v\"\n[limits]\nmemory_mib = 70000\n", 3, "limits.memory_mib"),
        (
            "name = \"v\"\n[[layers]]\nsource = \"/nonexistent/berth\"\ntarget = \"/opt/x\"\n",
            3,
            "/nonexistent/berth",
        ),
        (
            &format!("name = \"v\"\n[[layers]]\nsource = \"{}\"\ntarget = \"/proc/x\"\n", layer.display()),
            4,
            "berth mounts itself",
        ),
        (
            &format!(
                "name = \"v\"\n[[layers]]\nsource = \"{0}\"\ntarget = \"/opt/x\"\n[[layers]]\nsource = \"{0}\"\ntarget = \"/opt/x/y\"\n",
                layer.display()
            ),
            7,
            "layers[1]",
        ),
        ("name = \"v\"\n[harness]\ncommand = []\n", 3, "harness.command"),
        ("name = \"v\"\n[harness]\ncommand = [\"a\"]\nack = \"later\"\n", 4, "\"replay\" or \"write\""),
        ("name = \"v\"\n[harness]\ncommand = [\"a\"]\nenv = { \"A=B\" = \"x\" }\n", 4, "variable name"),
        ("name = \"v\"\n[harness]\ncommand = [\"a\"]\nsession = \"\"\n", 4, "harness.session"),
        ("name = \"v\"\n[harness]\ncommand = [\"a\"]\nturn_timeout_s = 86401\n", 4, "`harness.turn_timeout_s` = 86401 is out of range 0..=86400"),
    ] {
        data.write("v.toml", text);
        let (registry, errors) = data.load();
        let e = only_error(&errors);
        eprintln!("{e}");
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(e.message().contains(want), "{text}: {e}");
        assert!(registry.get("v").is_none(), "{text}");
    }
}

#[test]
fn a_bad_file_is_skipped_and_the_good_ones_load() {
    let data = Data::new();
    data.write("good.toml", "name = \"good\"\n");
    data.write("bad.toml", "name = \"bad\"\nstop_after_s = \"soon\"\n");
    data.write("Bad_Name.toml", "name = \"Bad_Name\"\n");
    // Not templates: other extensions, hidden files, the runtime's rootfs dir.
    data.write("notes.txt", "not toml");
    data.write(".hidden.toml", "garbage");
    let (registry, errors) = data.load();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors
        .iter()
        .any(|e| e.file.ends_with("bad.toml") && e.line == Some(2)));
    assert!(errors
        .iter()
        .any(|e| matches!(*e.kind, TemplateErrorKind::BadFileName { .. })));
    let names: Vec<String> = registry.list().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["good", "host"]);
}

#[test]
fn a_file_may_not_redefine_a_builtin() {
    let data = Data::new();
    data.write("host.toml", "# mine\nname = \"host\"\nstop_after_s = 60\n");
    let (registry, errors) = data.load();
    let e = only_error(&errors);
    assert!(
        matches!(*e.kind, TemplateErrorKind::BuiltinClash { .. }),
        "{e}"
    );
    assert_eq!(e.line, Some(2));
    let host = registry.get("host").unwrap();
    assert_eq!(
        (&host.origin, host.sleep.stop_after_s),
        (&Origin::Builtin, 300)
    );
}

#[test]
fn reload_picks_up_new_files_and_drops_deleted_ones() {
    let data = Data::new();
    let a = data.write("a.toml", "name = \"a\"\n");
    let shared = SharedTemplates::new(data.load().0);
    let before = shared.current();
    assert!(shared.get("a").is_some());

    std::fs::remove_file(&a).unwrap();
    data.write("b.toml", "name = \"b\"\nstop_after_s = 42\n");
    data.write("c.toml", "name = \"c\"\nnope = 1\n");
    let (now, errors) = shared.reload();
    assert_eq!(errors.len(), 1);
    assert!(now.get("a").is_none() && now.get("c").is_none());
    assert_eq!(shared.get("b").unwrap().sleep.stop_after_s, 42);
    assert!(shared.get("host").is_some(), "built-ins survive a reload");
    // A snapshot taken before the reload is unchanged.
    assert!(before.get("a").is_some() && before.get("b").is_none());

    // A file that breaks keeps nothing of itself, not even its old version.
    data.write("b.toml", "name = \"b\"\nstop_after_s = 604801\n");
    let (now, errors) = shared.reload();
    assert_eq!(errors.len(), 2);
    assert!(now.get("b").is_none());
}

#[test]
fn unreadable_or_huge_files_are_reported_without_a_line() {
    let data = Data::new();
    let big = format!("name = \"big\"\n#{}\n", "x".repeat(MAX_FILE_BYTES as usize));
    data.write("big.toml", &big);
    std::fs::write(
        templates_dir(data.path()).join("bin.toml"),
        [0xff, 0xfe, 0x00],
    )
    .unwrap();
    let (_, errors) = data.load();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|e| e.line.is_none()));
    assert!(errors
        .iter()
        .any(|e| matches!(*e.kind, TemplateErrorKind::TooLarge { .. })));
}

#[test]
fn no_templates_dir_means_only_the_builtins() {
    let dir = tempfile::tempdir().unwrap();
    let (registry, errors) = TemplateRegistry::load(dir.path(), vec![builtin_host()]);
    assert!(errors.is_empty());
    assert_eq!(registry.list().len(), 1);
}

const EGRESS: &str = r#"name = "agent"

[harness]
command = ["agent"]
env = { MODEL = "claude" }

[egress]
allow = ["API.Anthropic.com.", "*.github.com"]

[[egress.credentials]]
name = "anthropic"
hosts = ["api.anthropic.com"]
header = "X-Api-Key"
placeholder_env = "ANTHROPIC_API_KEY"
"#;

#[test]
fn an_egress_table_loads_in_canonical_form() {
    let data = Data::new();
    data.write("agent.toml", EGRESS);
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let egress = &registry.get("agent").unwrap().egress;
    assert_eq!(egress.allow, ["api.anthropic.com", "*.github.com"]);
    assert_eq!(
        egress.credentials,
        [crate::egress::policy::CredentialSpec {
            name: "anthropic".into(),
            hosts: vec!["api.anthropic.com".into()],
            header: "x-api-key".into(),
            placeholder_env: "ANTHROPIC_API_KEY".into(),
            methods: vec![],
            paths: vec![],
        }]
    );
    assert_eq!(egress.pinned_hosts(), ["api.anthropic.com"]);
}

#[test]
fn no_egress_table_means_nothing_leaves_and_builtins_are_empty() {
    let data = Data::new();
    data.write("plain.toml", "name = \"plain\"\n");
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let plain = &registry.get("plain").unwrap().egress;
    assert!(plain.allow.is_empty() && plain.credentials.is_empty());
    let builtins = builtins(data.path());
    assert_eq!(builtins.len(), 5);
    for t in &builtins {
        assert_eq!(t.egress, Default::default(), "{}", t.name);
    }
}

#[test]
fn egress_errors_point_at_the_offending_entry() {
    let data = Data::new();
    let rule = |hosts: &str, header: &str, env: &str| {
        format!(
            "name = \"v\"\n[egress]\nallow = [\"a.test\"]\n\n[[egress.credentials]]\nname = \"k\"\nhosts = {hosts}\nheader = \"{header}\"\nplaceholder_env = \"{env}\"\n"
        )
    };
    for (text, line, want) in [
        // An entry of `allow` on its own line is reported there.
        (
            "name = \"v\"\n[egress]\nallow = [\n  \"a.test\",\n  \"b c\",\n]\n".to_owned(),
            5,
            "egress.allow[1] \"b c\"",
        ),
        ("name = \"v\"\n[egress]\nallow = [\"10.0.0.1\"]\n".into(), 3, "egress.allow[0]"),
        // Unknown keys are refused, in the table and in a rule.
        ("name = \"v\"\n[egress]\nallowed = [\"a.test\"]\n".into(), 3, "allowed"),
        (
            "name = \"v\"\n[egress]\nallow = [\"a.test\"]\n[[egress.credentials]]\nname = \"k\"\nhosts = [\"a.test\"]\nheader = \"x\"\nplaceholder_env = \"K\"\nsecret = \"sk-1\"\n".into(),
            9,
            "secret",
        ),
        (rule("[\"b.test\"]", "x-api-key", "K"), 5, "not allowed by `allow`"),
        (rule("[]", "x-api-key", "K"), 5, "names no host"),
        (rule("[\"a.test\"]", "x api", "K"), 5, "not an HTTP header name"),
        (rule("[\"a.test\"]", "x-api-key", "A=B"), 5, "placeholder_env"),
        (
            format!("{}\n[[egress.credentials]]\nname = \"j\"\nhosts = [\"a.test\"]\nheader = \"x\"\nplaceholder_env = \"K\"\n", rule("[\"a.test\"]", "x", "K")),
            11,
            "egress.credentials[1] (j)",
        ),
    ] {
        data.write("v.toml", &text);
        let (registry, errors) = data.load();
        let e = only_error(&errors);
        eprintln!("{e}");
        assert!(e.message().contains(want), "{text}: {e}");
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(registry.get("v").is_none(), "{text}");
    }
}

#[test]
fn a_placeholder_env_may_not_be_a_harness_env_key() {
    let data = Data::new();
    let text = EGRESS.replace("MODEL = \"claude\"", "ANTHROPIC_API_KEY = \"sk-real\"");
    data.write("agent.toml", &text);
    let (registry, errors) = data.load();
    let e = only_error(&errors);
    eprintln!("{e}");
    assert!(
        matches!(*e.kind, TemplateErrorKind::PlaceholderClash { ref var, .. } if var == "ANTHROPIC_API_KEY"),
        "{e}"
    );
    assert_eq!(e.line, Some(10), "{e}");
    assert!(e.message().contains("harness or a service"), "{e}");
    assert!(registry.get("agent").is_none());
    // A service's env is a program's env too.
    let text = format!(
        "{EGRESS}\n[[services]]\nname = \"db\"\ncommand = [\"db\"]\nenv = {{ ANTHROPIC_API_KEY = \"sk-real\" }}\n"
    );
    data.write("agent.toml", &text);
    let (registry, errors) = data.load();
    let e = only_error(&errors);
    assert!(
        matches!(*e.kind, TemplateErrorKind::PlaceholderClash { ref var, .. } if var == "ANTHROPIC_API_KEY"),
        "{e}"
    );
    assert!(registry.get("agent").is_none());
}

#[test]
fn image_bases_and_disk_mib_load_from_files() {
    let data = Data::new();
    data.write(
        "deb.toml",
        "name = \"deb\"\nbase = \"debian:trixie\"\ndisk_mib = 4096\n",
    );
    data.write("tree.toml", "name = \"tree\"\nbase = \"dir:/srv/tree\"\n");
    data.write(
        "tar.toml",
        "name = \"tar\"\nbase = \"tarball:/srv/root.tar.gz\"\n",
    );
    data.write("mini.toml", "name = \"mini\"\nbase = \"minimal\"\n");
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let deb = registry.get("deb").unwrap();
    assert_eq!(
        (deb.base.clone(), deb.disk_mib),
        (
            Base::Debian {
                suite: "trixie".into()
            },
            4096
        )
    );
    assert_eq!(
        registry.get("tree").unwrap().base,
        Base::Dir("/srv/tree".into())
    );
    assert_eq!(
        registry.get("tar").unwrap().base,
        Base::Tarball("/srv/root.tar.gz".into())
    );
    let mini = registry.get("mini").unwrap();
    assert_eq!(
        (mini.base.clone(), mini.disk_mib),
        (Base::Minimal, berth_runtime::DEFAULT_DISK_MIB)
    );
}

#[test]
fn credential_methods_and_paths_load_and_bad_ones_point_at_their_rule() {
    let data = Data::new();
    let rule = |scopes: &str| {
        format!(
            "name = \"v\"\n[egress]\nallow = [\"a.test\"]\n\n[[egress.credentials]]\nname = \"k\"\nhosts = [\"a.test\"]\nheader = \"x-api-key\"\nplaceholder_env = \"K\"\n{scopes}"
        )
    };
    data.write(
        "v.toml",
        &rule("methods = [\"POST\"]\npaths = [\"/v1/messages/\"]\n"),
    );
    let (registry, errors) = data.load();
    assert!(errors.is_empty(), "{errors:?}");
    let spec = &registry.get("v").unwrap().egress.credentials[0];
    assert_eq!(spec.methods, ["POST"]);
    assert_eq!(spec.paths, ["/v1/messages"]);
    for (scopes, want) in [
        ("methods = [\"post\"]\n", "method \"post\""),
        ("methods = [\"PO ST\"]\n", "method \"PO ST\""),
        ("paths = [\"v1/messages\"]\n", "must start with `/`"),
        ("paths = [\"/v1/../admin\"]\n", "path \"/v1/../admin\""),
        ("paths = [\"/v1/%2e%2e\"]\n", "path \"/v1/%2e%2e\""),
        ("paths = [\"/v1//x\"]\n", "path \"/v1//x\""),
        ("paths = [\"/v1?x=1\"]\n", "path \"/v1?x=1\""),
    ] {
        data.write("v.toml", &rule(scopes));
        let (registry, errors) = data.load();
        let e = only_error(&errors);
        assert!(e.message().contains(want), "{scopes}: {e}");
        assert!(e.message().contains("egress.credentials[0] (k)"), "{e}");
        assert_eq!(e.line, Some(5), "{scopes}: {e}");
        assert!(registry.get("v").is_none(), "{scopes}");
    }
}
