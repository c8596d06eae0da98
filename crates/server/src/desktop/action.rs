//! The actions of `POST /v1/boxes/{ref}/desktop/actions`, as a client sends them (strict:
//! unknown fields are refused), and their limits, all checked here before anything wakes
//! the box.

use serde::Deserialize;

use crate::desktop::keys::{self, KeyProblem};

/// Actions in one request.
pub const MAX_ACTIONS: usize = 100;
/// The largest x or y, in pixels (X11's coordinates are signed 16-bit).
pub const MAX_COORDINATE: u32 = 32_767;
/// The most clicks of one `click`.
pub const MAX_CLICKS: u32 = 3;
/// The most wheel steps of one `scroll`.
pub const MAX_SCROLL: u32 = 100;
/// The longest `text` of one `type`, in bytes of UTF-8.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The longest `wait`, and the longest a `hold_key` holds.
pub const MAX_WAIT_MS: u64 = 60_000;

/// One thing to do on the desktop, by its `type`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[schema(as = DesktopAction)]
pub enum Action {
    /// Move the pointer.
    Move { x: u32, y: u32 },
    /// Click `count` times (1 to 3, default 1), at `x`,`y` when given (both or neither),
    /// else where the pointer is.
    Click {
        #[serde(default)]
        button: Button,
        #[serde(default)]
        x: Option<u32>,
        #[serde(default)]
        y: Option<u32>,
        #[serde(default)]
        count: Option<u32>,
    },
    DoubleClick {
        #[serde(default)]
        button: Button,
        #[serde(default)]
        x: Option<u32>,
        #[serde(default)]
        y: Option<u32>,
    },
    TripleClick {
        #[serde(default)]
        button: Button,
        #[serde(default)]
        x: Option<u32>,
        #[serde(default)]
        y: Option<u32>,
    },
    /// Press a mouse button (and keep it down).
    MouseDown {
        #[serde(default)]
        button: Button,
    },
    MouseUp {
        #[serde(default)]
        button: Button,
    },
    /// Press the button at `from`, move to `to`, release it there.
    Drag {
        from: Point,
        to: Point,
        #[serde(default)]
        button: Button,
    },
    /// Turn the wheel `amount` steps (1 to 100, default 1), at `x`,`y` when given.
    Scroll {
        direction: ScrollDirection,
        #[serde(default)]
        amount: Option<u32>,
        #[serde(default)]
        x: Option<u32>,
        #[serde(default)]
        y: Option<u32>,
    },
    /// Type text (at most 64 KiB), a key press per character, 12 ms apart.
    Type { text: String },
    /// Press keys: combinations separated by spaces, keys in one joined by `+` (`ctrl+s`,
    /// `Return`, `alt+Tab ctrl+v`). X keysym names, or the names E2B's and Anthropic's
    /// computer-use tools use (`enter`, `esc`, `cmd`, …: docs/desktop.md).
    Key { keys: String },
    /// Hold keys down for `ms` (at most 60000), then release them.
    HoldKey { keys: String, ms: u64 },
    /// Wait `ms` (at most 60000) before the next action.
    Wait { ms: u64 },
}

/// A point on the screen, in pixels from its top left corner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ScreenPoint)]
pub struct Point {
    pub x: u32,
    pub y: u32,
}

/// A mouse button (default `left`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = MouseButton)]
pub enum Button {
    #[default]
    Left,
    Right,
    Middle,
}

/// Which way a `scroll` turns the wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScrollDirection {
    Up,
    Down,
    Left,
    Right,
}

/// What is wrong with one action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionProblem {
    #[error("{field} is {value}: coordinates are 0 to {MAX_COORDINATE}")]
    Coordinate { field: &'static str, value: u32 },
    #[error("give x and y together, or neither")]
    HalfPoint,
    #[error("count is {0}: it is 1 to {MAX_CLICKS}")]
    Count(u32),
    #[error("amount is {0}: it is 1 to {MAX_SCROLL}")]
    Amount(u32),
    #[error("text is {0} bytes: at most {MAX_TEXT_BYTES}")]
    TextTooLong(usize),
    #[error("text holds a NUL character, which cannot be typed")]
    TextNul,
    #[error("ms is {0}: at most {MAX_WAIT_MS}")]
    TooLong(u64),
    #[error(transparent)]
    Key(#[from] KeyProblem),
}

impl Action {
    /// The action's `type`, as the client wrote it.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Move { .. } => "move",
            Action::Click { .. } => "click",
            Action::DoubleClick { .. } => "double_click",
            Action::TripleClick { .. } => "triple_click",
            Action::MouseDown { .. } => "mouse_down",
            Action::MouseUp { .. } => "mouse_up",
            Action::Drag { .. } => "drag",
            Action::Scroll { .. } => "scroll",
            Action::Type { .. } => "type",
            Action::Key { .. } => "key",
            Action::HoldKey { .. } => "hold_key",
            Action::Wait { .. } => "wait",
        }
    }

    /// Checks the action's values against their limits.
    pub fn check(&self) -> Result<(), ActionProblem> {
        match self {
            Action::Move { x, y } => point(&Point { x: *x, y: *y }),
            Action::Click { x, y, count, .. } => {
                at(*x, *y)?;
                match count {
                    Some(n) if !(1..=MAX_CLICKS).contains(n) => Err(ActionProblem::Count(*n)),
                    _ => Ok(()),
                }
            }
            Action::DoubleClick { x, y, .. } | Action::TripleClick { x, y, .. } => at(*x, *y),
            Action::MouseDown { .. } | Action::MouseUp { .. } => Ok(()),
            Action::Drag { from, to, .. } => point(from).and_then(|()| point(to)),
            Action::Scroll { amount, x, y, .. } => {
                at(*x, *y)?;
                match amount {
                    Some(n) if !(1..=MAX_SCROLL).contains(n) => Err(ActionProblem::Amount(*n)),
                    _ => Ok(()),
                }
            }
            Action::Type { text } if text.len() > MAX_TEXT_BYTES => {
                Err(ActionProblem::TextTooLong(text.len()))
            }
            Action::Type { text } if text.contains('\0') => Err(ActionProblem::TextNul),
            Action::Type { .. } => Ok(()),
            Action::Key { keys } => keys::combos(keys).map(drop).map_err(Into::into),
            Action::HoldKey { keys, ms } => {
                keys::combos(keys)?;
                wait(*ms)
            }
            Action::Wait { ms } => wait(*ms),
        }
    }
}

/// An optional point: both coordinates or neither.
fn at(x: Option<u32>, y: Option<u32>) -> Result<(), ActionProblem> {
    match (x, y) {
        (Some(x), Some(y)) => point(&Point { x, y }),
        (None, None) => Ok(()),
        _ => Err(ActionProblem::HalfPoint),
    }
}

fn point(p: &Point) -> Result<(), ActionProblem> {
    for (field, value) in [("x", p.x), ("y", p.y)] {
        if value > MAX_COORDINATE {
            return Err(ActionProblem::Coordinate { field, value });
        }
    }
    Ok(())
}

fn wait(ms: u64) -> Result<(), ActionProblem> {
    if ms > MAX_WAIT_MS {
        return Err(ActionProblem::TooLong(ms));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: serde_json::Value) -> Result<Action, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn actions_parse_by_type_with_their_defaults() {
        assert_eq!(
            parse(json!({"type": "click"})).unwrap(),
            Action::Click {
                button: Button::Left,
                x: None,
                y: None,
                count: None
            }
        );
        assert_eq!(
            parse(
                json!({"type": "drag", "from": {"x": 1, "y": 2}, "to": {"x": 3, "y": 4},
                "button": "middle"})
            )
            .unwrap(),
            Action::Drag {
                from: Point { x: 1, y: 2 },
                to: Point { x: 3, y: 4 },
                button: Button::Middle
            }
        );
        assert_eq!(
            parse(json!({"type": "hold_key", "keys": "shift", "ms": 500})).unwrap(),
            Action::HoldKey {
                keys: "shift".into(),
                ms: 500
            }
        );
        assert_eq!(
            parse(json!({"type": "scroll", "direction": "left"})).unwrap(),
            Action::Scroll {
                direction: ScrollDirection::Left,
                amount: None,
                x: None,
                y: None
            }
        );
    }

    #[test]
    fn unknown_fields_types_and_values_are_refused() {
        let extra = parse(json!({"type": "move", "x": 1, "y": 2, "z": 3})).unwrap_err();
        assert!(extra.contains("unknown field `z`"), "{extra}");
        let nested = parse(json!({"type": "drag", "from": {"x": 1, "y": 2, "w": 0},
            "to": {"x": 3, "y": 4}}))
        .unwrap_err();
        assert!(nested.contains("unknown field `w`"), "{nested}");
        assert!(parse(json!({"type": "teleport"})).is_err());
        assert!(parse(json!({"x": 1, "y": 2})).is_err(), "no type");
        assert!(parse(json!({"type": "move", "x": -1, "y": 2})).is_err());
        assert!(parse(json!({"type": "click", "button": "fourth"})).is_err());
    }

    #[test]
    fn values_past_their_limits_are_refused() {
        let problem = |value| parse(value).unwrap().check().unwrap_err();
        assert_eq!(
            problem(json!({"type": "move", "x": 32_768, "y": 0})),
            ActionProblem::Coordinate {
                field: "x",
                value: 32_768
            }
        );
        assert_eq!(
            problem(json!({"type": "drag", "from": {"x": 0, "y": 0},
                "to": {"x": 0, "y": 40_000}})),
            ActionProblem::Coordinate {
                field: "y",
                value: 40_000
            }
        );
        assert_eq!(
            problem(json!({"type": "click", "x": 5})),
            ActionProblem::HalfPoint
        );
        assert_eq!(
            problem(json!({"type": "click", "count": 4})),
            ActionProblem::Count(4)
        );
        assert_eq!(
            problem(json!({"type": "scroll", "direction": "up", "amount": 0})),
            ActionProblem::Amount(0)
        );
        assert_eq!(
            problem(json!({"type": "wait", "ms": 60_001})),
            ActionProblem::TooLong(60_001)
        );
        assert_eq!(
            problem(json!({"type": "hold_key", "keys": "a", "ms": 100_000})),
            ActionProblem::TooLong(100_000)
        );
        let long = "a".repeat(MAX_TEXT_BYTES + 1);
        assert_eq!(
            problem(json!({"type": "type", "text": long})),
            ActionProblem::TextTooLong(MAX_TEXT_BYTES + 1)
        );
        assert_eq!(
            problem(json!({"type": "type", "text": "a\u{0}b"})),
            ActionProblem::TextNul
        );
        assert!(matches!(
            problem(json!({"type": "key", "keys": "ctrl+$"})),
            ActionProblem::Key(_)
        ));
        // At the limits, all is well.
        for ok in [
            json!({"type": "move", "x": 32_767, "y": 32_767}),
            json!({"type": "click", "x": 0, "y": 0, "count": 3}),
            json!({"type": "scroll", "direction": "down", "amount": 100}),
            json!({"type": "wait", "ms": 60_000}),
            json!({"type": "type", "text": "a".repeat(MAX_TEXT_BYTES)}),
            json!({"type": "key", "keys": "ctrl+shift+Escape"}),
        ] {
            parse(ok.clone())
                .unwrap()
                .check()
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }
}
