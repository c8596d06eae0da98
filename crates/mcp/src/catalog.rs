//! The tools: each one's name, description (written for the model that picks tools), input
//! schema (from its argument type, so schema and parsing cannot disagree), and the function
//! that runs it.

use std::sync::Arc;

use rmcp::handler::server::common::schema_for_input;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::calls::Cx;
use crate::error::ToolError;
use crate::{box_tools, exec_tool, file_tools, memory_tools, message_tools};

/// One tool as MCP lists it.
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// Only reads: clients may call it without asking.
    pub read_only: bool,
    schema: fn() -> Arc<JsonObject>,
}

/// The input schema of argument type `T`. Every argument type is a struct, which
/// `schema_for_input` always accepts.
fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_default()
}

pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "box_create",
        description: "Create a berth box: a persistent, sealed Linux computer of its own, with \
            a disk that survives sleep. It starts stopped and wakes by itself on the first \
            exec, file call or message. Returns the box's id, name and state.",
        read_only: false,
        schema: schema::<box_tools::CreateArgs>,
    },
    ToolSpec {
        name: "box_list",
        description: "List the boxes this API key can use (its tenant's), one per line: id, \
            name, template, state, runtime, labels.",
        read_only: true,
        schema: schema::<box_tools::ListArgs>,
    },
    ToolSpec {
        name: "box_exec",
        description: "Run a shell command in a box and return its exit code, stdout and \
            stderr (each cut to its first 12 KiB and last 4 KiB when longer, with a note). \
            Wakes the box if it sleeps. Runs as an unprivileged user unless user=\"root\".",
        read_only: false,
        schema: schema::<exec_tool::ExecArgs>,
    },
    ToolSpec {
        name: "box_read_file",
        description: "Read a file in a box: up to max_bytes (32 KiB by default) from offset; \
            the result says the file's size and the offset to read the rest from. Text is \
            returned as is, other bytes as base64.",
        read_only: true,
        schema: schema::<file_tools::ReadArgs>,
    },
    ToolSpec {
        name: "box_write_file",
        description: "Write a whole file in a box (replacing it atomically if it exists), \
            from text or base64. At most 1 MiB; the directory must exist (make it with \
            box_exec `mkdir -p`).",
        read_only: false,
        schema: schema::<file_tools::WriteArgs>,
    },
    ToolSpec {
        name: "box_list_files",
        description: "List a directory in a box: kind, size and name of each entry (the \
            first 200).",
        read_only: true,
        schema: schema::<file_tools::ListFilesArgs>,
    },
    ToolSpec {
        name: "memory_read",
        description: "Read what the agent of a box remembers (its /memory: notes on people, \
            conversations, a timeline, ongoing work) without waking the box: a file's text, or \
            with no path (or a directory) the list of what is there. Start with no path, then \
            read README.md and the files that matter.",
        read_only: true,
        schema: schema::<memory_tools::MemoryReadArgs>,
    },
    ToolSpec {
        name: "memory_search",
        description: "Search what the agent of a box remembers (its /memory) for words, \
            without waking the box: the files that match, best first, each with its path and \
            the lines around the match. Read the ones that matter with memory_read.",
        read_only: true,
        schema: schema::<memory_tools::MemorySearchArgs>,
    },
    ToolSpec {
        name: "box_send_message",
        description: "Send a message to the agent running in a box (its template's harness, \
            e.g. Claude Code) and wait for its answer: returns the text of the turn's result \
            (its first 32 KiB). Wakes the box. If the agent takes longer than timeout_s, the \
            message stays queued and box_events shows the answer later.",
        read_only: false,
        schema: schema::<message_tools::SendArgs>,
    },
    ToolSpec {
        name: "box_events",
        description: "Read a box's event log after a seq: the agent's output (assistant, \
            result, …), state changes, boots and logs, one per line as `seq type data`, about \
            32 KiB per call; the result says the `after` to pass next.",
        read_only: true,
        schema: schema::<message_tools::EventsArgs>,
    },
    ToolSpec {
        name: "box_port_url",
        description: "The URL of a port a server in the box listens on, reached through \
            berth (the box needs no network of its own; it wakes on the first request).",
        read_only: true,
        schema: schema::<box_tools::PortArgs>,
    },
];

/// The tools as MCP lists them.
pub fn listed() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|spec| {
            Tool::new(spec.name, spec.description, (spec.schema)()).with_annotations(
                ToolAnnotations::new()
                    .read_only(spec.read_only)
                    .destructive(false),
            )
        })
        .collect()
}

pub fn find(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|spec| spec.name == name)
}

/// Runs tool `spec` with `arguments` (a JSON object; absent: `{}`).
pub async fn run(
    cx: Cx<'_>,
    spec: &'static ToolSpec,
    arguments: JsonObject,
) -> Result<String, ToolError> {
    let args = serde_json::Value::Object(arguments);
    match spec.name {
        "box_create" => box_tools::create(cx, parse(spec, args)?).await,
        "box_list" => box_tools::list(cx, parse(spec, args)?).await,
        "box_port_url" => box_tools::port_url(cx, parse(spec, args)?).await,
        "box_exec" => exec_tool::exec(cx, parse(spec, args)?).await,
        "box_read_file" => file_tools::read(cx, parse(spec, args)?).await,
        "box_write_file" => file_tools::write(cx, parse(spec, args)?).await,
        "box_list_files" => file_tools::list(cx, parse(spec, args)?).await,
        "memory_read" => memory_tools::read(cx, parse(spec, args)?).await,
        "memory_search" => memory_tools::search(cx, parse(spec, args)?).await,
        "box_send_message" => message_tools::send(cx, parse(spec, args)?).await,
        "box_events" => message_tools::events(cx, parse(spec, args)?).await,
        // Every name in TOOLS is above; a new one missed here fails the unit test below.
        other => Err(ToolError::UnknownTool {
            name: other.to_owned(),
        }),
    }
}

fn parse<T: DeserializeOwned>(spec: &ToolSpec, args: serde_json::Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|source| ToolError::Arguments {
        tool: spec.name,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tool_has_an_object_schema_that_names_its_required_arguments() {
        let tools = listed();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "box_create",
                "box_list",
                "box_exec",
                "box_read_file",
                "box_write_file",
                "box_list_files",
                "memory_read",
                "memory_search",
                "box_send_message",
                "box_events",
                "box_port_url"
            ]
        );
        for tool in &tools {
            let schema = serde_json::Value::Object((*tool.input_schema).clone());
            assert_eq!(schema["type"], "object", "{}", tool.name);
            // Strict at the edge: unknown arguments are refused, and the schema says so.
            assert_eq!(schema["additionalProperties"], false, "{}", tool.name);
            assert!(
                tool.description.as_ref().unwrap().len() > 40,
                "{}",
                tool.name
            );
        }
        let exec = serde_json::Value::Object((*tools[2].input_schema).clone());
        assert_eq!(exec["required"], json!(["box", "command"]));
        assert_eq!(
            exec["properties"]["timeout_s"]["type"],
            json!(["integer", "null"])
        );
        assert!(exec["properties"]["box"]["description"]
            .as_str()
            .unwrap()
            .contains("name or id"));
    }

    #[test]
    fn bad_arguments_say_which_tool_and_what() {
        let spec = find("box_exec").unwrap();
        let err = parse::<exec_tool::ExecArgs>(spec, json!({"box": "a"})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid arguments for box_exec: missing field `command`"
        );
        let err =
            parse::<exec_tool::ExecArgs>(spec, json!({"box": "a", "command": "x", "sudo": true}))
                .unwrap_err();
        assert!(err.to_string().contains("unknown field `sudo`"), "{err}");
        assert!(find("rm_rf").is_none());
    }
}
