//! The API's OpenAPI description, generated from the handlers' `#[utoipa::path]`
//! attributes and the body types. Served at `GET /openapi.json` and checked in as
//! `openapi.json` at the repository's root (a test fails when the two differ).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    box_sleep, box_update, boxes, egress, events, exec, files, files_archive, files_watch,
    messages, port_links, ports, processes, push, runtimes, secrets, templates, tenants, terminals,
    wakeups, web_sessions,
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
        processes::list,
        processes::output,
        processes::stdin,
        processes::signal,
        files::read,
        files::write,
        files::list,
        files::stat,
        files::mkdir,
        files::remove,
        files_archive::read,
        files_archive::write,
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
    ),
    modifiers(&BearerKey)
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
}
