//! The Kubernetes settings many hosts depend on, read from the resources kustomize renders
//! (or the files it reads): each missing or wrong one is a line in [`k8s_problems`].

use serde_json::Value;

use super::{flag_problems, strings, url_with_password};

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

pub fn find_mut<'a>(docs: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    docs.iter_mut()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// What is wrong in one workload's only container, named `name`: the flags it must pass,
/// probes on `/v1/health` at `health_port`, and secrets only by reference.
fn container_problems(
    pod: &Value,
    name: &str,
    must_pass: &[(&str, Option<&str>)],
    health_port: u64,
) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(container) = pod["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
    else {
        return vec![format!("{name}: no container named {name}")];
    };
    let args: Vec<&str> = strings(&container["command"])
        .into_iter()
        .chain(strings(&container["args"]))
        .collect();
    problems.extend(flag_problems(name, &args, must_pass));
    if let Some(url) = args.iter().find_map(|a| url_with_password(a)) {
        problems.push(format!("{name}: a password in a URL of its args: {url}"));
    }
    // Secrets only by reference: a literal `value` would sit in the manifest and the API.
    let env = container["env"].as_array().cloned().unwrap_or_default();
    for var in &env {
        let var_name = var["name"].as_str().unwrap_or_default();
        let secret = ["PASSWORD", "TOKEN", "SECRET", "KEY"]
            .iter()
            .any(|s| var_name.contains(s));
        if secret && var["valueFrom"]["secretKeyRef"].is_null() {
            problems.push(format!(
                "{name}: {var_name} is not from a secretKeyRef: {var}"
            ));
        }
    }
    let password = env.iter().find(|v| v["name"] == "BERTH_STORE_PASSWORD");
    match password.map(|v| &v["valueFrom"]["secretKeyRef"]) {
        Some(r) if r["name"] == "berth-store" && r["key"] == "password" => {}
        other => problems.push(format!(
            "{name}: BERTH_STORE_PASSWORD is not the Secret berth-store's key password: {other:?}"
        )),
    }
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        let port = match &get["port"] {
            Value::String(named) => container["ports"]
                .as_array()
                .and_then(|ports| ports.iter().find(|p| p["name"] == *named))
                .and_then(|p| p["containerPort"].as_u64()),
            number => number.as_u64(),
        };
        if get["path"] != "/v1/health" || port != Some(health_port) {
            problems.push(format!(
                "{name}: {probe} is not an httpGet of /v1/health on {health_port}: {get}"
            ));
        }
    }
    let requests = &container["resources"]["requests"];
    if requests["cpu"].is_null() || requests["memory"].is_null() {
        problems.push(format!("{name}: no cpu and memory requests"));
    }
    problems
}

/// The secret volume `pod` mounts at `mount` in container `name`: its Secret and keys, sorted.
fn secret_at<'a>(pod: &'a Value, name: &str, mount: &str) -> Option<(&'a str, Vec<&'a str>)> {
    let container = pod["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)?;
    let volume = container["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"] == mount)?["name"]
        .as_str()?;
    let secret = &pod["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == volume)?["secret"];
    let mut keys: Vec<&str> = secret["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i["key"].as_str()).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    Some((secret["secretName"].as_str()?, keys))
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels[k] == *v))
}

/// What is wrong with the Kubernetes set `docs`; empty when every setting is there.
pub fn k8s_problems(docs: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    match find(docs, "DaemonSet", "berth-node") {
        None => problems.push("no DaemonSet berth-node".to_owned()),
        Some(node) => {
            let pod = &node["spec"]["template"]["spec"];
            if pod["hostNetwork"] != true {
                problems.push("berth-node: hostNetwork is not true".to_owned());
            }
            if pod["dnsPolicy"] != "ClusterFirstWithHostNet" {
                problems.push("berth-node: with hostNetwork, cluster names need dnsPolicy ClusterFirstWithHostNet".to_owned());
            }
            if pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30) < 60 {
                problems.push("berth-node: terminationGracePeriodSeconds under 60: too short for boxes to stop".to_owned());
            }
            let container = &pod["containers"][0];
            if container["securityContext"]["privileged"] != true {
                problems.push("berth-node: not privileged".to_owned());
            }
            let env = container["env"].as_array().cloned().unwrap_or_default();
            for (var, field) in [("NODE_NAME", "spec.nodeName"), ("POD_IP", "status.podIP")] {
                if !env
                    .iter()
                    .any(|v| v["name"] == var && v["valueFrom"]["fieldRef"]["fieldPath"] == field)
                {
                    problems.push(format!("berth-node: {var} is not from {field}"));
                }
            }
            problems.extend(container_problems(
                pod,
                "berth-node",
                &[
                    ("node", None),
                    ("--store", Some("postgres://berth@postgres:5432/berth")),
                    ("--data-dir", Some("/var/lib/berth")),
                    ("--status-listen", Some("0.0.0.0:7071")),
                    ("--advertise", Some("$(POD_IP):7443")),
                    ("--name", Some("$(NODE_NAME)")),
                    ("--join-token-file", Some("/etc/berth/join/token")),
                    ("--cluster-ca", Some("/etc/berth/cluster/ca.crt")),
                ],
                7071,
            ));
            let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
            let host_path = |path: &str| volumes.iter().find(|v| v["hostPath"]["path"] == path);
            let mounted = |volume: Option<&Value>, at: &str| {
                volume.is_some_and(|v| {
                    container["volumeMounts"].as_array().is_some_and(|m| {
                        m.iter()
                            .any(|m| m["name"] == v["name"] && m["mountPath"] == at)
                    })
                })
            };
            if !mounted(host_path("/var/lib/berth"), "/var/lib/berth") {
                problems.push("berth-node: no hostPath /var/lib/berth mounted there".to_owned());
            }
            if !mounted(host_path("/dev"), "/dev") && !mounted(host_path("/dev/kvm"), "/dev/kvm") {
                problems.push("berth-node: neither /dev nor /dev/kvm from the host".to_owned());
            }
            // A checked device path fails the pod on every machine without KVM.
            if let Some(v) = volumes
                .iter()
                .find(|v| v["hostPath"]["type"] == "CharDevice")
            {
                problems.push(format!(
                    "berth-node: a CharDevice hostPath fails machines without it: {v}"
                ));
            }
            match secret_at(pod, "berth-node", "/etc/berth/cluster") {
                Some(("berth-cluster-ca", keys)) if keys == ["ca.crt"] => {}
                other => problems.push(format!(
                    "berth-node: /etc/berth/cluster is not berth-cluster-ca's ca.crt alone: {other:?}"
                )),
            }
            match secret_at(pod, "berth-node", "/etc/berth/join") {
                Some(("berth-join", keys)) if keys == ["token"] => {}
                other => problems.push(format!(
                    "berth-node: /etc/berth/join is not berth-join's token: {other:?}"
                )),
            }
        }
    }

    let api_labels = match find(docs, "Deployment", "berth-api") {
        None => {
            problems.push("no Deployment berth-api".to_owned());
            Value::Null
        }
        Some(api) => {
            let spec = &api["spec"];
            if spec["replicas"] != 2 {
                problems.push(format!(
                    "berth-api: replicas is {}, not 2",
                    spec["replicas"]
                ));
            }
            let rolling = &spec["strategy"]["rollingUpdate"];
            if spec["strategy"]["type"] != "RollingUpdate" || rolling["maxUnavailable"] != 0 {
                problems.push(format!(
                    "berth-api: not a rolling update with maxUnavailable 0: {}",
                    spec["strategy"]
                ));
            }
            let pod = &spec["template"]["spec"];
            let anti = &pod["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"];
            if !anti.as_array().is_some_and(|terms| {
                terms
                    .iter()
                    .any(|t| t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname")
            }) {
                problems.push("berth-api: no preferred anti-affinity across hosts".to_owned());
            }
            problems.extend(container_problems(
                pod,
                "berth-api",
                &[
                    ("up", None),
                    ("--role", Some("api")),
                    ("--store", Some("postgres://berth@postgres:5432/berth")),
                    ("--listen", Some("0.0.0.0:7070")),
                    ("--cluster-dir", Some("/etc/berth/cluster")),
                    ("--data-dir", Some("/var/lib/berth")),
                ],
                7070,
            ));
            match secret_at(pod, "berth-api", "/etc/berth/cluster") {
                Some(("berth-cluster-ca", keys)) if keys == ["ca.crt", "ca.key"] => {}
                other => problems.push(format!(
                    "berth-api: /etc/berth/cluster is not berth-cluster-ca's ca.crt and ca.key: {other:?}"
                )),
            }
            spec["template"]["metadata"]["labels"].clone()
        }
    };
    let service = docs.iter().find(|d| {
        d["kind"] == "Service"
            && selects(&d["spec"]["selector"], &api_labels)
            && d["spec"]["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["port"] == 7070))
    });
    if service.is_none() {
        problems.push("no Service on port 7070 selecting the API's pods".to_owned());
    }
    let budget = docs.iter().find(|d| {
        d["kind"] == "PodDisruptionBudget"
            && d["spec"]["minAvailable"] == 1
            && selects(&d["spec"]["selector"]["matchLabels"], &api_labels)
    });
    if budget.is_none() {
        problems.push("no PodDisruptionBudget with minAvailable 1 over the API's pods".to_owned());
    }
    problems
}

pub fn node_container(docs: &mut [Value]) -> &mut Value {
    &mut find_mut(docs, "DaemonSet", "berth-node")["spec"]["template"]["spec"]["containers"][0]
}

pub fn api_container(docs: &mut [Value]) -> &mut Value {
    &mut find_mut(docs, "Deployment", "berth-api")["spec"]["template"]["spec"]["containers"][0]
}
