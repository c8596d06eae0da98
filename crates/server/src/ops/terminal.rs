//! Terminals (`GET /v1/boxes/{ref}/pty`): start a program on a new terminal in the box
//! (waking it), or find one that is still there, and attach to it.

use std::collections::BTreeMap;

use berth_protocol::guest::BoxUser;
use berth_protocol::terminal::{
    TerminalInfo, TerminalList, TerminalRequest, TerminalSize, MAX_GRACE_MS,
};
use berth_protocol::BoxId;
use berth_runtime::{GuestClient, TerminalStream};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::stream_limits::StreamLimits;

/// A program to start on a new terminal, as a client asked for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TerminalCommand {
    /// Empty: the user's login shell.
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub user: BoxUser,
    pub cwd: Option<String>,
    pub term: Option<String>,
    pub size: TerminalSize,
    pub grace_s: Option<u64>,
    /// The caller's name for the terminal (E2B's `tag`).
    pub tag: Option<String>,
}

/// What to attach to.
#[derive(Debug, Clone, PartialEq)]
pub enum TerminalTarget {
    New(TerminalCommand),
    /// A terminal started earlier, from `offset` (the bytes the client has), or from where
    /// the last attachment stopped; resized to `size` when given (the new client's window).
    Existing {
        id: String,
        offset: Option<u64>,
        size: Option<TerminalSize>,
    },
}

/// An attached terminal, with the client to resize and signal it, and when the client
/// attached to it counts as gone (so a dead connection cannot keep the box awake).
#[derive(Debug)]
pub struct Attached {
    pub client: GuestClient,
    pub id: String,
    pub stream: TerminalStream,
    pub limits: StreamLimits,
}

impl TerminalCommand {
    /// Checks the command and turns it into the guest channel's request.
    pub fn into_request(self) -> Result<TerminalRequest, OpError> {
        let invalid = |rule| Err(OpError::InvalidTerminal { rule });
        if self.cmd.iter().any(|a| a.contains('\0')) {
            return invalid("cmd must not contain NUL");
        }
        if self
            .env
            .iter()
            .any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return invalid("env must be NAME=value, with no NUL");
        }
        if !(1..=4096).contains(&self.size.cols) || !(1..=4096).contains(&self.size.rows) {
            return invalid("cols and rows must be between 1 and 4096");
        }
        if self.term.as_ref().is_some_and(|t| {
            t.is_empty() || t.len() > 64 || !t.bytes().all(|b| b.is_ascii_graphic())
        }) {
            return invalid("term must be a terminal type name such as xterm-256color");
        }
        let grace_ms = self.grace_s.map(|s| s.saturating_mul(1000));
        if grace_ms.is_some_and(|ms| ms > MAX_GRACE_MS) {
            return invalid("grace_s must be at most 86400");
        }
        if let Some(cwd) = &self.cwd {
            crate::validate::box_path(cwd)?;
        }
        Ok(TerminalRequest {
            argv: self.cmd,
            env: self.env,
            cwd: self.cwd,
            user: self.user,
            size: self.size,
            term: self.term,
            grace_ms,
            tag: self.tag,
        })
    }
}

/// The box's terminals; none when it is not running (they ended with it).
pub async fn list(ctx: &Ctx, id: &BoxId) -> Result<TerminalList, OpError> {
    let client = ctx.boxes.slot(id).lifecycle.lock().await.client.clone();
    match client {
        Some(client) => Ok(client.terminals().await?),
        None => Ok(TerminalList::default()),
    }
}

/// Sends `signal` (a name without `SIG`) to a terminal's process group.
pub async fn signal(ctx: &Ctx, id: &BoxId, terminal: &str, signal: &str) -> Result<(), OpError> {
    Ok(running(ctx, id, terminal)
        .await?
        .terminal_signal(terminal, signal)
        .await?)
}

/// Sets a terminal's window size (its program gets `SIGWINCH`).
pub async fn resize(
    ctx: &Ctx,
    id: &BoxId,
    terminal: &str,
    size: TerminalSize,
) -> Result<(), OpError> {
    Ok(running(ctx, id, terminal)
        .await?
        .terminal_resize(terminal, size)
        .await?)
}

/// The running boot's client; a stopped box has no terminals.
async fn running(ctx: &Ctx, id: &BoxId, terminal: &str) -> Result<GuestClient, OpError> {
    let client = ctx.boxes.slot(id).lifecycle.lock().await.client.clone();
    client.ok_or_else(|| OpError::NoSuchProcess {
        id: terminal.to_owned(),
    })
}

/// Starts or finds the terminal and attaches to it. The caller holds an activity guard
/// for as long as it stays attached.
pub async fn attach(ctx: &Ctx, id: &BoxId, target: TerminalTarget) -> Result<Attached, OpError> {
    let (terminal, offset, size) = match target {
        TerminalTarget::New(command) => return Ok(open(ctx, id, command).await?.1),
        TerminalTarget::Existing { id, offset, size } => (id, offset, size),
    };
    if size.is_some_and(|s| !(1..=4096).contains(&s.cols) || !(1..=4096).contains(&s.rows)) {
        return Err(OpError::InvalidTerminal {
            rule: "cols and rows must be between 1 and 4096",
        });
    }
    let limits = ctx.stream_limits;
    ctx.lifecycle()
        .with_guest(id, |client| {
            let terminal = terminal.clone();
            async move {
                if let Some(size) = size {
                    client.terminal_resize(&terminal, size).await?;
                }
                let stream = client.terminal_attach(&terminal, offset).await?;
                Ok(Attached {
                    client,
                    id: terminal,
                    stream,
                    limits,
                })
            }
        })
        .await
}

/// Starts a program on a new terminal and attaches to it from its first byte; also the
/// terminal as the agent reported it (its pid, for E2B's PTYs).
pub async fn open(
    ctx: &Ctx,
    id: &BoxId,
    mut command: TerminalCommand,
) -> Result<(TerminalInfo, Attached), OpError> {
    // The box's env (PATCH /v1/boxes/{ref}) under the client's own.
    command.env = crate::box_env::env_for_box(ctx, id, std::mem::take(&mut command.env))?;
    let request = command.into_request()?;
    let limits = ctx.stream_limits;
    ctx.lifecycle()
        .with_guest(id, |client| {
            let request = request.clone();
            async move {
                let info = client.terminal_open(&request).await?;
                let stream = client.terminal_attach(&info.id, Some(0)).await?;
                let attached = Attached {
                    client,
                    id: info.id.clone(),
                    stream,
                    limits,
                };
                Ok((info, attached))
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_checked() {
        let ok = TerminalCommand {
            cmd: vec!["bash".into()],
            grace_s: Some(5),
            ..Default::default()
        };
        let req = ok.clone().into_request().unwrap();
        assert_eq!(req.grace_ms, Some(5000));
        assert_eq!(req.size, TerminalSize { cols: 80, rows: 24 });
        let bad = [
            TerminalCommand {
                cmd: vec!["a\0".into()],
                ..ok.clone()
            },
            TerminalCommand {
                size: TerminalSize { cols: 0, rows: 5 },
                ..ok.clone()
            },
            TerminalCommand {
                term: Some("x term".into()),
                ..ok.clone()
            },
            TerminalCommand {
                grace_s: Some(86_401),
                ..ok.clone()
            },
            TerminalCommand {
                cwd: Some("relative".into()),
                ..ok.clone()
            },
        ];
        for command in bad {
            assert!(command.clone().into_request().is_err(), "{command:?}");
        }
    }
}
