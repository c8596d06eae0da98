//! Key names for `key` and `hold_key`: xdotool's syntax (combinations separated by spaces,
//! the keys of one joined by `+`: `ctrl+s`, `alt+Tab Return`) with X keysym names, plus the
//! names E2B's desktop SDK (`press`) and Anthropic's computer-use tool (`key`) send, mapped
//! to xdotool's. Only letters, digits, `_`, `-`, `+` and spaces pass, and no key may be an
//! xdotool command name (xdotool would run it as the next command of its line).

/// The longest `keys`.
pub const MAX_KEYS_BYTES: usize = 256;

/// Names other tools use, lowercase, and the name xdotool knows (its own modifier names
/// `ctrl`, `alt`, `shift`, `super`, `meta`, or an X keysym). `f1`…`f24` are mapped too.
const ALIASES: &[(&str, &str)] = &[
    ("ctrl", "ctrl"),
    ("control", "ctrl"),
    ("control_left", "Control_L"),
    ("control_right", "Control_R"),
    ("alt", "alt"),
    ("option", "alt"),
    ("alt_left", "Alt_L"),
    ("alt_right", "Alt_R"),
    ("shift", "shift"),
    ("shift_left", "Shift_L"),
    ("shift_right", "Shift_R"),
    ("super", "super"),
    ("cmd", "super"),
    ("command", "super"),
    ("win", "super"),
    ("windows", "super"),
    ("super_left", "Super_L"),
    ("super_right", "Super_R"),
    ("meta", "meta"),
    ("enter", "Return"),
    ("return", "Return"),
    ("esc", "Escape"),
    ("escape", "Escape"),
    ("backspace", "BackSpace"),
    ("tab", "Tab"),
    ("space", "space"),
    ("del", "Delete"),
    ("delete", "Delete"),
    ("insert", "Insert"),
    ("home", "Home"),
    ("end", "End"),
    ("pageup", "Page_Up"),
    ("page_up", "Page_Up"),
    ("pgup", "Page_Up"),
    ("pagedown", "Page_Down"),
    ("page_down", "Page_Down"),
    ("pgdn", "Page_Down"),
    ("up", "Up"),
    ("down", "Down"),
    ("left", "Left"),
    ("right", "Right"),
    ("arrowup", "Up"),
    ("arrowdown", "Down"),
    ("arrowleft", "Left"),
    ("arrowright", "Right"),
    ("caps_lock", "Caps_Lock"),
    ("capslock", "Caps_Lock"),
    ("num_lock", "Num_Lock"),
    ("scroll_lock", "Scroll_Lock"),
    ("print", "Print"),
    ("printscreen", "Print"),
    ("pause", "Pause"),
    ("break", "Pause"),
    ("menu", "Menu"),
];

/// xdotool's commands (3.20160805, Debian bookworm's, and newer), which it matches without
/// regard to case: a key named like one would end the key list and run it.
const XDOTOOL_COMMANDS: &[&str] = &[
    "behave",
    "behave_screen_edge",
    "click",
    "exec",
    "get_desktop",
    "get_desktop_for_window",
    "get_desktop_viewport",
    "get_num_desktops",
    "getactivewindow",
    "getdisplaygeometry",
    "getmouselocation",
    "getwindowclassname",
    "getwindowfocus",
    "getwindowgeometry",
    "getwindowname",
    "getwindowpid",
    "help",
    "key",
    "keydown",
    "keyup",
    "mousedown",
    "mousemove",
    "mousemove_relative",
    "mouseup",
    "search",
    "selectwindow",
    "set_desktop",
    "set_desktop_for_window",
    "set_desktop_viewport",
    "set_num_desktops",
    "set_window",
    "sleep",
    "type",
    "version",
    "windowactivate",
    "windowclose",
    "windowfocus",
    "windowkill",
    "windowlower",
    "windowmap",
    "windowminimize",
    "windowmove",
    "windowquit",
    "windowraise",
    "windowreparent",
    "windowsize",
    "windowstate",
    "windowunmap",
];

/// Why `keys` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("keys is empty")]
    Empty,
    #[error("keys is {0} bytes: at most {MAX_KEYS_BYTES}")]
    TooLong(usize),
    #[error("keys {keys:?} holds {bad:?}: keys are letters, digits, `_` and `-`, joined by `+` within a combination and by spaces between combinations")]
    BadCharacter { keys: String, bad: char },
    #[error("keys {keys:?} has an empty key beside a `+` (the plus key is `plus`)")]
    EmptyKey { keys: String },
    #[error("{key:?} is not a key (it is an xdotool command)")]
    Command { key: String },
}

/// The combinations of `keys`, each in xdotool's syntax with every name mapped.
pub fn combos(keys: &str) -> Result<Vec<String>, KeyProblem> {
    if keys.len() > MAX_KEYS_BYTES {
        return Err(KeyProblem::TooLong(keys.len()));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | ' ' | '-');
    if let Some(bad) = keys.chars().find(|c| !allowed(*c)) {
        return Err(KeyProblem::BadCharacter {
            keys: keys.to_owned(),
            bad,
        });
    }
    let combos: Vec<String> = keys
        .split(' ')
        .filter(|combo| !combo.is_empty())
        .map(|combo| combination(keys, combo))
        .collect::<Result<_, _>>()?;
    if combos.is_empty() {
        return Err(KeyProblem::Empty);
    }
    Ok(combos)
}

/// One combination (`ctrl+s`), its names mapped.
fn combination(keys: &str, combo: &str) -> Result<String, KeyProblem> {
    let names: Vec<String> = combo
        .split('+')
        .map(|name| match name {
            "" => Err(KeyProblem::EmptyKey {
                keys: keys.to_owned(),
            }),
            name => Ok(keysym(name)),
        })
        .collect::<Result<_, _>>()?;
    let joined = names.join("+");
    if XDOTOOL_COMMANDS
        .iter()
        .any(|command| command.eq_ignore_ascii_case(&joined))
    {
        return Err(KeyProblem::Command { key: joined });
    }
    Ok(joined)
}

/// The name xdotool knows for `name`: an alias's (in any case), else `name` as it is
/// (X keysyms are case-sensitive: `a` and `A`, `Return`).
fn keysym(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    if let Some((_, sym)) = ALIASES.iter().find(|(alias, _)| *alias == lower) {
        return (*sym).to_owned();
    }
    match lower.strip_prefix('f').map(str::parse::<u8>) {
        Some(Ok(n)) if (1..=24).contains(&n) => format!("F{n}"),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(keys: &str) -> String {
        let mut combos = combos(keys).unwrap();
        assert_eq!(combos.len(), 1, "{combos:?}");
        combos.remove(0)
    }

    #[test]
    fn e2b_names_map_to_xdotools() {
        for (e2b, xdotool) in [
            ("enter", "Return"),
            ("esc", "Escape"),
            ("escape", "Escape"),
            ("backspace", "BackSpace"),
            ("tab", "Tab"),
            ("space", "space"),
            ("delete", "Delete"),
            ("del", "Delete"),
            ("ctrl", "ctrl"),
            ("control", "ctrl"),
            ("alt", "alt"),
            ("shift", "shift"),
            ("cmd", "super"),
            ("command", "super"),
            ("super", "super"),
            ("win", "super"),
            ("meta", "meta"),
            ("page_up", "Page_Up"),
            ("page_down", "Page_Down"),
            ("caps_lock", "Caps_Lock"),
            ("up", "Up"),
            ("left", "Left"),
            ("home", "Home"),
            ("end", "End"),
            ("insert", "Insert"),
            ("print", "Print"),
            ("break", "Pause"),
            ("f1", "F1"),
            ("f12", "F12"),
            ("control_right", "Control_R"),
        ] {
            assert_eq!(one(e2b), xdotool, "{e2b}");
        }
    }

    #[test]
    fn anthropic_and_xdotool_spellings_pass_through_or_map() {
        // Anthropic's tool sends xdotool syntax, sometimes with other capitals.
        assert_eq!(one("Return"), "Return");
        assert_eq!(one("ctrl+s"), "ctrl+s");
        assert_eq!(one("ctrl+shift+t"), "ctrl+shift+t");
        assert_eq!(one("alt+Tab"), "alt+Tab");
        assert_eq!(one("Page_Down"), "Page_Down");
        assert_eq!(one("KP_Enter"), "KP_Enter");
        assert_eq!(one("XF86AudioPlay"), "XF86AudioPlay");
        assert_eq!(one("Enter"), "Return");
        assert_eq!(one("CMD+c"), "super+c");
        assert_eq!(one("F5"), "F5");
        // Keysyms keep their case: `A` is shift+a.
        assert_eq!(one("A"), "A");
        assert_eq!(one("minus"), "minus");
        assert_eq!(
            one("f25"),
            "f25",
            "not a function key xdotool knows by alias"
        );
        assert_eq!(
            combos("ctrl+a  Delete enter").unwrap(),
            ["ctrl+a", "Delete", "Return"]
        );
    }

    #[test]
    fn odd_characters_and_commands_are_refused() {
        assert_eq!(combos(""), Err(KeyProblem::Empty));
        assert_eq!(combos("   "), Err(KeyProblem::Empty));
        assert!(matches!(
            combos("ctrl+;"),
            Err(KeyProblem::BadCharacter { bad: ';', .. })
        ));
        for odd in ["a\tb", "a\nb", "$(id)", "a'b", "é", "ctrl+s\0"] {
            assert!(
                matches!(combos(odd), Err(KeyProblem::BadCharacter { .. })),
                "{odd:?}"
            );
        }
        assert!(matches!(combos("ctrl++"), Err(KeyProblem::EmptyKey { .. })));
        assert!(matches!(combos("+a"), Err(KeyProblem::EmptyKey { .. })));
        for command in ["exec", "a EXEC", "sleep", "Help", "type", "mousemove"] {
            assert!(
                matches!(combos(command), Err(KeyProblem::Command { .. })),
                "{command}"
            );
        }
        // A command name inside a combination is not one.
        assert_eq!(one("ctrl+type"), "ctrl+type");
        let long = "a ".repeat(MAX_KEYS_BYTES);
        assert_eq!(combos(&long), Err(KeyProblem::TooLong(long.len())));
    }
}
