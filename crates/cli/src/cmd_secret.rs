//! `berth secret set|ls|rm`: the credentials the egress gateway sets on a box's requests.
//! A value goes to the daemon once and is never shown again; boxes only see placeholders.
//! It is read from stdin or a file, never from the command line (where `ps` and the shell
//! history would keep it).

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Subcommand;
use http::{Method, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use serde::{Deserialize, Serialize};

use crate::client::{full, path_segment, Client};
use crate::table::table;

/// The daemon refuses values over 8192 bytes; reading stops a little past that.
const MAX_VALUE_BYTES: u64 = 8192;

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set (create or replace) a secret of your tenant. The value is read from stdin (one
    /// trailing newline is dropped; at a terminal you are prompted and nothing is echoed),
    /// or from --from-file. It must be 1 to 8192 bytes of visible ASCII (spaces and tabs
    /// allowed inside): it is sent upstream as an HTTP header.
    Set {
        /// The secret's name: a-z and 0-9 first, then a-z, 0-9, _ or -, up to 63 in all.
        name: String,
        /// Read the value from this file instead (one trailing newline is dropped).
        #[arg(long, value_name = "PATH")]
        from_file: Option<PathBuf>,
        /// Print the daemon's JSON answer (the secret's name and times, never its value)
        /// instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// List your tenant's secrets as a table (NAME, UPDATED); values are never shown.
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a secret of your tenant.
    #[command(visible_alias = "delete")]
    Rm {
        /// The secret's name.
        name: String,
        /// Print `{"deleted": NAME}` instead of a sentence (the daemon answers 204, no body).
        #[arg(long)]
        json: bool,
    },
}

/// The value, zeroed when dropped (best effort: the request body is a copy).
struct Value(Vec<u8>);

impl Drop for Value {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, exclusive reference to a byte.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

#[derive(Serialize)]
struct SetBody<'a> {
    name: &'a str,
    value: &'a str,
}

#[derive(Debug, Deserialize)]
struct SecretView {
    name: String,
    #[serde(default)]
    updated_at: String,
}

#[derive(Debug, Deserialize)]
struct SecretList {
    secrets: Vec<SecretView>,
}

pub async fn run(client: &Client, command: SecretCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        SecretCommand::Set {
            name,
            from_file,
            json: print_json,
        } => {
            let value = match &from_file {
                Some(path) => read_file(path)?,
                None => read_stdin(&name)?,
            };
            let text = std::str::from_utf8(&value.0)
                .context("the value is not valid UTF-8 (it must be visible ASCII)")?;
            let json = serde_json::to_vec(&SetBody {
                name: &name,
                value: text,
            })?;
            let response = client
                .send(
                    Method::POST,
                    "/v1/secrets",
                    "application/json",
                    Some("application/json"),
                    None,
                    full(json),
                )
                .await?;
            let verb = if response.status() == StatusCode::CREATED {
                "created"
            } else {
                "replaced"
            };
            // Read whole so the connection ends cleanly; shown only with --json.
            let answer = Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|body| body.to_bytes());
            if print_json {
                let answer =
                    answer.map_err(|e| anyhow::anyhow!("reading the daemon's answer: {e}"))?;
                let raw: serde_json::Value =
                    serde_json::from_slice(&answer).context("bad secret from the daemon")?;
                crate::output::json(&mut out, &raw)?;
            } else {
                writeln!(out, "secret {name} {verb}")?;
            }
        }
        SecretCommand::Ls { json: true } => {
            let raw: serde_json::Value = client
                .json(Method::GET, "/v1/secrets", None::<&()>, "a secret list")
                .await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
        }
        SecretCommand::Ls { json: false } => {
            let list: SecretList = client
                .json(Method::GET, "/v1/secrets", None::<&()>, "a secret list")
                .await?;
            out.write_all(secret_table(&list.secrets).as_bytes())?;
        }
        SecretCommand::Rm { name, json } => {
            client
                .no_content(
                    Method::DELETE,
                    &format!("/v1/secrets/{}", path_segment(&name)),
                    None::<&()>,
                )
                .await?;
            if json {
                crate::output::json(&mut out, &serde_json::json!({ "deleted": name }))?;
            } else {
                writeln!(out, "secret {name} deleted")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn secret_table(secrets: &[SecretView]) -> String {
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|s| vec![s.name.clone(), s.updated_at.clone()])
        .collect();
    table(&["NAME", "UPDATED"], &rows)
}

fn read_file(path: &Path) -> anyhow::Result<Value> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read_value(file).with_context(|| format!("reading the value from {}", path.display()))
}

fn read_stdin(name: &str) -> anyhow::Result<Value> {
    let stdin = std::io::stdin();
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
        let mut err = std::io::stderr().lock();
        write!(err, "value of secret {name} (not echoed): ")?;
        err.flush()?;
        let echo_off = EchoOff::new(libc::STDIN_FILENO)?;
        let mut line = Value(Vec::new());
        let read = stdin.lock().read_until(b'\n', &mut line.0);
        drop(echo_off);
        writeln!(err)?;
        read.context("reading the value from the terminal")?;
        return finish(line);
    }
    read_value(stdin.lock()).context("reading the value from stdin")
}

/// Reads at most a little more than the largest value, then [`finish`]es it.
fn read_value(reader: impl std::io::Read) -> anyhow::Result<Value> {
    let mut value = Value(Vec::new());
    reader.take(MAX_VALUE_BYTES + 3).read_to_end(&mut value.0)?;
    if value.0.len() as u64 > MAX_VALUE_BYTES + 2 {
        bail!("the value is over {MAX_VALUE_BYTES} bytes");
    }
    finish(value)
}

/// Drops one trailing "\n" or "\r\n"; an empty value is refused.
fn finish(mut value: Value) -> anyhow::Result<Value> {
    if value.0.ends_with(b"\r\n") {
        value.0.truncate(value.0.len() - 2);
    } else if value.0.ends_with(b"\n") {
        value.0.truncate(value.0.len() - 1);
    }
    if value.0.is_empty() {
        bail!("the value is empty: give it on stdin (`berth secret set NAME < file`) or with --from-file");
    }
    Ok(value)
}

/// Turns the terminal's echo off until dropped.
struct EchoOff {
    fd: libc::c_int,
    saved: libc::termios,
}

impl EchoOff {
    fn new(fd: libc::c_int) -> anyhow::Result<EchoOff> {
        // SAFETY: termios is plain data; tcgetattr fills it for a valid descriptor.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `saved` is a valid termios to write into.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error()).context("reading the terminal's mode");
        }
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        quiet.c_lflag |= libc::ECHONL;
        // SAFETY: `quiet` is a valid termios derived from the current one.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) } != 0 {
            return Err(std::io::Error::last_os_error()).context("turning the terminal's echo off");
        }
        Ok(EchoOff { fd, saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores the mode read in `new` on the same descriptor.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
        read_value(bytes).map(|v| v.0.clone())
    }

    #[test]
    fn one_trailing_newline_is_dropped() {
        assert_eq!(read(b"sk-1\n").unwrap(), b"sk-1");
        assert_eq!(read(b"sk-1\r\n").unwrap(), b"sk-1");
        assert_eq!(read(b"sk-1").unwrap(), b"sk-1");
        assert_eq!(read(b"sk-1\n\n").unwrap(), b"sk-1\n");
    }

    #[test]
    fn empty_and_oversized_values_are_refused() {
        assert!(read(b"").is_err());
        assert!(read(b"\n").is_err());
        assert!(read(b"\r\n").is_err());
        assert!(read(&vec![b'a'; 8192]).is_ok());
        assert!(read(&vec![b'a'; 9000]).is_err());
    }

    #[test]
    fn the_table_has_names_and_times() {
        let list: SecretList = serde_json::from_value(serde_json::json!({
            "secrets": [{"name": "anthropic", "created_at": "t0", "updated_at": "t1"}]
        }))
        .unwrap();
        assert_eq!(
            secret_table(&list.secrets),
            "NAME        UPDATED\nanthropic   t1\n"
        );
    }
}
