//! The web app's API types (`web/src/generated/api_types.ts`) are openapi-typescript's
//! output for the checked-in `openapi.json`, itself checked against the daemon's code
//! (`crates/server/src/api/openapi.rs`). This regenerates them and compares, so the web app
//! cannot drift from the API: after an API change run `npm run api-types` in `web/`.

use std::path::{Path, PathBuf};
use std::process::Command;

const GENERATED: &str = "src/generated/api_types.ts";

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web")
}

#[test]
fn the_web_apps_api_types_are_generated_from_openapi_json() {
    let web = web_dir();
    // The crate's build script ran `npm ci` in web/, so the pinned generator is there.
    let cli = web.join("node_modules/openapi-typescript/bin/cli.js");
    assert!(
        cli.is_file(),
        "{} is missing: run `npm ci` in web/",
        cli.display()
    );
    let node = std::env::var("BERTH_NODE").unwrap_or_else(|_| "node".to_owned());
    let out = Command::new(node)
        .arg(&cli)
        .args([
            "../openapi.json",
            "--enum-values",
            "--empty-objects-unknown",
        ])
        .current_dir(&web)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "openapi-typescript failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("the generator writes UTF-8");
    let checked_in = std::fs::read_to_string(web.join(GENERATED)).unwrap_or_default();
    assert!(
        checked_in == generated,
        "web/{GENERATED} is not what openapi-typescript makes of openapi.json: run `npm run api-types` in web/ and commit it"
    );
}
