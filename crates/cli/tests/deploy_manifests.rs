//! The deployment manifests under `deploy/`, checked without a cluster (part
//! `deploy-validate`): every Kubernetes file, and what kustomize renders from them, passes the
//! Kubernetes API's own schemas (strict: an unknown or misspelled field fails); the Nomad
//! jobs parse as HCL. Then the settings many hosts depend on are asserted on what was parsed:
//! a privileged node on the host's network with its data on the host, two API replicas behind
//! a Service and a disruption budget, health checks on `/v1/health`, and the Postgres password
//! from a Secret or a Nomad Variable, never a literal. Each check is shown to bite: the same
//! files with one setting broken are refused.

#[path = "deploy_manifests/k8s.rs"]
mod k8s;
#[path = "deploy_manifests/nomad.rs"]
mod nomad;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use k8s::{api_container, find_mut, k8s_problems, node_container};
use nomad::nomad_problems;

/// The Kubernetes version the schemas are taken from: the oldest one the manifests promise
/// to run on (kubernetes-validate bundles 1.25 onwards).
const KUBERNETES: &str = "1.29.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace's root")
}

fn k8s_dir() -> PathBuf {
    repo().join("deploy/k8s")
}

/// The validators' Python, or `None` after skipping.
fn python() -> Option<PathBuf> {
    match berth_testkit::deploy_validate::python() {
        Ok(python) => Some(python),
        Err(why) => {
            berth_testkit::skip("deploy-validate", why);
            None
        }
    }
}

/// Runs `python` with `args`; its stdout, or a panic with what it said.
fn run_python(python: &Path, args: &[&str]) -> String {
    let out = Command::new(python).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        python.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every YAML document in `files`, as JSON (PyYAML, the validators' own reader).
fn yaml_docs(python: &Path, files: &[PathBuf]) -> Vec<Value> {
    const SCRIPT: &str = "import json, sys, yaml\n\
        json.dump([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d is not None], sys.stdout)";
    let mut args = vec!["-c", SCRIPT];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let docs: Value = serde_json::from_str(&run_python(python, &args)).unwrap();
    docs.as_array().unwrap().clone()
}

/// The files `deploy/k8s/kustomization.yaml` lists under `resources`.
fn k8s_files(python: &Path) -> Vec<PathBuf> {
    let kustomization = yaml_docs(python, &[k8s_dir().join("kustomization.yaml")]);
    let resources = kustomization[0]["resources"].as_array().unwrap();
    assert!(
        !resources.is_empty(),
        "kustomization.yaml lists no resources"
    );
    resources
        .iter()
        .map(|r| k8s_dir().join(r.as_str().unwrap()))
        .collect()
}

/// `kubernetes-validate --strict` against [`KUBERNETES`]'s schemas; panics with its findings.
fn validate(python: &Path, files: &[PathBuf]) {
    let mut args = vec![
        "-m",
        "kubernetes_validate",
        "--strict",
        "--quiet",
        "-k",
        KUBERNETES,
    ];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    run_python(python, &args);
}

/// A Nomad job file parsed by python-hcl2: strings unquoted, heredocs as plain strings, no
/// comments or block markers. Blocks are lists; a labelled block is `{label: body}`.
fn hcl(python: &Path, file: &Path) -> Value {
    const SCRIPT: &str = "import hcl2, json, sys\n\
        opts = hcl2.SerializationOptions(with_comments=False, explicit_blocks=False,\n\
            preserve_heredocs=False, strip_string_quotes=True)\n\
        json.dump(hcl2.load(open(sys.argv[1]), serialization_options=opts), sys.stdout)";
    serde_json::from_str(&run_python(python, &["-c", SCRIPT, file.to_str().unwrap()])).unwrap()
}

fn nomad_jobs(python: &Path) -> (Value, Value) {
    let dir = repo().join("deploy/nomad");
    (
        hcl(python, &dir.join("berth-node.nomad.hcl")),
        hcl(python, &dir.join("berth-api.nomad.hcl")),
    )
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1).copied())
}

/// What `who`'s `args` lack of `must_pass`: each flag, with its value where one is given.
fn flag_problems(who: &str, args: &[&str], must_pass: &[(&str, Option<&str>)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (wanted, value) in must_pass {
        match (flag(args, wanted), value) {
            (None, _) if !args.contains(wanted) => {
                problems.push(format!("{who}: args lack {wanted}: {args:?}"))
            }
            (Some(got), Some(value)) if got != *value => {
                problems.push(format!("{who}: {wanted} is {got}, not {value}"))
            }
            _ => {}
        }
    }
    problems
}

/// A URL in `text` that carries a password (`scheme://user:password@host`).
fn url_with_password(text: &str) -> Option<&str> {
    text.split_whitespace().find(|word| {
        word.split_once("://").is_some_and(|(_, rest)| {
            let authority = rest.split('/').next().unwrap_or_default();
            authority
                .rsplit_once('@')
                .is_some_and(|(userinfo, _)| userinfo.contains(':'))
        })
    })
}

#[test]
fn kubernetes_files_each_pass_the_schemas_and_carry_the_settings() {
    let Some(python) = python() else { return };
    let files = k8s_files(&python);
    validate(&python, &files);
    let docs = yaml_docs(&python, &files);
    let problems = k8s_problems(&docs);
    assert!(problems.is_empty(), "deploy/k8s:\n{}", problems.join("\n"));
}

#[test]
fn kustomize_renders_them_valid_into_the_berth_namespace_with_an_image_an_overlay_can_replace() {
    let Some(python) = python() else { return };
    let kubectl = match berth_testkit::deploy_validate::kubectl() {
        Ok(kubectl) => kubectl,
        Err(why) => {
            berth_testkit::skip("kubectl", format!("the kustomize render: {why}"));
            return;
        }
    };
    let scratch = tempfile::tempdir().unwrap();
    let render = |dir: &Path, to: &str| -> Vec<Value> {
        let out = Command::new(&kubectl)
            .arg("kustomize")
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let file = scratch.path().join(to);
        std::fs::write(&file, &out.stdout).unwrap();
        validate(&python, std::slice::from_ref(&file));
        yaml_docs(&python, &[file])
    };
    let images = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .flat_map(|d| {
                d["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c["image"].as_str().unwrap().to_owned())
            .collect()
    };

    let docs = render(&k8s_dir(), "base.yaml");
    let problems = k8s_problems(&docs);
    assert!(
        problems.is_empty(),
        "kustomize output:\n{}",
        problems.join("\n")
    );
    for doc in docs.iter().filter(|d| d["kind"] != "Namespace") {
        assert_eq!(doc["metadata"]["namespace"], "berth", "{doc}");
    }
    assert_eq!(
        images(&docs),
        ["ghcr.io/berth-dev/berth:latest"; 2],
        "both workloads run the image kustomization.yaml names"
    );

    // An operator's overlay names another image without touching the base (kustomize
    // takes a base only by a relative path).
    let overlay = scratch.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    let up = "../".repeat(overlay.components().count() - 1);
    let base = k8s_dir();
    let base = base.strip_prefix("/").unwrap().display();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n  - {up}{base}\nimages:\n  - name: ghcr.io/berth-dev/berth\n    \
             newName: registry.example/berth\n    newTag: v9.9.9\n"
        ),
    )
    .unwrap();
    let docs = render(&overlay, "overlay.yaml");
    assert_eq!(images(&docs), ["registry.example/berth:v9.9.9"; 2]);
}

/// Applies one breakage to a copy of `docs` and returns what the checks find.
fn broken(docs: &[Value], breakage: impl FnOnce(&mut Vec<Value>)) -> Vec<String> {
    let mut docs = docs.to_vec();
    breakage(&mut docs);
    k8s_problems(&docs)
}

#[test]
fn kubernetes_checks_catch_each_broken_setting() {
    let Some(python) = python() else { return };
    let docs = yaml_docs(&python, &k8s_files(&python));
    assert!(k8s_problems(&docs).is_empty());

    let caught = |what: &str, found: Vec<String>, mentions: &str| {
        assert!(
            found.iter().any(|p| p.contains(mentions)),
            "{what}: not caught (wanted a problem mentioning {mentions:?}, got {found:?})"
        );
    };
    caught(
        "one API replica",
        broken(&docs, |d| {
            find_mut(d, "Deployment", "berth-api")["spec"]["replicas"] = 1.into()
        }),
        "replicas",
    );
    caught(
        "an unprivileged node",
        broken(&docs, |d| {
            node_container(d)["securityContext"]["privileged"] = false.into()
        }),
        "not privileged",
    );
    caught(
        "a node on the pod network",
        broken(&docs, |d| {
            find_mut(d, "DaemonSet", "berth-node")["spec"]["template"]["spec"]["hostNetwork"] =
                false.into()
        }),
        "hostNetwork",
    );
    caught(
        "the password as a literal",
        broken(&docs, |d| {
            let env = node_container(d)["env"].as_array_mut().unwrap();
            let var = env
                .iter_mut()
                .find(|v| v["name"] == "BERTH_STORE_PASSWORD")
                .unwrap();
            *var = serde_json::json!({"name": "BERTH_STORE_PASSWORD", "value": "hunter2"});
        }),
        "BERTH_STORE_PASSWORD is not from a secretKeyRef",
    );
    caught(
        "the password in the store URL",
        broken(&docs, |d| {
            let args = api_container(d)["args"].as_array_mut().unwrap();
            let url = args
                .iter_mut()
                .find(|a| a.as_str().is_some_and(|a| a.starts_with("postgres://")))
                .unwrap();
            *url = "postgres://berth:hunter2@postgres:5432/berth".into();
        }),
        "a password in a URL",
    );
    caught(
        "a probe off /v1/health",
        broken(&docs, |d| {
            api_container(d)["readinessProbe"]["httpGet"]["path"] = "/healthz".into()
        }),
        "readinessProbe",
    );
    caught(
        "the node's probe on the mTLS port",
        broken(&docs, |d| {
            node_container(d)["livenessProbe"]["httpGet"]["port"] = "peer".into()
        }),
        "livenessProbe",
    );
    caught(
        "the CA's key on a node",
        broken(&docs, |d| {
            let pod = &mut find_mut(d, "DaemonSet", "berth-node")["spec"]["template"]["spec"];
            for volume in pod["volumes"].as_array_mut().unwrap() {
                if volume["name"] == "cluster-ca" {
                    volume["secret"]["items"]
                        .as_array_mut()
                        .unwrap()
                        .push(serde_json::json!({"key": "ca.key", "path": "ca.key"}));
                }
            }
        }),
        "ca.crt alone",
    );
    caught(
        "no disruption budget",
        broken(&docs, |d| d.retain(|r| r["kind"] != "PodDisruptionBudget")),
        "PodDisruptionBudget",
    );
    caught(
        "a Service selecting nothing of the API",
        broken(&docs, |d| {
            find_mut(d, "Service", "berth-api")["spec"]["selector"] =
                serde_json::json!({"app.kubernetes.io/name": "other"})
        }),
        "no Service",
    );
    caught(
        "KVM as a checked device",
        broken(&docs, |d| {
            let pod = &mut find_mut(d, "DaemonSet", "berth-node")["spec"]["template"]["spec"];
            pod["volumes"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!(
                    {"name": "kvm", "hostPath": {"path": "/dev/kvm", "type": "CharDevice"}}
                ));
        }),
        "CharDevice",
    );
}

#[test]
fn nomad_jobs_parse_and_carry_the_settings() {
    let Some(python) = python() else { return };
    let (node, api) = nomad_jobs(&python);
    let problems = nomad_problems(&node, &api);
    assert!(
        problems.is_empty(),
        "deploy/nomad:\n{}",
        problems.join("\n")
    );
}

#[test]
fn nomad_checks_catch_each_broken_setting() {
    let Some(python) = python() else { return };
    let (node, api) = nomad_jobs(&python);
    assert!(nomad_problems(&node, &api).is_empty());

    let node_task = "/job/0/berth-node/group/0/node/task/0/berth-node";
    let api_group = "/job/0/berth-api/group/0/api";
    let api_task = "/job/0/berth-api/group/0/api/task/0/berth-api";
    fn at<'a>(file: &'a mut Value, pointer: &str) -> &'a mut Value {
        file.pointer_mut(pointer)
            .unwrap_or_else(|| panic!("nothing at {pointer}"))
    }
    let caught = |what: &str, breakage: &dyn Fn(&mut Value, &mut Value), mentions: &str| {
        let (mut node, mut api) = (node.clone(), api.clone());
        breakage(&mut node, &mut api);
        let found = nomad_problems(&node, &api);
        assert!(
            found.iter().any(|p| p.contains(mentions)),
            "{what}: not caught (wanted a problem mentioning {mentions:?}, got {found:?})"
        );
    };
    caught(
        "a node job of type service",
        &|node, _| *at(node, "/job/0/berth-node/type") = "service".into(),
        "type is",
    );
    caught(
        "an unprivileged node",
        &|node, _| *at(node, &format!("{node_task}/config/0/privileged")) = false.into(),
        "not privileged",
    );
    caught(
        "a node off the host network",
        &|node, _| *at(node, &format!("{node_task}/config/0/network_mode")) = "bridge".into(),
        "network_mode",
    );
    caught(
        "a short kill_timeout",
        &|node, _| *at(node, &format!("{node_task}/kill_timeout")) = "5s".into(),
        "kill_timeout",
    );
    caught(
        "the CA's key on a node",
        &|node, _| {
            at(node, node_task)["template"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"data": "{{ with nomadVar \"nomad/jobs/berth-node\" }}{{ .ca_key }}{{ end }}"}))
        },
        "the CA's key",
    );
    caught(
        "one API replica",
        &|_, api| *at(api, &format!("{api_group}/count")) = 1.into(),
        "count is 1",
    );
    caught(
        "a check off /v1/health",
        &|_, api| *at(api, &format!("{api_group}/service/0/check/0/path")) = "/".into(),
        "/v1/health",
    );
    caught(
        "the password as a literal",
        &|_, api| {
            at(api, api_task)["env"] = serde_json::json!([{"BERTH_STORE_PASSWORD": "hunter2"}])
        },
        "literal in an env block",
    );
    caught(
        "the password in the store URL",
        &|_, api| {
            let args = at(api, &format!("{api_task}/config/0/args"))
                .as_array_mut()
                .unwrap();
            let store = args.iter().position(|a| a == "--store").unwrap() + 1;
            args[store] = "postgres://berth:hunter2@db:5432/berth".into();
        },
        "a password in a URL",
    );
}
