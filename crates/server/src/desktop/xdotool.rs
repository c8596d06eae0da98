//! The argvs the desktop calls run in the box (xdotool's for actions, the pointer and the
//! screen size; scrot's for a screenshot) and the readers of what they print. Pure: the
//! argvs are built from checked actions only, xdotool's command chaining (`mousemove … click
//! …`) does an action in one exec, and every free-form value comes after `--`.

use std::time::Duration;

use crate::desktop::action::{Action, ActionProblem, Button, Point, ScrollDirection};
use crate::desktop::keys;

/// Milliseconds between the characters `type` types.
pub const TYPE_DELAY_MS: u64 = 12;
/// The most bytes of text one `xdotool type` gets: a longer text is typed by several.
pub const TYPE_CHUNK_BYTES: usize = 1024;
/// How long one step may run in the box (a `hold_key` gets its hold on top).
pub const STEP_TIMEOUT_S: u64 = 60;
/// How long a `drag` waits after pressing and after moving, for the app to see a drag.
const DRAG_PAUSE: &str = "0.1";

/// One thing a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run this argv in the box, for at most `timeout_s`.
    Run { argv: Vec<String>, timeout_s: u64 },
    /// Wait on the host.
    Sleep(Duration),
}

/// What `action` runs, in order (a long `type` is several runs). The action must have
/// passed [`Action::check`]; its keys are checked again as they are mapped.
pub fn commands(action: &Action) -> Result<Vec<Command>, ActionProblem> {
    let one = |argv: Vec<String>| vec![run(argv, STEP_TIMEOUT_S)];
    Ok(match action {
        Action::Move { x, y } => one(xdotool(&["mousemove", &x.to_string(), &y.to_string()])),
        Action::Click {
            button,
            x,
            y,
            count,
        } => one(click(*button, *x, *y, count.unwrap_or(1))),
        Action::DoubleClick { button, x, y } => one(click(*button, *x, *y, 2)),
        Action::TripleClick { button, x, y } => one(click(*button, *x, *y, 3)),
        Action::MouseDown { button } => one(xdotool(&["mousedown", button_number(*button)])),
        Action::MouseUp { button } => one(xdotool(&["mouseup", button_number(*button)])),
        Action::Drag { from, to, button } => one(drag(*from, *to, *button)),
        Action::Scroll {
            direction,
            amount,
            x,
            y,
        } => {
            let mut argv = move_to(*x, *y);
            argv.extend(words(&["click", "--repeat"]));
            argv.push(amount.unwrap_or(1).to_string());
            argv.push(wheel_button(*direction).to_owned());
            one(argv)
        }
        Action::Type { text } => chunks(text, TYPE_CHUNK_BYTES)
            .map(|chunk| {
                let delay = TYPE_DELAY_MS.to_string();
                run(
                    xdotool(&["type", "--delay", &delay, "--", chunk]),
                    STEP_TIMEOUT_S,
                )
            })
            .collect(),
        Action::Key { keys } => {
            let mut argv = xdotool(&["key", "--"]);
            argv.extend(keys::combos(keys)?);
            one(argv)
        }
        Action::HoldKey { keys, ms } => {
            let combos = keys::combos(keys)?;
            let mut argv = xdotool(&["keydown", "--"]);
            argv.extend(combos.iter().cloned());
            argv.extend(words(&["sleep", &seconds(*ms), "keyup", "--"]));
            argv.extend(combos.into_iter().rev());
            vec![run(argv, STEP_TIMEOUT_S + ms.div_ceil(1000))]
        }
        Action::Wait { ms } => vec![Command::Sleep(Duration::from_millis(*ms))],
    })
}

/// `xdotool getmouselocation --shell`: `X=…`, `Y=…`, `SCREEN=…`, `WINDOW=…` lines.
pub fn cursor_argv() -> Vec<String> {
    xdotool(&["getmouselocation", "--shell"])
}

/// `xdotool getdisplaygeometry`: `WIDTH HEIGHT`.
pub fn geometry_argv() -> Vec<String> {
    xdotool(&["getdisplaygeometry"])
}

/// `scrot -o PATH` writes a PNG of the whole screen to `PATH` (`-o`: over a file of that
/// name, not beside it); `-p` draws the pointer into it. Not `scrot -` (stdout): scrot
/// reopens `/dev/stdout` by name, which a box's user may not do to the pipe its agent made.
pub fn screenshot_argv(with_pointer: bool, path: &str) -> Vec<String> {
    let mut argv = words(&["scrot", "-o"]);
    if with_pointer {
        argv.push("-p".to_owned());
    }
    argv.push(path.to_owned());
    argv
}

/// The pointer's place in `getmouselocation --shell`'s output.
pub fn parse_cursor(stdout: &str) -> Option<(u32, u32)> {
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<u32>().ok())
    };
    Some((value("X")?, value("Y")?))
}

/// What xdotool says (on stderr, exiting 0) of a key name it does not know, which it
/// ignores while it presses the others: `(symbol) No such key name 'Foo'. Ignoring it.`
pub fn unknown_key(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find(|line| line.contains("No such key name"))
}

/// The screen's size in `getdisplaygeometry`'s output.
pub fn parse_geometry(stdout: &str) -> Option<(u32, u32)> {
    let mut numbers = stdout.split_whitespace().map(str::parse::<u32>);
    match (numbers.next(), numbers.next(), numbers.next()) {
        (Some(Ok(width)), Some(Ok(height)), None) => Some((width, height)),
        _ => None,
    }
}

fn run(argv: Vec<String>, timeout_s: u64) -> Command {
    Command::Run { argv, timeout_s }
}

fn words(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

fn xdotool(args: &[&str]) -> Vec<String> {
    let mut argv = words(&["xdotool"]);
    argv.extend(words(args));
    argv
}

/// `xdotool` and, with a point, `mousemove X Y` (a chained command follows).
fn move_to(x: Option<u32>, y: Option<u32>) -> Vec<String> {
    let mut argv = words(&["xdotool"]);
    if let (Some(x), Some(y)) = (x, y) {
        argv.extend(["mousemove".to_owned(), x.to_string(), y.to_string()]);
    }
    argv
}

fn click(button: Button, x: Option<u32>, y: Option<u32>, count: u32) -> Vec<String> {
    let mut argv = move_to(x, y);
    argv.extend(words(&["click", "--repeat"]));
    argv.push(count.to_string());
    argv.push(button_number(button).to_owned());
    argv
}

fn drag(from: Point, to: Point, button: Button) -> Vec<String> {
    let button = button_number(button);
    let (fx, fy, tx, ty) = (
        from.x.to_string(),
        from.y.to_string(),
        to.x.to_string(),
        to.y.to_string(),
    );
    xdotool(&[
        "mousemove",
        &fx,
        &fy,
        "mousedown",
        button,
        "sleep",
        DRAG_PAUSE,
        "mousemove",
        &tx,
        &ty,
        "sleep",
        DRAG_PAUSE,
        "mouseup",
        button,
    ])
}

/// X's pointer buttons.
fn button_number(button: Button) -> &'static str {
    match button {
        Button::Left => "1",
        Button::Middle => "2",
        Button::Right => "3",
    }
}

/// The wheel is buttons 4 to 7.
fn wheel_button(direction: ScrollDirection) -> &'static str {
    match direction {
        ScrollDirection::Up => "4",
        ScrollDirection::Down => "5",
        ScrollDirection::Left => "6",
        ScrollDirection::Right => "7",
    }
}

/// Milliseconds as xdotool's `sleep` takes them: seconds with a fraction.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `text` in pieces of at most `max` bytes, cut between characters.
fn chunks(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, after) = rest.split_at(end);
        rest = after;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The argv of an action that is one run.
    fn argv(action: serde_json::Value) -> Vec<String> {
        let action: Action = serde_json::from_value(action).unwrap();
        action.check().unwrap();
        match commands(&action).unwrap().as_slice() {
            [Command::Run { argv, timeout_s }] => {
                assert_eq!(*timeout_s, STEP_TIMEOUT_S);
                argv.clone()
            }
            other => panic!("{other:?}"),
        }
    }

    fn line(argv: &[String]) -> String {
        argv.join(" ")
    }

    #[test]
    fn pointer_actions_are_one_chained_xdotool_each() {
        assert_eq!(
            line(&argv(json!({"type": "move", "x": 10, "y": 20}))),
            "xdotool mousemove 10 20"
        );
        assert_eq!(
            line(&argv(json!({"type": "click"}))),
            "xdotool click --repeat 1 1"
        );
        assert_eq!(
            line(&argv(
                json!({"type": "click", "button": "right", "x": 5, "y": 6, "count": 2})
            )),
            "xdotool mousemove 5 6 click --repeat 2 3"
        );
        assert_eq!(
            line(&argv(json!({"type": "double_click", "x": 1, "y": 2}))),
            "xdotool mousemove 1 2 click --repeat 2 1"
        );
        assert_eq!(
            line(&argv(json!({"type": "triple_click", "button": "middle"}))),
            "xdotool click --repeat 3 2"
        );
        assert_eq!(
            line(&argv(json!({"type": "mouse_down"}))),
            "xdotool mousedown 1"
        );
        assert_eq!(
            line(&argv(json!({"type": "mouse_up", "button": "right"}))),
            "xdotool mouseup 3"
        );
        assert_eq!(
            line(&argv(json!({"type": "drag", "from": {"x": 1, "y": 2},
                "to": {"x": 30, "y": 40}}))),
            "xdotool mousemove 1 2 mousedown 1 sleep 0.1 mousemove 30 40 sleep 0.1 mouseup 1"
        );
        assert_eq!(
            line(&argv(json!({"type": "scroll", "direction": "down"}))),
            "xdotool click --repeat 1 5"
        );
        assert_eq!(
            line(&argv(
                json!({"type": "scroll", "direction": "left", "amount": 7, "x": 3, "y": 4})
            )),
            "xdotool mousemove 3 4 click --repeat 7 6"
        );
        assert_eq!(
            line(&argv(
                json!({"type": "scroll", "direction": "up", "amount": 2})
            )),
            "xdotool click --repeat 2 4"
        );
        assert_eq!(
            line(&argv(json!({"type": "scroll", "direction": "right"}))),
            "xdotool click --repeat 1 7"
        );
    }

    #[test]
    fn keys_are_mapped_and_come_after_the_end_of_options() {
        assert_eq!(
            argv(json!({"type": "key", "keys": "ctrl+s enter"})),
            ["xdotool", "key", "--", "ctrl+s", "Return"]
        );
        let action = Action::HoldKey {
            keys: "shift ctrl+a".into(),
            ms: 1500,
        };
        assert_eq!(
            commands(&action).unwrap(),
            [Command::Run {
                argv: words(&[
                    "xdotool", "keydown", "--", "shift", "ctrl+a", "sleep", "1.500", "keyup", "--",
                    "ctrl+a", "shift"
                ]),
                timeout_s: STEP_TIMEOUT_S + 2,
            }]
        );
        let bad = Action::Key {
            keys: "sleep".into(),
        };
        assert!(matches!(commands(&bad), Err(ActionProblem::Key(_))));
    }

    #[test]
    fn text_is_typed_after_the_end_of_options_in_bounded_pieces() {
        assert_eq!(
            argv(json!({"type": "type", "text": "--help; rm -rf /"})),
            ["xdotool", "type", "--delay", "12", "--", "--help; rm -rf /"]
        );
        // 3-byte characters over a chunk's end are never cut.
        let text = "€".repeat(700);
        let action = Action::Type { text: text.clone() };
        let runs = commands(&action).unwrap();
        assert_eq!(runs.len(), 3);
        let mut typed = String::new();
        for run in runs {
            let Command::Run { argv, .. } = run else {
                panic!("{run:?}")
            };
            let chunk = argv.last().unwrap();
            assert!(chunk.len() <= TYPE_CHUNK_BYTES);
            typed.push_str(chunk);
        }
        assert_eq!(typed, text);
        let empty = Action::Type {
            text: String::new(),
        };
        assert!(commands(&empty).unwrap().is_empty());
    }

    #[test]
    fn a_wait_sleeps_on_the_host() {
        assert_eq!(
            commands(&Action::Wait { ms: 250 }).unwrap(),
            [Command::Sleep(Duration::from_millis(250))]
        );
    }

    #[test]
    fn the_screen_and_pointer_are_read_from_what_the_tools_print() {
        assert_eq!(
            line(&screenshot_argv(false, "/tmp/s.png")),
            "scrot -o /tmp/s.png"
        );
        assert_eq!(
            line(&screenshot_argv(true, "/tmp/s.png")),
            "scrot -o -p /tmp/s.png"
        );
        assert_eq!(line(&cursor_argv()), "xdotool getmouselocation --shell");
        assert_eq!(line(&geometry_argv()), "xdotool getdisplaygeometry");
        assert_eq!(
            parse_cursor("X=640\nY=400\nSCREEN=0\nWINDOW=1234\n"),
            Some((640, 400))
        );
        assert_eq!(parse_cursor("x:640 y:400"), None);
        assert_eq!(parse_cursor("X=640\n"), None);
        assert_eq!(
            unknown_key("(symbol) No such key name 'Foo'. Ignoring it.\n"),
            Some("(symbol) No such key name 'Foo'. Ignoring it.")
        );
        assert_eq!(unknown_key("Warning: something else\n"), None);
        assert_eq!(parse_geometry("1280 800\n"), Some((1280, 800)));
        assert_eq!(parse_geometry("1280x800"), None);
        assert_eq!(parse_geometry("1 2 3"), None);
    }
}
