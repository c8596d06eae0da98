//! Finding the process or PTY a request names, and `List`. envd knows only the processes
//! running now, so only those are selected or listed here (berth keeps exited ones a while
//! for their output; the SDKs are told `not_found` for those, as envd would).

use berth_e2b_wire::process::{
    process_selector::Selector, ListResponse, ProcessConfig, ProcessInfo as WireInfo,
    ProcessSelector,
};
use berth_e2b_wire::ConnectError;
use berth_protocol::process::ProcessInfo;
use berth_protocol::terminal::TerminalInfo;

use super::{box_of, ProcessCallError};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::error::connect_error;
use crate::ops::{process, terminal};

/// A running process or PTY.
#[derive(Debug, Clone)]
pub enum Target {
    Process(ProcessInfo),
    Terminal(TerminalInfo),
}

/// The running process or PTY `selector` names; `not_found` when none does.
pub async fn find(
    ctx: &Ctx,
    caller: &EnvdCaller,
    selector: Option<ProcessSelector>,
) -> Result<Target, ConnectError> {
    let selector = selector
        .and_then(|s| s.selector)
        .ok_or(ProcessCallError::NoSelector)?;
    let matches = |pid: u32, tag: &Option<String>| match &selector {
        Selector::Pid(wanted) => pid == *wanted,
        Selector::Tag(wanted) => tag.as_deref() == Some(wanted.as_str()),
    };
    let (processes, terminals) = running(ctx, caller).await?;
    let found = processes
        .into_iter()
        .find(|p| matches(p.pid, &p.tag))
        .map(Target::Process)
        .or_else(|| {
            terminals
                .into_iter()
                .find(|t| matches(t.pid, &t.tag))
                .map(Target::Terminal)
        });
    found.ok_or_else(|| {
        let selector = match selector {
            Selector::Pid(pid) => format!("pid {pid}"),
            Selector::Tag(tag) => format!("tag {tag:?}"),
        };
        ProcessCallError::NotFound { selector }.into()
    })
}

/// `List`: the running processes and PTYs, each with the config it was started with.
pub async fn list(ctx: &Ctx, caller: &EnvdCaller) -> Result<ListResponse, ConnectError> {
    let (processes, terminals) = running(ctx, caller).await?;
    let config = |argv: Vec<String>, env, cwd| {
        let mut argv = argv.into_iter();
        ProcessConfig {
            cmd: argv.next().unwrap_or_default(),
            args: argv.collect(),
            envs: env,
            cwd,
        }
    };
    let processes = processes
        .into_iter()
        .map(|p| WireInfo {
            config: Some(config(p.argv, p.env.into_iter().collect(), p.cwd)),
            pid: p.pid,
            tag: p.tag,
        })
        .chain(terminals.into_iter().map(|t| WireInfo {
            config: Some(config(t.argv, t.env.into_iter().collect(), t.cwd)),
            pid: t.pid,
            tag: t.tag,
        }))
        .collect();
    Ok(ListResponse { processes })
}

/// The box's running processes and terminals (none while it is not running), asked for
/// side by side.
async fn running(
    ctx: &Ctx,
    caller: &EnvdCaller,
) -> Result<(Vec<ProcessInfo>, Vec<TerminalInfo>), ConnectError> {
    let id = box_of(caller);
    let (processes, terminals) = tokio::join!(process::list(ctx, id), terminal::list(ctx, id));
    let processes = processes.map_err(connect_error)?.processes;
    let terminals = terminals.map_err(connect_error)?.terminals;
    Ok((
        processes.into_iter().filter(|p| p.exit.is_none()).collect(),
        terminals.into_iter().filter(|t| t.exit.is_none()).collect(),
    ))
}
