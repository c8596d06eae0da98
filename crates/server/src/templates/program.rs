//! A program a template runs in its boxes (the harness, each service): the bounds on its
//! arguments and environment, one rule for both so they never drift apart.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

const MAX_ARGS: usize = 256;
const MAX_ENV: usize = 256;
/// The most bytes of one argument, variable value or path.
pub(super) const MAX_STRING_BYTES: usize = 4096;

/// Whether `command` starts with a program: a non-empty list whose first item is not empty.
pub(super) fn names_program(command: &[String]) -> bool {
    command.first().is_some_and(|program| !program.is_empty())
}

/// The rule a program's arguments break, if any (a harness's and a service's).
pub(super) fn args_rule(args: &[String]) -> Option<&'static str> {
    if args.len() > MAX_ARGS {
        Some("may hold at most 256 arguments")
    } else if args
        .iter()
        .any(|a| a.contains('\0') || a.len() > MAX_STRING_BYTES)
    {
        Some("arguments must hold no NUL and at most 4096 bytes each")
    } else {
        None
    }
}

/// The rule an environment table breaks, if any (a harness's and a service's), with the
/// variable that breaks it (`None`: the table, which holds too many).
pub(super) fn env_rule(env: &BTreeMap<String, String>) -> Option<(Option<&str>, &'static str)> {
    if env.len() > MAX_ENV {
        return Some((None, "may hold at most 256 variables"));
    }
    env.iter().find_map(|(key, value)| {
        let key_ok = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let rule = if !key_ok {
            "is not a variable name (A-Z, a-z, 0-9, _; not starting with a digit)"
        } else if value.contains('\0') || value.len() > MAX_STRING_BYTES {
            "must hold no NUL and at most 4096 bytes"
        } else {
            return None;
        };
        Some((Some(key.as_str()), rule))
    })
}

/// Restarts in a row a harness or a service may be given (`max_restarts`).
pub(super) const MAX_RESTARTS_RANGE: RangeInclusive<u32> = 0..=1000;
