//! The API's OpenAPI description, generated from the handlers' `#[utoipa::path]`
//! attributes and the body types. Served at `GET /openapi.json` and checked in as
//! `openapi.json` at the repository's root (a test fails when the two differ).

use berth_store::BoxState;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi};

use super::desktop_vnc;
use super::{
    backup, box_sleep, box_update, boxes, desktop, egress, events, exec, files, files_archive,
    files_watch, memory, memory_history, memory_search, messages, port_links, ports, processes,
    push, runtimes, secrets, services, templates, tenants, terminals, wakeups, web_sessions,
    webhooks,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "berth",
        description = "Persistent, sealed computers (boxes) for AI agents. Errors are always `{\"error\":{\"code\",\"message\"}}`; see docs/api.md."
    ),
    paths(
        super::health,
        boxes::create,
        boxes::list,
        boxes::get,
        boxes::delete,
        box_update::update,
        boxes::start,
        boxes::stop,
        box_sleep::pause,
        box_sleep::resume,
        box_sleep::snapshot,
        exec::exec,
        terminals::pty,
        desktop_vnc::vnc,
        processes::list,
        processes::output,
        processes::stdin,
        processes::signal,
        services::list,
        services::logs,
        services::restart,
        desktop::status,
        desktop::screenshot,
        desktop::actions,
        desktop::cursor,
        files::read,
        files::write,
        files::list,
        files::stat,
        files::mkdir,
        files::remove,
        memory::tree,
        memory::file,
        memory_search::search,
        memory_search::links,
        memory_search::graph,
        memory_history::list,
        memory_history::take,
        memory_history::get,
        memory_history::diff,
        memory_history::file,
        memory_history::restore,
        files_archive::read,
        files_archive::write,
        backup::backup,
        backup::restore,
        files_watch::watch,
        messages::post,
        messages::list,
        events::events,
        egress::audit,
        ports::proxy,
        port_links::urls,
        port_links::create,
        port_links::list_port,
        port_links::revoke_port,
        port_links::list_box,
        port_links::revoke_box,
        templates::list,
        templates::reload,
        runtimes::list,
        tenants::create,
        tenants::list,
        tenants::get,
        tenants::update,
        tenants::list_keys,
        tenants::add_key,
        tenants::revoke_key,
        secrets::set,
        secrets::list,
        secrets::delete,
        web_sessions::pair,
        web_sessions::sign_in,
        web_sessions::current,
        web_sessions::sign_out,
        web_sessions::list,
        web_sessions::revoke,
        push::key,
        push::subscribe,
        push::list,
        push::unsubscribe,
        wakeups::create,
        wakeups::list,
        wakeups::delete,
        webhooks::create,
        webhooks::list,
        webhooks::show,
        webhooks::delete,
        webhooks::test,
        webhooks::deliveries,
    ),
    components(schemas(
        berth_protocol::terminal::ClientControl,
        berth_protocol::terminal::ServerControl,
    )),
    modifiers(&BearerKey, &ClosedSets, &OperationIds)
)]
pub struct ApiDoc;

/// The API key scheme: `Authorization: Bearer <key>`.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The event types berth itself writes to a box's log (docs/api.md, "Events").
const BERTH_EVENT_TYPES: &[&str] = &[
    "state",
    "log",
    "harness_start",
    "harness_exit",
    "harness_failed",
    "wakeup",
    "wake_request",
    "turn_timeout",
    "boot",
    "volume_restored",
    "gap",
];

/// The types of the harness lines berth's templates run (Claude Code's `stream-json`); any
/// other harness's own types pass through as they are.
const HARNESS_EVENT_TYPES: &[&str] = &[
    "system",
    "assistant",
    "user",
    "result",
    "stream_event",
    "error",
];

/// Makes the closed sets of values clients switch on enums of the document: a box's
/// state (from the store's [`BoxState`], whose type the view shows as a string) and an
/// event's type. Error codes are an enum already (`berth_protocol::ErrorCode`).
struct ClosedSets;

impl Modify for ClosedSets {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        // A deleted box has no row: no view ever shows that state.
        let states = BoxState::ALL
            .iter()
            .filter(|s| **s != BoxState::Deleted)
            .map(|s| s.as_str());
        components.schemas.insert(
            "BoxState".into(),
            string_enum(
                states,
                "A box's state: `running`, `paused`, `snapshotted` and `stopped` are the rungs of the sleep ladder.",
            ),
        );
        components.schemas.insert(
            "EventType".into(),
            string_enum(
                BERTH_EVENT_TYPES.iter().chain(HARNESS_EVENT_TYPES).copied(),
                "The event types berth writes (`state`, `log`, `harness_*`, `wakeup`, `wake_request`, `turn_timeout`, and `gap` on a stream) and those of the harness lines berth's templates run.",
            ),
        );
        set_property(
            components,
            "BoxView",
            "state",
            Ref::from_schema_name("BoxState").into(),
        );
        // A harness may write types of its own: the known ones, or any string.
        let event_type = AnyOfBuilder::new()
            .item(Ref::from_schema_name("EventType"))
            .item(ObjectBuilder::new().schema_type(Type::String))
            .build();
        set_property(
            components,
            "EventView",
            "type",
            Schema::AnyOf(event_type).into(),
        );
    }
}

/// Names each operation after its method and path (`get_boxes_box_ref_files`): the
/// handlers' own names repeat across modules (`list`, `create`), and generated clients
/// (the web app's types) need them unique.
struct OperationIds;

impl Modify for OperationIds {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let words: Vec<&str> = path
                .split('/')
                .map(|segment| segment.trim_matches(|c| c == '{' || c == '}'))
                .filter(|segment| !segment.is_empty() && *segment != "v1")
                .collect();
            let name = words.join("_").replace(['-', '.'], "_");
            let operations = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
            ];
            for (method, operation) in operations {
                if let Some(operation) = operation {
                    operation.operation_id = Some(format!("{method}_{name}"));
                }
            }
        }
    }
}

fn string_enum<'a>(values: impl Iterator<Item = &'a str>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(values))
        .into()
}

/// Replaces one property of a component object; the tests catch a schema renamed away.
fn set_property(
    components: &mut utoipa::openapi::Components,
    schema: &str,
    property: &str,
    value: RefOr<Schema>,
) {
    if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema) {
        if let Some(slot) = object.properties.get_mut(property) {
            *slot = value;
        }
    }
}

/// The document as served and checked in (pretty JSON, with a final newline).
pub fn document() -> String {
    let mut json = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    json.push('\n');
    json
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `openapi.json` is the generated document. After an API change, regenerate it with
    /// `BERTH_UPDATE_OPENAPI=1 cargo test -p berth-server openapi` and commit it.
    #[test]
    fn checked_in_openapi_json_matches_the_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi.json");
        let generated = document();
        if std::env::var_os("BERTH_UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "openapi.json is out of date: run `BERTH_UPDATE_OPENAPI=1 cargo test -p berth-server openapi` and commit it"
        );
    }

    #[test]
    fn every_route_is_described() {
        let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for (path, methods) in [
            ("/v1/boxes", &["post", "get"][..]),
            ("/v1/boxes/{box_ref}", &["get", "delete", "patch"]),
            ("/v1/boxes/{box_ref}/exec", &["post"]),
            ("/v1/boxes/{box_ref}/files", &["get", "put", "delete"]),
            ("/v1/boxes/{box_ref}/files/archive", &["get", "put"]),
            ("/v1/boxes/{box_ref}/files/watch", &["get"]),
            ("/v1/boxes/{box_ref}/messages", &["post", "get"]),
            ("/v1/boxes/{box_ref}/events", &["get"]),
            ("/v1/templates/reload", &["post"]),
            ("/v1/runtimes", &["get"]),
            ("/v1/tenants", &["post"]),
            ("/v1/web/pairings", &["post"]),
            ("/v1/web/sessions", &["post", "get"]),
            ("/v1/web/session", &["get", "delete"]),
            ("/v1/web/sessions/{id}", &["delete"]),
        ] {
            for method in methods {
                assert!(
                    paths[path].get(*method).is_some(),
                    "{method} {path} is not described"
                );
            }
        }
        assert!(doc["components"]["schemas"]["CreateBox"]["properties"]["name"].is_object());
        assert!(doc["components"]["schemas"]["CreateBox"]["properties"]["runtime"].is_object());
        assert!(doc["components"]["schemas"]["RuntimeView"]["properties"]["details"].is_object());
        assert!(doc["components"]["securitySchemes"]["api_key"].is_object());
    }

    /// The sets clients switch on are enums, so the web app's generated types are closed.
    #[test]
    fn states_event_types_and_error_codes_are_enums() {
        let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let values = |name: &str| -> Vec<String> {
            schemas[name]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{name} is not an enum"))
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        let states: Vec<String> = BoxState::ALL
            .iter()
            .filter(|s| **s != BoxState::Deleted)
            .map(|s| s.as_str().to_owned())
            .collect();
        assert_eq!(values("BoxState"), states);
        assert_eq!(
            schemas["BoxView"]["properties"]["state"]["$ref"],
            "#/components/schemas/BoxState"
        );
        let types = values("EventType");
        for kind in [
            berth_protocol::wake::WAKEUP_EVENT,
            berth_protocol::wake::WAKE_REQUEST_EVENT,
            "state",
            "gap",
            "harness_failed",
            "assistant",
        ] {
            assert!(types.iter().any(|t| t == kind), "{kind} missing");
        }
        assert_eq!(
            schemas["EventView"]["properties"]["type"]["anyOf"][0]["$ref"],
            "#/components/schemas/EventType"
        );
        let codes = values("ErrorCode");
        assert!(codes.iter().any(|c| c == "duplicate_session_cookie"));
        assert_eq!(
            schemas["ErrorDetail"]["properties"]["code"]["$ref"],
            "#/components/schemas/ErrorCode"
        );
        assert!(schemas["ClientControl"].is_object() && schemas["ServerControl"].is_object());
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for (method, operation) in methods.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap().to_owned();
                assert!(seen.insert(id.clone()), "{method} {path}: {id} is taken");
            }
        }
        assert!(seen.contains("get_boxes_box_ref_files_archive"), "{seen:?}");
    }
}
