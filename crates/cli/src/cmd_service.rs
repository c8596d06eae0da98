//! `berth service …`: a box's services (the daemons its template declares, which the box's
//! `berth-init` starts and supervises): list them, print one's log, restart one.

use berth_protocol::process::{ProcessExit, ProcessFrame};
use berth_protocol::service::{ServiceInfo, ServiceList, ServiceState};
use berth_protocol::ErrorCode;
use clap::{Args, Subcommand};
use http::Method;

use crate::args::box_path;
use crate::client::{empty, path_segment, Client, ClientError};
use crate::cmd_process::{read_frames, write_output};
use crate::output;
use crate::table::table;

/// Followed reconnects in a row that brought nothing before giving up.
const MAX_RESUMES: u32 = 5;

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// List a box's services (NAME, STATE, PID, RESTARTS, LAST-EXIT, READY-AT), and below
    /// the table each failed one's reason and the end of its log. Does not wake the box: a
    /// box that is not running lists its template's services as `stopped`.
    #[command(visible_alias = "list")]
    Ls {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a service's log (its stdout to stdout, its stderr to stderr), across its
    /// restarts; the box keeps the last 256 KiB of each. The box must be running.
    Logs(LogsArgs),
    /// Restart a service (waking the box): its running life is stopped and another one
    /// started at once. Prints the service as it is then.
    Restart {
        /// The box's name or id (`bx_…`).
        name: String,
        /// The service, as the template names it.
        service: String,
        /// Print the daemon's answer (the service) as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// The service, as the template names it.
    pub service: String,
    /// Keep printing what the service writes next, until the box stops (or ^C).
    #[arg(short, long)]
    pub follow: bool,
    /// Start at this log offset (bytes of stdout and stderr already seen).
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
}

pub async fn run(client: &Client, command: ServiceCommand) -> anyhow::Result<u8> {
    match command {
        ServiceCommand::Ls { name, json } => {
            let list: ServiceList = client
                .json(
                    Method::GET,
                    &box_path(&name, "/services"),
                    None::<&()>,
                    "service list",
                )
                .await?;
            if json {
                output::json(&mut std::io::stdout().lock(), &list)?;
            } else {
                print!("{}", list_text(&list));
            }
        }
        ServiceCommand::Logs(args) => logs(client, args).await?,
        ServiceCommand::Restart {
            name,
            service,
            json,
        } => {
            let info: ServiceInfo = client
                .json(
                    Method::POST,
                    &service_path(&name, &service, "/restart"),
                    None::<&()>,
                    "the restarted service",
                )
                .await?;
            if json {
                output::json(&mut std::io::stdout().lock(), &info)?;
            } else {
                println!("{}", restarted_text(&info));
            }
        }
    }
    Ok(0)
}

fn service_path(name: &str, service: &str, verb: &str) -> String {
    box_path(name, &format!("/services/{}{verb}", path_segment(service)))
}

/// Prints the log from `args.offset`; followed, a stream that ends is resumed from where
/// it got to, until the box is no longer running.
async fn logs(client: &Client, args: LogsArgs) -> anyhow::Result<()> {
    let mut offset = args.offset;
    let mut resumes = 0;
    loop {
        let path = format!(
            "{}?offset={offset}&follow={}",
            service_path(&args.name, &args.service, "/logs"),
            args.follow
        );
        let response = match client
            .send(
                Method::GET,
                &path,
                "application/x-ndjson",
                None,
                None,
                empty(),
            )
            .await
        {
            Ok(response) => response,
            // The box stopped while it was followed: its log ended with it.
            Err(ClientError::Api {
                code: ErrorCode::Conflict,
                ..
            }) if resumes > 0 => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let before = offset;
        read_frames(response.into_body(), |frame| {
            if let ProcessFrame::Output {
                stream,
                offset: at,
                data,
            } = frame
            {
                if at > offset {
                    eprintln!(
                        "berth: {} bytes of the log were no longer kept in the box (it keeps the last 256 KiB)",
                        at - offset
                    );
                }
                offset = at + data.len() as u64;
                write_output(stream, &data)?;
            }
            Ok(None::<()>)
        })
        .await?;
        if !args.follow {
            return Ok(());
        }
        resumes = if offset > before { 1 } else { resumes + 1 };
        anyhow::ensure!(
            resumes <= MAX_RESUMES,
            "the log stream of service {} keeps breaking; resume with `berth service logs {} {} -f --offset {offset}`",
            args.service,
            args.name,
            args.service
        );
    }
}

/// The table, then each failed service's reason and the end of its log.
fn list_text(list: &ServiceList) -> String {
    let rows: Vec<Vec<String>> = list
        .services
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                state_name(s.state).to_owned(),
                s.pid.map_or("-".to_owned(), |pid| pid.to_string()),
                s.restarts.to_string(),
                s.last_exit.as_ref().map_or("-".to_owned(), exit_text),
                s.ready_at_ms.map_or("-".to_owned(), time_text),
            ]
        })
        .collect();
    let mut text = table(
        &["NAME", "STATE", "PID", "RESTARTS", "LAST-EXIT", "READY-AT"],
        &rows,
    );
    for failed in list
        .services
        .iter()
        .filter(|s| s.state == ServiceState::Failed)
    {
        let reason = failed.reason.as_deref().unwrap_or("no reason given");
        text.push_str(&format!("\n{} failed: {reason}\n", failed.name));
        if let Some(tail) = failed.log_tail.as_deref().filter(|t| !t.is_empty()) {
            for line in tail.lines() {
                text.push_str(&format!("  | {line}\n"));
            }
        }
    }
    text
}

fn restarted_text(info: &ServiceInfo) -> String {
    let pid = info.pid.map_or(String::new(), |pid| format!(", pid {pid}"));
    format!(
        "{}: {}{pid}, restarts {}",
        info.name,
        state_name(info.state),
        info.restarts
    )
}

fn state_name(state: ServiceState) -> &'static str {
    match state {
        ServiceState::Waiting => "waiting",
        ServiceState::Starting => "starting",
        ServiceState::Running => "running",
        ServiceState::Restarting => "restarting",
        ServiceState::Stopping => "stopping",
        ServiceState::Exited => "exited",
        ServiceState::Failed => "failed",
        ServiceState::Stopped => "stopped",
        ServiceState::Unknown => "unknown",
    }
}

fn exit_text(exit: &ProcessExit) -> String {
    match (exit.code, exit.signal) {
        _ if exit.timed_out => "timed out".to_owned(),
        (Some(code), _) => format!("code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "-".to_owned(),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339, to the second, in UTC.
fn time_text(ms: u64) -> String {
    let seconds = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, state: ServiceState) -> ServiceInfo {
        ServiceInfo {
            name: name.into(),
            state,
            pid: None,
            restarts: 0,
            started_at_ms: None,
            ready_at_ms: None,
            last_exit: None,
            reason: None,
            log_end: 0,
            log_tail: None,
            keep_awake: false,
            after: Vec::new(),
        }
    }

    #[test]
    fn the_list_is_a_table_and_a_failed_service_says_why_below_it() {
        let web = ServiceInfo {
            pid: Some(42),
            restarts: 2,
            ready_at_ms: Some(1_700_000_000_123),
            ..service("web", ServiceState::Running)
        };
        let db = ServiceInfo {
            restarts: 5,
            last_exit: Some(ProcessExit {
                code: Some(3),
                signal: None,
                timed_out: false,
            }),
            reason: Some("exited 5 times within 10 s of starting".into()),
            log_tail: Some("boom\nbang\n".into()),
            ..service("db", ServiceState::Failed)
        };
        let text = list_text(&ServiceList {
            services: vec![web, db],
        });
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert!(lines[0].contains("READY-AT"), "{text}");
        assert!(
            lines[1].contains("running") && lines[1].contains("42"),
            "{text}"
        );
        assert!(lines[1].contains("2023-11-14T22:13:20Z"), "{text}");
        assert!(
            lines[2].contains("failed") && lines[2].contains("code 3"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\ndb failed: exited 5 times within 10 s of starting\n  | boom\n  | bang\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn an_exit_reads_as_its_code_signal_or_timeout() {
        let exit = |code, signal, timed_out| ProcessExit {
            code,
            signal,
            timed_out,
        };
        assert_eq!(exit_text(&exit(Some(0), None, false)), "code 0");
        assert_eq!(exit_text(&exit(None, Some(9), false)), "signal 9");
        assert_eq!(exit_text(&exit(None, Some(9), true)), "timed out");
    }

    #[test]
    fn a_restart_reads_as_the_service_after_it() {
        let info = ServiceInfo {
            pid: Some(7),
            restarts: 1,
            ..service("web", ServiceState::Starting)
        };
        assert_eq!(restarted_text(&info), "web: starting, pid 7, restarts 1");
        assert_eq!(
            service_path("my box", "web", "/restart"),
            "/v1/boxes/my%20box/services/web/restart"
        );
    }
}
