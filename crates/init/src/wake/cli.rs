//! `berth-wake`: the box asks berth to wake it later with a message.
//!
//! ```text
//! berth-wake in 2h "check the build"            # also 90, 90s, 15m, 1h30m, 1d
//! berth-wake at 2026-12-02T09:00+01:00 "…"      # no offset: UTC; seconds optional
//! berth-wake cron "0 9 * * 1-5" [--tz Europe/Paris] "…"
//! berth-wake ls
//! berth-wake rm wk_…
//! ```
//!
//! Exit status: 0 done, 1 refused or failed (one line on stderr says why), 2 usage.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use berth_protocol::wake::{WakeOp, WakeReply, WakeSchedule, WAKE_SOCKET};
use serde_json::Value;

use super::relay::REPLY_TIMEOUT;

const USAGE: &str = "usage:
  berth-wake in DURATION MESSAGE...          e.g. in 2h \"check the build\" (s, m, h, d; 1h30m)
  berth-wake at TIME MESSAGE...              e.g. at 2026-12-02T09:00+01:00 \"…\" (no offset: UTC)
  berth-wake cron EXPR [--tz ZONE] MESSAGE...  5 fields, e.g. cron \"0 9 * * 1-5\" --tz Europe/Paris \"…\"
  berth-wake ls                              list this box's pending wakeups
  berth-wake rm ID                           cancel one
Each wakeup posts MESSAGE to this box's harness when it is due, waking the box if it sleeps.
This box's own wakeups are limited by the host (berth.toml [wakeups]): each at least
box_min_delay_s ahead (a cron's slots that far apart), at most box_max_crons crons, and at
most box_max_per_hour made and box_max_per_hour slots fired an hour: a slot past that is
skipped, not queued (ls counts the skipped).";

/// Runs the command and exits.
pub fn main() -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let op = match parse(&args) {
        Ok(Some(op)) => op,
        Ok(None) => {
            println!("{USAGE}");
            std::process::exit(0)
        }
        Err(msg) => {
            eprintln!("berth-wake: {msg}\n{USAGE}");
            std::process::exit(2)
        }
    };
    match call(&op) {
        Ok(reply) if (200..300).contains(&reply.status) => {
            print!("{}", show(&op, &reply.body));
            std::process::exit(0)
        }
        Ok(reply) => {
            let message = reply.body["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("refused with status {}", reply.status));
            eprintln!("berth-wake: {message}");
            std::process::exit(1)
        }
        Err(err) => {
            eprintln!("berth-wake: cannot reach berth-init at {WAKE_SOCKET}: {err}");
            std::process::exit(1)
        }
    }
}

fn call(op: &WakeOp) -> std::io::Result<WakeReply> {
    let mut stream = UnixStream::connect(WAKE_SOCKET)?;
    // berth-init answers within its own timeout; this one only guards against a wedged one.
    stream.set_read_timeout(Some(REPLY_TIMEOUT + Duration::from_secs(5)))?;
    let mut line = serde_json::to_vec(op)?;
    line.push(b'\n');
    // A refusal may come before the whole request is written (a request past the size
    // limit): the answer is read even when the write broke off.
    let written = stream.write_all(&line);
    let mut answer = String::new();
    match BufReader::new(stream).read_line(&mut answer) {
        Ok(_) if !answer.is_empty() => serde_json::from_str(&answer).map_err(std::io::Error::other),
        read => {
            written?;
            read?;
            Err(std::io::Error::other(
                "berth-init closed the connection without an answer",
            ))
        }
    }
}

/// `None`: help was asked for.
fn parse(args: &[String]) -> Result<Option<WakeOp>, String> {
    let Some((verb, rest)) = args.split_first() else {
        return Err("no command".into());
    };
    let message = |words: &[String]| -> Result<String, String> {
        let message = words.join(" ");
        if message.trim().is_empty() {
            return Err("no MESSAGE given".into());
        }
        Ok(message)
    };
    let schedule = WakeSchedule::default();
    Ok(Some(match verb.as_str() {
        "-h" | "--help" | "help" => return Ok(None),
        "ls" | "list" if rest.is_empty() => WakeOp::List,
        "rm" | "remove" => match rest {
            [id] => WakeOp::Remove { id: id.clone() },
            _ => return Err("rm takes one wakeup id".into()),
        },
        "in" => {
            let (when, words) = rest.split_first().ok_or("in needs a DURATION")?;
            WakeOp::Add {
                schedule: WakeSchedule {
                    in_s: Some(duration_s(when)?),
                    ..schedule
                },
                message: message(words)?,
            }
        }
        "at" => {
            let (when, words) = rest.split_first().ok_or("at needs a TIME")?;
            WakeOp::Add {
                schedule: WakeSchedule {
                    at: Some(rfc3339(when)?),
                    ..schedule
                },
                message: message(words)?,
            }
        }
        "cron" => {
            let (expr, mut words) = rest.split_first().ok_or("cron needs an EXPR")?;
            let mut tz = None;
            if let [flag, zone, more @ ..] = words {
                if flag == "--tz" {
                    tz = Some(zone.clone());
                    words = more;
                }
            } else if let [flag] = words {
                if flag == "--tz" {
                    return Err("--tz needs a ZONE".into());
                }
            }
            WakeOp::Add {
                schedule: WakeSchedule {
                    cron: Some(expr.clone()),
                    tz,
                    ..schedule
                },
                message: message(words)?,
            }
        }
        other => return Err(format!("unknown command {other:?}")),
    }))
}

/// `90`, `90s`, `15m`, `2h`, `1d`, `1h30m`.
fn duration_s(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration like 90s, 15m, 2h, 1d or 1h30m");
    if let Ok(s) = text.parse::<u64>() {
        return Ok(s);
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = number.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(bad)?;
        number.clear();
    }
    if !number.is_empty() {
        return Err(bad());
    }
    Ok(total)
}

/// `2026-12-02T09:00`, `…:30`, with `Z` or `±HH:MM` (none: UTC), as RFC 3339.
fn rfc3339(text: &str) -> Result<String, String> {
    let bad =
        || format!("{text:?} is not a time like 2026-12-02T09:00 or 2026-12-02T09:00:00+01:00");
    let (date, time) = text.split_once(['T', 't', ' ']).ok_or_else(bad)?;
    let offset_at = time.find(['Z', 'z', '+', '-']).unwrap_or(time.len());
    let (clock, offset) = time.split_at(offset_at);
    let clock = match clock.len() {
        5 => format!("{clock}:00"),
        8 => clock.to_owned(),
        _ if clock.len() > 9 && clock.as_bytes()[8] == b'.' => clock.to_owned(),
        _ => return Err(bad()),
    };
    let offset = if offset.is_empty() { "Z" } else { offset };
    if date.len() != 10 {
        return Err(bad());
    }
    Ok(format!("{date}T{clock}{}", offset.to_ascii_uppercase()))
}

/// What a successful answer prints.
fn show(op: &WakeOp, body: &Value) -> String {
    match op {
        WakeOp::Add { .. } => format!(
            "{} set: next at {}\n",
            body["id"].as_str().unwrap_or("?"),
            body["next_due_at"].as_str().unwrap_or("?")
        ),
        WakeOp::Remove { id } => format!("{id} cancelled\n"),
        WakeOp::List => {
            let mut out = String::new();
            for w in body["wakeups"].as_array().into_iter().flatten() {
                let kind = match w["cron"].as_str() {
                    Some(cron) => format!("cron {cron:?} {}", w["tz"].as_str().unwrap_or("UTC")),
                    None => w["kind"].as_str().unwrap_or("?").to_owned(),
                };
                let skipped = match w["skipped"].as_u64() {
                    Some(n) if n > 0 => format!("  ({n} skipped: over box_max_per_hour)"),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "{}  {}  {}  {}{skipped}\n",
                    w["id"].as_str().unwrap_or("?"),
                    w["next_due_at"].as_str().unwrap_or("?"),
                    kind,
                    w["message"].as_str().unwrap_or("")
                ));
            }
            if out.is_empty() {
                out.push_str("no wakeups\n");
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn durations_and_times_read_as_people_write_them() {
        assert_eq!(duration_s("90").unwrap(), 90);
        assert_eq!(duration_s("2h").unwrap(), 7200);
        assert_eq!(duration_s("1h30m").unwrap(), 5400);
        assert_eq!(duration_s("1d").unwrap(), 86_400);
        assert!(duration_s("2x").is_err());
        assert!(duration_s("h").is_err());
        assert!(duration_s("5m3").is_err());
        assert_eq!(rfc3339("2026-12-02T09:00").unwrap(), "2026-12-02T09:00:00Z");
        assert_eq!(
            rfc3339("2026-12-02T09:00+01:00").unwrap(),
            "2026-12-02T09:00:00+01:00"
        );
        assert_eq!(
            rfc3339("2026-12-02T09:00:30z").unwrap(),
            "2026-12-02T09:00:30Z"
        );
        assert!(rfc3339("tomorrow").is_err());
    }

    #[test]
    fn commands_become_requests() {
        assert_eq!(
            parse(&args(&["in", "2h", "check", "the", "build"])).unwrap(),
            Some(WakeOp::Add {
                schedule: WakeSchedule {
                    in_s: Some(7200),
                    ..Default::default()
                },
                message: "check the build".into()
            })
        );
        assert_eq!(
            parse(&args(&[
                "cron",
                "0 9 * * 1-5",
                "--tz",
                "Europe/Paris",
                "standup"
            ]))
            .unwrap(),
            Some(WakeOp::Add {
                schedule: WakeSchedule {
                    cron: Some("0 9 * * 1-5".into()),
                    tz: Some("Europe/Paris".into()),
                    ..Default::default()
                },
                message: "standup".into()
            })
        );
        assert_eq!(parse(&args(&["ls"])).unwrap(), Some(WakeOp::List));
        assert_eq!(
            parse(&args(&["rm", "wk_1"])).unwrap(),
            Some(WakeOp::Remove { id: "wk_1".into() })
        );
        assert!(parse(&args(&["in", "2h"])).is_err());
        assert!(parse(&args(&["cron", "* * * * *", "--tz"])).is_err());
        assert!(parse(&args(&["sleep"])).is_err());
        assert_eq!(parse(&args(&["--help"])).unwrap(), None);
    }

    #[test]
    fn ls_says_how_many_slots_the_limit_skipped() {
        let body = serde_json::json!({"wakeups": [
            {"id": "wk_1", "next_due_at": "2026-12-02T09:00:00Z", "kind": "cron",
             "cron": "* * * * *", "tz": "UTC", "message": "tick", "skipped": 3},
            {"id": "wk_2", "next_due_at": "2026-12-02T10:00:00Z", "kind": "in",
             "message": "once", "skipped": 0},
        ]});
        let shown = show(&WakeOp::List, &body);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines,
            [
                "wk_1  2026-12-02T09:00:00Z  cron \"* * * * *\" UTC  tick  (3 skipped: over box_max_per_hour)",
                "wk_2  2026-12-02T10:00:00Z  in  once",
            ]
        );
    }
}
