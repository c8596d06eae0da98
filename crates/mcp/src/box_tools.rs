//! `box_create`, `box_list`, `box_port_url`: boxes themselves, and how to reach their ports.

use std::collections::BTreeMap;

use berth_basics::query_value;
use http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::answer;
use crate::api::ApiRequest;
use crate::calls::{box_path, Cx};
use crate::error::ToolError;
use crate::limits::MAX_LISTED_ENTRIES;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The new box's name: 1-63 of a-z, 0-9 and '-', not starting or ending with '-';
    /// unique among this key's boxes. It is also the box's hostname.
    pub name: String,
    /// The template the box is made from (the daemon's default when absent, usually "host").
    /// A template with an agent harness (e.g. "echo", or one running Claude Code) is needed
    /// for box_send_message.
    #[serde(default)]
    pub template: Option<String>,
    /// Environment variables every process in the box gets.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Labels to find the box by later (box_list's `label` filter).
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

pub async fn create(cx: Cx<'_>, args: CreateArgs) -> Result<String, ToolError> {
    let mut body = Map::new();
    body.insert("name".into(), json!(args.name));
    if let Some(template) = args.template {
        body.insert("template".into(), json!(template));
    }
    if let Some(env) = args.env {
        body.insert("env".into(), json!(env));
    }
    if let Some(labels) = args.labels {
        body.insert("labels".into(), json!(labels));
    }
    let request = ApiRequest::with_json(Method::POST, "/v1/boxes", Value::Object(body));
    let created: Value = answer::json(cx.call(request).await?, "a box").await?;
    Ok(format!(
        "created box {}\n{}",
        created["name"].as_str().unwrap_or("?"),
        summary(&created)
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only boxes in this state: stopped, starting, running, stopping, paused, snapshotted
    /// or failed.
    #[serde(default)]
    pub state: Option<String>,
    /// Only boxes with every one of these labels, each "KEY=VALUE".
    #[serde(default)]
    pub label: Option<Vec<String>>,
}

pub async fn list(cx: Cx<'_>, args: ListArgs) -> Result<String, ToolError> {
    let mut query = Vec::new();
    if let Some(state) = &args.state {
        query.push(format!("state={}", query_value(state)));
    }
    for label in args.label.iter().flatten() {
        query.push(format!("label={}", query_value(label)));
    }
    let path = match query.is_empty() {
        true => "/v1/boxes".to_owned(),
        false => format!("/v1/boxes?{}", query.join("&")),
    };
    let listed: Value = answer::json(cx.call(ApiRequest::get(path)).await?, "a box list").await?;
    let boxes = listed["boxes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if boxes.is_empty() {
        return Ok("no boxes".into());
    }
    let mut text: Vec<String> = boxes.iter().take(MAX_LISTED_ENTRIES).map(summary).collect();
    if boxes.len() > MAX_LISTED_ENTRIES {
        text.push(format!(
            "[… {} more boxes left out; narrow the list with `state` or `label`]",
            boxes.len() - MAX_LISTED_ENTRIES
        ));
    }
    Ok(text.join("\n"))
}

/// One box on one line: what a model needs to pick it and know whether it is up.
fn summary(b: &Value) -> String {
    let mut fields = Map::new();
    for key in [
        "id",
        "name",
        "template",
        "state",
        "runtime",
        "state_reason",
        "labels",
    ] {
        match &b[key] {
            Value::Null => {}
            Value::Object(o) if o.is_empty() => {}
            value => {
                fields.insert(key.into(), value.clone());
            }
        }
    }
    Value::Object(fields).to_string()
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The port a server in the box listens on (on 127.0.0.1 or 0.0.0.0 inside the box).
    pub port: u16,
}

pub async fn port_url(cx: Cx<'_>, args: PortArgs) -> Result<String, ToolError> {
    let path = box_path(&args.box_ref, &format!("/ports?port={}", args.port));
    let urls: Value = answer::json(cx.call(ApiRequest::get(path)).await?, "port URLs").await?;
    let mut text = format!(
        "{}\n(opening it needs this berth API key as `Authorization: Bearer …`, or a share \
         link: `berth port link {} {}`; the box wakes on the first request)",
        urls["url"].as_str().unwrap_or("?"),
        args.box_ref,
        args.port
    );
    if let Some(host_url) = urls["host_url"].as_str() {
        text.push_str(&format!(
            "\nalso, on its own host name (for apps that need to be at /): {host_url}"
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_keeps_what_identifies_a_box() {
        let b = json!({"id":"bx_1","name":"a","template":"host","state":"running",
            "runtime":"sandbox","state_reason":null,"labels":{},"limits":{"memory_mib":512}});
        assert_eq!(
            summary(&b),
            r#"{"id":"bx_1","name":"a","runtime":"sandbox","state":"running","template":"host"}"#
        );
    }
}
