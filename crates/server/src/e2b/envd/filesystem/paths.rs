//! Paths as envd reads them: `~` and `~/…` are the user's home, a relative path is under
//! the home, and an absolute path is taken as it is (envd does not clean it either). The
//! box is the boundary, not the path: `..` reaches wherever the user's permissions reach in
//! the box, as for any process in it.

use berth_e2b_wire::{Code, ConnectError};
use berth_protocol::guest::BoxUser;

/// The home directory of a box user (`HOME` of its processes).
pub fn home(user: BoxUser) -> &'static str {
    match user {
        BoxUser::User => "/home/user",
        BoxUser::Root => "/root",
    }
}

/// `path` as an absolute path in the box, for `user`.
pub fn resolve(path: &str, user: BoxUser) -> Result<String, ConnectError> {
    if path.starts_with('/') {
        return Ok(path.to_owned());
    }
    let relative = match path.strip_prefix('~') {
        None => path,
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        Some(_) => {
            return Err(ConnectError::new(
                Code::InvalidArgument,
                format!("cannot expand {path:?}: only ~ (the user's own home) is expanded"),
            ))
        }
    };
    Ok(clean(&format!("{}/{relative}", home(user))))
}

/// `path` (absolute) with `.`, `..` and repeated slashes resolved lexically, as Go's
/// `filepath.Clean`: `..` at the root stays at the root.
pub fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The directory holding `path` (absolute, cleaned or not): `/` for a top-level entry.
pub fn parent(path: &str) -> String {
    let cleaned = clean(path);
    match cleaned.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => cleaned[..i].to_owned(),
    }
}

/// The last component of `path`; `/` for the root.
pub fn base_name(path: &str) -> String {
    let cleaned = clean(path);
    match cleaned.rsplit('/').next() {
        Some("") | None => "/".to_owned(),
        Some(name) => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_and_tilde_are_under_the_users_home() {
        let user = BoxUser::User;
        assert_eq!(resolve("a.txt", user).unwrap(), "/home/user/a.txt");
        assert_eq!(resolve("", user).unwrap(), "/home/user");
        assert_eq!(resolve("~", user).unwrap(), "/home/user");
        assert_eq!(resolve("~/d/../x", user).unwrap(), "/home/user/x");
        assert_eq!(resolve("../../../etc", user).unwrap(), "/etc");
        assert_eq!(resolve("~", BoxUser::Root).unwrap(), "/root");
        assert_eq!(resolve("/tmp/../x", user).unwrap(), "/tmp/../x");
        assert_eq!(
            resolve("~root/x", user).unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn parents_and_names() {
        assert_eq!(parent("/home/user/a"), "/home/user");
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/"), "/");
        assert_eq!(base_name("/home/user/a/"), "a");
        assert_eq!(base_name("/"), "/");
    }
}
