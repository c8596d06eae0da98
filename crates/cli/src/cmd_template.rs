//! `berth template …`: list the templates boxes are made from, and re-read the user ones.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::Deserialize;

use crate::client::Client;
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// List templates as a table (NAME, BASE, HARNESS, SERVICES, IDLE, ORIGIN).
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Re-read <data dir>/templates/*.toml; a bad file is reported (file:line) and skipped.
    /// Exits 1 if any file was bad.
    Reload {
        /// Print the daemon's JSON answer (templates and errors) instead of a summary.
        #[arg(long)]
        json: bool,
    },
}

/// What we read of a template. Lenient: the API may add fields.
#[derive(Debug, Deserialize)]
pub struct TemplateView {
    pub name: String,
    #[serde(default)]
    pub base: String,
    #[serde(default)]
    pub stop_after_s: Option<u64>,
    #[serde(default)]
    pub harness: Option<HarnessView>,
    #[serde(default)]
    pub services: Vec<ServiceView>,
    #[serde(default)]
    pub origin: String,
}

#[derive(Debug, Deserialize)]
pub struct HarnessView {
    #[serde(default)]
    pub command: Vec<String>,
}

/// Of a template's service, the table shows its name.
#[derive(Debug, Deserialize)]
pub struct ServiceView {
    pub name: String,
}

#[derive(Debug, Deserialize)]
struct TemplateList {
    templates: Vec<TemplateView>,
}

#[derive(Debug, Deserialize)]
struct ReloadAnswer {
    templates: Vec<TemplateView>,
    #[serde(default)]
    errors: Vec<LoadError>,
}

#[derive(Debug, Deserialize)]
struct LoadError {
    file: String,
    #[serde(default)]
    line: Option<u64>,
    message: String,
}

pub async fn run(client: &Client, command: TemplateCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    let status = match command {
        TemplateCommand::Ls { json: true } => {
            let raw: serde_json::Value = client
                .json(Method::GET, "/v1/templates", None::<&()>, "a template list")
                .await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
            0
        }
        TemplateCommand::Ls { json: false } => {
            let list: TemplateList = client
                .json(Method::GET, "/v1/templates", None::<&()>, "a template list")
                .await?;
            out.write_all(template_table(&list.templates).as_bytes())?;
            0
        }
        TemplateCommand::Reload { json } => {
            let raw: serde_json::Value = client
                .json(
                    Method::POST,
                    "/v1/templates/reload",
                    None::<&()>,
                    "a template reload",
                )
                .await?;
            let answer: ReloadAnswer = serde_json::from_value(raw.clone())
                .context("bad template reload answer from the daemon")?;
            if json {
                crate::output::json(&mut out, &raw)?;
                out.flush().context("writing to stdout")?;
                return Ok(u8::from(!answer.errors.is_empty()));
            }
            for error in &answer.errors {
                eprintln!("{}", error_line(error));
            }
            writeln!(out, "{}", reload_summary(&answer))?;
            u8::from(!answer.errors.is_empty())
        }
    };
    out.flush().context("writing to stdout")?;
    Ok(status)
}

fn reload_summary(answer: &ReloadAnswer) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = format!(
        "loaded {}",
        plural(answer.templates.len(), "template", "templates")
    );
    if !answer.errors.is_empty() {
        line.push_str(&format!(
            "; skipped {}",
            plural(answer.errors.len(), "bad file", "bad files")
        ));
    }
    line
}

/// `file:line: message`, as compilers print them.
fn error_line(error: &LoadError) -> String {
    match error.line {
        Some(line) => format!("{}:{line}: {}", error.file, error.message),
        None => format!("{}: {}", error.file, error.message),
    }
}

fn template_table(templates: &[TemplateView]) -> String {
    let rows: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.base.clone(),
                t.harness
                    .as_ref()
                    .map(|h| h.command.join(" "))
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| "-".into()),
                service_names(&t.services),
                t.stop_after_s
                    .map(|s| format!("{s}s"))
                    .unwrap_or_else(|| "-".into()),
                t.origin.clone(),
            ]
        })
        .collect();
    table(
        &["NAME", "BASE", "HARNESS", "SERVICES", "IDLE", "ORIGIN"],
        &rows,
    )
}

/// `db,web`, or `-` for none.
fn service_names(services: &[ServiceView]) -> String {
    if services.is_empty() {
        return "-".into();
    }
    let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_are_a_table() {
        let list: TemplateList = serde_json::from_value(json!({"templates":[
            {"name":"host","base":"host","stop_after_s":300,"limits":{},"layers":[],"harness":null,"origin":"builtin"},
            {"name":"echo","base":"host","stop_after_s":60,"layers":[],
             "harness":{"command":["/opt/echo/echo-harness","--x"],"resume_args":[],"env":{}},"origin":"builtin"},
            {"name":"app","base":"minimal","stop_after_s":300,"harness":null,"origin":"file",
             "services":[{"name":"db","command":["db"]},{"name":"web","command":["web"]}]}
        ]}))
        .unwrap();
        let text = template_table(&list.templates);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAME   BASE      HARNESS                      SERVICES   IDLE   ORIGIN"
        );
        assert_eq!(
            lines[1],
            "host   host      -                            -          300s   builtin"
        );
        assert_eq!(
            lines[2],
            "echo   host      /opt/echo/echo-harness --x   -          60s    builtin"
        );
        assert_eq!(
            lines[3],
            "app    minimal   -                            db,web     300s   file"
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let answer: ReloadAnswer = serde_json::from_value(json!({"templates":[],"errors":[
            {"file":"/d/templates/bad.toml","line":3,"message":"expected `=`"},
            {"file":"/d/templates/x.toml","line":null,"message":"unreadable"}
        ]}))
        .unwrap();
        assert_eq!(
            error_line(&answer.errors[0]),
            "/d/templates/bad.toml:3: expected `=`"
        );
        assert_eq!(
            error_line(&answer.errors[1]),
            "/d/templates/x.toml: unreadable"
        );
    }
}
