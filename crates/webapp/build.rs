//! Builds the web app from `web/` with Node (docs/webapp.md) and generates the table that
//! `berth_webapp::file` reads: every file's bytes and gzip embedded with `include_bytes!`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use sha2::{Digest, Sha256};

#[derive(serde::Deserialize)]
struct Listed {
    path: String,
    content_type: String,
    immutable: bool,
}

const INSTALL_HINT: &str =
    "install Node.js 18+ and npm (`apt-get install nodejs npm`, or `make deps`)";

fn main() -> ExitCode {
    match build() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // One clear line: cargo shows a build script's stderr on failure.
            eprintln!("error: berth-webapp: {message}");
            ExitCode::FAILURE
        }
    }
}

fn build() -> Result<(), String> {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let web = manifest_dir.join("../../web");
    let web = web
        .canonicalize()
        .map_err(|e| format!("cannot find the web app's source at {}: {e}", web.display()))?;
    for watched in [
        "src",
        "build.mjs",
        "icons.mjs",
        "package.json",
        "package-lock.json",
        "tsconfig.json",
    ] {
        println!("cargo:rerun-if-changed={}", web.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=BERTH_NODE");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let out = out_dir.join("web");

    let node = std::env::var("BERTH_NODE").unwrap_or_else(|_| "node".to_owned());
    if !web.join("node_modules").is_dir() {
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&web),
            "npm ci",
        )?;
    }
    run(
        Command::new(&node)
            .arg(web.join("build.mjs"))
            .arg("--out")
            .arg(&out)
            .current_dir(&web),
        "node web/build.mjs",
    )?;
    let table = table(&out)?;
    std::fs::write(out_dir.join("files.rs"), table)
        .map_err(|e| format!("cannot write files.rs: {e}"))
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let program = command.get_program().to_string_lossy().into_owned();
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("`{what}` failed ({status}); its output is above")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("`{program}` was not found: {INSTALL_HINT}"))
        }
        Err(e) => Err(format!("cannot run `{program}`: {e}")),
    }
}

fn table(out: &Path) -> Result<String, String> {
    let listing = std::fs::read(out.join("files.json"))
        .map_err(|e| format!("no files.json from the build: {e}"))?;
    let files: Vec<Listed> =
        serde_json::from_slice(&listing).map_err(|e| format!("bad files.json: {e}"))?;
    let mut code = String::from("pub static FILES: &[(&str, WebFile)] = &[\n");
    for file in files {
        let path = out.join(&file.path);
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let gz_path = out.join(format!("{}.gz", file.path));
        let gz_len = std::fs::metadata(&gz_path)
            .map(|m| m.len())
            .unwrap_or(u64::MAX);
        // Serve gzip only where it saves bytes (not for PNGs).
        let gzip = if gz_len < bytes.len() as u64 {
            format!("Some(include_bytes!({:?}))", gz_path.display().to_string())
        } else {
            "None".to_owned()
        };
        let digest = Sha256::digest(&bytes);
        let etag = berth_basics::hex(&digest[..12]);
        writeln!(
            code,
            "    ({:?}, WebFile {{ bytes: include_bytes!({:?}), gzip: {gzip}, content_type: {:?}, immutable: {}, etag: \"\\\"{etag}\\\"\" }}),",
            file.path,
            path.display().to_string(),
            file.content_type,
            file.immutable,
        )
        .map_err(|e| e.to_string())?;
    }
    code.push_str("];\n");
    Ok(code)
}
