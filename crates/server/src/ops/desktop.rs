//! `/v1/boxes/{ref}/desktop…`: computer use on a box with a desktop (docs/desktop.md). Every
//! call refuses a box whose template has no X server before anything wakes it, then wakes
//! the box and waits (up to [`SETTLE_DEADLINE_S`]) for its services to settle, then runs
//! its steps in the box as its user on [`DESKTOP_DISPLAY`], one exec each.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_protocol::service::ServiceInfo;
use berth_runtime::error_chain;
use berth_store::BoxRecord;

use crate::ctx::Ctx;
use crate::desktop::action::{Action, MAX_ACTIONS};
use crate::desktop::error::Step;
use crate::desktop::names::{DESKTOP_DISPLAY, XVFB_SERVICE};
use crate::desktop::settle::{self, Look};
use crate::desktop::xdotool::{self, Command, STEP_TIMEOUT_S};
use crate::desktop::{
    ActionsDone, Cursor, DesktopError, DesktopStatus, MAX_SCREENSHOT_BYTES, SETTLE_DEADLINE_S,
};
use crate::error::OpError;
use crate::ops::box_find;
use crate::ops::exec::{exec_collect, ExecCommand};
use crate::ops::files::{self, FileTarget};
use crate::ops::service;

/// The most of a program's stderr an error carries.
const STDERR_KEPT_BYTES: usize = 4096;
/// The first bytes of every PNG file.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// The display's size, and whether (and how soon after its boot began) the desktop was
/// ready.
pub async fn status(ctx: &Ctx, record: &BoxRecord) -> Result<DesktopStatus, OpError> {
    let services = open(ctx, record).await?;
    let stdout = run(
        ctx,
        record,
        Step::Geometry,
        xdotool::geometry_argv(),
        STEP_TIMEOUT_S,
    )
    .await?;
    let (width, height) = xdotool::parse_geometry(&stdout)
        .ok_or_else(|| unreadable(record, Step::Geometry, stdout))?;
    // The record as the wake left it: its last boot is the one that runs.
    let began_at_ms = box_find::reload(ctx, &record.id)?
        .last_boot
        .and_then(|boot| boot.began_at_ms);
    Ok(DesktopStatus {
        display: DESKTOP_DISPLAY.to_owned(),
        width,
        height,
        ready: settle::ready(&services),
        ready_after_ms: settle::ready_after_ms(&services, began_at_ms),
    })
}

/// A PNG of the whole screen (with the pointer drawn in it when `with_pointer`), at most
/// [`MAX_SCREENSHOT_BYTES`]: scrot writes it to a file of a random name in the box's `/tmp`,
/// read and removed through the file calls.
pub async fn screenshot(
    ctx: &Ctx,
    record: &BoxRecord,
    with_pointer: bool,
) -> Result<Vec<u8>, OpError> {
    open(ctx, record).await?;
    let _busy = ctx.activity.begin(&record.id);
    let file = FileTarget {
        path: shot_path()?,
        user: BoxUser::User,
        recursive: false,
        mode: None,
    };
    let argv = xdotool::screenshot_argv(with_pointer, &file.path);
    let shot = async {
        run(ctx, record, Step::Screenshot, argv, STEP_TIMEOUT_S).await?;
        read_shot(ctx, record, &file).await
    }
    .await;
    // Whatever became of it: a failed scrot may have left a part.
    if let Err(e) = files::remove(ctx, &record.id, &file).await {
        tracing::debug!(box_id = %record.id, path = file.path, error = %error_chain(&e), "cannot remove a screenshot's file");
    }
    let png = shot?;
    if !png.starts_with(PNG_SIGNATURE) {
        let start = String::from_utf8_lossy(&png[..png.len().min(64)]).into_owned();
        return Err(unreadable(record, Step::Screenshot, start));
    }
    Ok(png)
}

/// `/tmp/berth-shot-<16 random hex digits>.png`.
fn shot_path() -> Result<String, OpError> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("/tmp/berth-shot-{hex}.png"))
}

/// The screenshot's bytes, refused past [`MAX_SCREENSHOT_BYTES`] as soon as that shows.
async fn read_shot(ctx: &Ctx, record: &BoxRecord, file: &FileTarget) -> Result<Vec<u8>, OpError> {
    let too_large = || DesktopError::ScreenshotTooLarge {
        name: record.name.clone(),
        limit_bytes: MAX_SCREENSHOT_BYTES,
    };
    let mut read = files::read(ctx, &record.id, file).await?;
    let size = read.download.size_bytes().unwrap_or(0);
    if size > MAX_SCREENSHOT_BYTES as u64 {
        return Err(too_large().into());
    }
    let mut png = Vec::with_capacity(size as usize);
    while let Some(chunk) = read.download.next_chunk().await? {
        if png.len() + chunk.len() > MAX_SCREENSHOT_BYTES {
            return Err(too_large().into());
        }
        png.extend_from_slice(&chunk);
    }
    Ok(png)
}

/// Runs `actions` in order, then answers where the pointer is. Every action is checked
/// before the box is woken; the first step that fails ends the call (the actions before
/// it have been done).
pub async fn act(
    ctx: &Ctx,
    record: &BoxRecord,
    actions: &[Action],
) -> Result<ActionsDone, OpError> {
    let plan = plan(actions)?;
    open(ctx, record).await?;
    // Awake throughout, `wait`s included.
    let _busy = ctx.activity.begin(&record.id);
    for (index, (action, commands)) in actions.iter().zip(plan).enumerate() {
        let step = Step::Action {
            index,
            kind: action.kind(),
        };
        for command in commands {
            match command {
                Command::Run { argv, timeout_s } => {
                    run(ctx, record, step, argv, timeout_s).await?;
                }
                Command::Sleep(pause) => tokio::time::sleep(pause).await,
            }
        }
    }
    Ok(ActionsDone {
        cursor: pointer(ctx, record).await?,
    })
}

/// Where the pointer is.
pub async fn cursor(ctx: &Ctx, record: &BoxRecord) -> Result<Cursor, OpError> {
    open(ctx, record).await?;
    pointer(ctx, record).await
}

/// The steps of every action, or the first one that is refused.
fn plan(actions: &[Action]) -> Result<Vec<Vec<Command>>, DesktopError> {
    if actions.len() > MAX_ACTIONS {
        return Err(DesktopError::TooManyActions {
            count: actions.len(),
        });
    }
    actions
        .iter()
        .enumerate()
        .map(|(index, action)| {
            action
                .check()
                .and_then(|()| xdotool::commands(action))
                .map_err(|problem| DesktopError::InvalidAction {
                    index,
                    kind: action.kind(),
                    problem,
                })
        })
        .collect()
}

/// Refuses a box whose template declares no `service` (the X server for the computer-use
/// calls, the VNC server for watching), without waking it. A box whose template is gone
/// goes on: its start says why it cannot, a running one's services tell.
pub fn require(ctx: &Ctx, record: &BoxRecord, service: &'static str) -> Result<(), DesktopError> {
    match ctx.templates.get(&record.template) {
        Some(template) if !template.services.iter().any(|s| s.name == service) => {
            Err(DesktopError::NoDesktop {
                name: record.name.clone(),
                template: record.template.clone(),
                service,
            })
        }
        _ => Ok(()),
    }
}

/// Wakes the box and waits for its services to settle; answers them.
async fn open(ctx: &Ctx, record: &BoxRecord) -> Result<Vec<ServiceInfo>, OpError> {
    require(ctx, record, XVFB_SERVICE)?;
    let _busy = ctx.activity.begin(&record.id);
    ctx.lifecycle().wake(&record.id).await?;
    let within = Duration::from_secs(SETTLE_DEADLINE_S);
    let (services, _) = service::wait_for(ctx, record, within, |services| {
        !matches!(settle::look(services), Look::Settling { .. })
    })
    .await?;
    let name = record.name.clone();
    let refusal = match settle::look(&services) {
        Look::Settled => return Ok(services),
        Look::Settling { pending } => DesktopError::NotSettled {
            name,
            waited_s: SETTLE_DEADLINE_S,
            pending,
        },
        Look::XvfbFailed { reason } => DesktopError::XvfbFailed { name, reason },
        Look::XvfbExited => DesktopError::XvfbExited { name },
        Look::NotRunning => DesktopError::NotRunning { name },
        Look::NoXvfb => DesktopError::NoDesktop {
            name,
            template: record.template.clone(),
            service: XVFB_SERVICE,
        },
    };
    Err(refusal.into())
}

async fn pointer(ctx: &Ctx, record: &BoxRecord) -> Result<Cursor, OpError> {
    let stdout = run(
        ctx,
        record,
        Step::Cursor,
        xdotool::cursor_argv(),
        STEP_TIMEOUT_S,
    )
    .await?;
    let (x, y) =
        xdotool::parse_cursor(&stdout).ok_or_else(|| unreadable(record, Step::Cursor, stdout))?;
    Ok(Cursor { x, y })
}

/// Runs one program of `step` to its end; answers its stdout.
async fn run(
    ctx: &Ctx,
    record: &BoxRecord,
    step: Step,
    argv: Vec<String>,
    timeout_s: u64,
) -> Result<String, OpError> {
    let output = exec_collect(ctx, &record.id, desktop_command(argv, timeout_s))
        .await
        .map_err(|e| refused(record, step, e))?;
    if output.exit_code != 0 || output.timed_out {
        let mut end = output.stderr.len().min(STDERR_KEPT_BYTES);
        while !output.stderr.is_char_boundary(end) {
            end -= 1;
        }
        let stderr = output.stderr[..end].to_owned();
        return Err(failed(
            record,
            step,
            Some(output.exit_code),
            output.timed_out,
            stderr,
        ));
    }
    if let Some(said) = xdotool::unknown_key(&output.stderr) {
        return Err(DesktopError::UnknownKey {
            name: record.name.clone(),
            step,
            said: said.to_owned(),
        }
        .into());
    }
    Ok(output.stdout)
}

/// `argv` as the box's user, on the desktop's display.
fn desktop_command(argv: Vec<String>, timeout_s: u64) -> ExecCommand {
    ExecCommand {
        cmd: argv,
        env: BTreeMap::from([("DISPLAY".to_owned(), DESKTOP_DISPLAY.to_owned())]),
        cwd: None,
        stdin: None,
        user: BoxUser::User,
        timeout_s: Some(timeout_s),
    }
}

/// The box's refusal to run a step's program (not there, …) is the step's failure.
fn refused(record: &BoxRecord, step: Step, error: OpError) -> OpError {
    match error {
        OpError::ExecRefused { message, .. } => failed(record, step, None, false, message),
        other => other,
    }
}

fn failed(
    record: &BoxRecord,
    step: Step,
    exit_code: Option<i32>,
    timed_out: bool,
    stderr: String,
) -> OpError {
    DesktopError::StepFailed {
        name: record.name.clone(),
        step,
        exit_code,
        timed_out,
        stderr,
    }
    .into()
}

fn unreadable(record: &BoxRecord, step: Step, stdout: String) -> OpError {
    DesktopError::Unreadable {
        name: record.name.clone(),
        step,
        stdout,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn actions(values: serde_json::Value) -> Vec<Action> {
        serde_json::from_value(values).unwrap()
    }

    #[test]
    fn a_plan_refuses_too_many_actions_or_the_first_bad_one_by_its_index() {
        let many = vec![Action::Wait { ms: 1 }; MAX_ACTIONS + 1];
        assert!(matches!(
            plan(&many),
            Err(DesktopError::TooManyActions { count: 101 })
        ));
        assert_eq!(plan(&many[1..]).unwrap().len(), MAX_ACTIONS);
        let bad = actions(json!([
            {"type": "move", "x": 1, "y": 1},
            {"type": "key", "keys": "ctrl+;"},
            {"type": "wait", "ms": 1_000_000},
        ]));
        let refused = plan(&bad).unwrap_err();
        assert!(
            matches!(
                refused,
                DesktopError::InvalidAction {
                    index: 1,
                    kind: "key",
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(
            berth_runtime::error_chain(&refused),
            "invalid actions[1] (key): keys \"ctrl+;\" holds ';': keys are letters, digits, `_` and `-`, joined by `+` within a combination and by spaces between combinations"
        );
    }

    #[test]
    fn a_desktop_command_runs_as_the_user_on_the_display() {
        let command = desktop_command(xdotool::cursor_argv(), 5);
        assert_eq!(command.user, BoxUser::User);
        assert_eq!(command.env["DISPLAY"], ":0");
        assert_eq!(command.timeout_s, Some(5));
        assert_eq!(command.cmd[0], "xdotool");
    }
}
