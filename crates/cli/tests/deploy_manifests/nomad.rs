//! The Nomad settings many hosts depend on, read from the jobs python-hcl2 parsed: each
//! missing or wrong one is a line in [`nomad_problems`].

use serde_json::Value;

use super::{flag, flag_problems, strings, url_with_password};

/// The bodies of the blocks `name` in `body` (HCL blocks parse as lists).
fn blocks<'a>(body: &'a Value, name: &str) -> Vec<&'a Value> {
    body[name]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The labelled blocks `name` in `body`: (label, body).
fn labelled<'a>(body: &'a Value, name: &str) -> Vec<(&'a str, &'a Value)> {
    blocks(body, name)
        .into_iter()
        .filter_map(|b| b.as_object())
        .flat_map(|o| o.iter().map(|(k, v)| (k.as_str(), v)))
        .collect()
}

/// Seconds in a Nomad duration such as "60s" or "2m".
fn seconds(duration: &Value) -> Option<u64> {
    let text = duration.as_str()?;
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let number: u64 = number.parse().ok()?;
    match unit {
        "s" => Some(number),
        "m" => Some(number * 60),
        "h" => Some(number * 3600),
        _ => None,
    }
}

/// Every string anywhere in `value`.
fn all_strings(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().flat_map(all_strings).collect(),
        Value::Object(o) => o.values().flat_map(all_strings).collect(),
        _ => Vec::new(),
    }
}

/// What is wrong with the Nomad job `file` (one job named `job`, one group, one docker task):
/// its type, the flags its task passes, a health check on `/v1/health`, and the password
/// from a Nomad Variable only.
fn nomad_job_problems(
    file: &Value,
    job: &str,
    job_type: &str,
    must_pass: &[(&str, Option<&str>)],
) -> (Vec<String>, Option<(Value, Value)>) {
    let mut problems = Vec::new();
    let Some(body) = labelled(file, "job")
        .into_iter()
        .find(|(name, _)| *name == job)
        .map(|(_, b)| b)
    else {
        return (vec![format!("no job {job}")], None);
    };
    if body["type"] != job_type {
        problems.push(format!("{job}: type is {}, not {job_type}", body["type"]));
    }
    let groups = labelled(body, "group");
    let Some((_, group)) = groups.first() else {
        return (vec![format!("{job}: no group")], None);
    };
    let Some((_, task)) = labelled(group, "task").into_iter().next() else {
        return (vec![format!("{job}: no task")], None);
    };
    let config = blocks(task, "config")
        .first()
        .copied()
        .cloned()
        .unwrap_or_default();
    if task["driver"] != "docker" {
        problems.push(format!("{job}: driver is {}, not docker", task["driver"]));
    }
    let args: Vec<&str> = strings(&config["args"]);
    problems.extend(flag_problems(job, &args, must_pass));
    let store = flag(&args, "--store").unwrap_or_default();
    if !store.starts_with("postgres://berth@") {
        problems.push(format!(
            "{job}: --store is {store:?}, not postgres://berth@…"
        ));
    }
    let checks: Vec<&Value> = blocks(group, "service")
        .into_iter()
        .chain(blocks(task, "service"))
        .flat_map(|s| blocks(s, "check"))
        .collect();
    if !checks
        .iter()
        .any(|c| c["type"] == "http" && c["path"] == "/v1/health")
    {
        problems.push(format!("{job}: no http service check on /v1/health"));
    }
    // Secrets only from Nomad Variables: an `env` block or a URL would put them in the job.
    for env in blocks(task, "env") {
        for key in env.as_object().map(|o| o.keys()).into_iter().flatten() {
            if ["PASSWORD", "TOKEN", "SECRET", "KEY"]
                .iter()
                .any(|s| key.contains(s))
            {
                problems.push(format!("{job}: {key} is a literal in an env block"));
            }
        }
    }
    if let Some(url) = all_strings(file).into_iter().find_map(url_with_password) {
        problems.push(format!("{job}: a password in a URL: {url}"));
    }
    let password_template = blocks(task, "template").into_iter().any(|t| {
        t["env"] == true
            && t["data"].as_str().is_some_and(|d| {
                d.lines()
                    .any(|l| l.contains("nomadVar") && l.contains("BERTH_STORE_PASSWORD={{"))
            })
    });
    if !password_template {
        problems.push(format!(
            "{job}: BERTH_STORE_PASSWORD is not rendered from a nomadVar into the environment"
        ));
    }
    (problems, Some(((*group).clone(), config)))
}

pub fn nomad_problems(node: &Value, api: &Value) -> Vec<String> {
    let (mut problems, parts) = nomad_job_problems(
        node,
        "berth-node",
        "system",
        &[
            ("node", None),
            ("--data-dir", Some("/var/lib/berth")),
            ("--status-listen", Some("0.0.0.0:7071")),
            ("--join-token-file", None),
            ("--cluster-ca", None),
        ],
    );
    if let Some((group, config)) = parts {
        if config["privileged"] != true {
            problems.push("berth-node: not privileged".to_owned());
        }
        if config["network_mode"] != "host" {
            problems.push("berth-node: network_mode is not host".to_owned());
        }
        let volumes = strings(&config["volumes"]);
        if !volumes.contains(&"/var/lib/berth:/var/lib/berth") {
            problems.push(format!(
                "berth-node: /var/lib/berth is not the host's: {volumes:?}"
            ));
        }
        if !volumes.contains(&"/dev:/dev") && !volumes.contains(&"/dev/kvm:/dev/kvm") {
            problems.push(format!(
                "berth-node: neither /dev nor /dev/kvm from the host: {volumes:?}"
            ));
        }
        let task = labelled(&group, "task")[0].1;
        if seconds(&task["kill_timeout"]).unwrap_or(5) < 60 {
            problems
                .push("berth-node: kill_timeout under 60s: too short for boxes to stop".to_owned());
        }
    }
    // A node verifies with the CA's certificate; its key stays with the API.
    if all_strings(node)
        .iter()
        .any(|s| s.contains("ca_key") || s.contains("ca.key"))
    {
        problems.push("berth-node: reads the CA's key".to_owned());
    }

    let (api_problems, parts) = nomad_job_problems(
        api,
        "berth-api",
        "service",
        &[
            ("up", None),
            ("--role", Some("api")),
            ("--listen", Some("0.0.0.0:7070")),
            ("--cluster-dir", None),
        ],
    );
    problems.extend(api_problems);
    if let Some((group, _)) = parts {
        if group["count"] != 2 {
            problems.push(format!("berth-api: count is {}, not 2", group["count"]));
        }
    }
    let api_job = labelled(api, "job")
        .first()
        .map(|(_, b)| *b)
        .cloned()
        .unwrap_or_default();
    match blocks(&api_job, "update").first() {
        Some(update)
            if update["health_check"].as_str().unwrap_or("checks") == "checks"
                && update["min_healthy_time"].is_string() => {}
        other => problems.push(format!(
            "berth-api: no update block gated on the health checks: {other:?}"
        )),
    }
    problems
}
