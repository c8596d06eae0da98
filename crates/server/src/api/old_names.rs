//! Request-body fields renamed in an earlier release. A client written against the old
//! name keeps working (an upgrade never breaks what users already have): the old name is
//! still read, the new one wins when a body gives both, and the daemon logs a warning that
//! names the new one.

/// `new` when given, else `old` (with a warning naming both).
pub(crate) fn renamed<T>(route: &str, new: (&str, Option<T>), old: (&str, Option<T>)) -> Option<T> {
    let (new_name, new) = new;
    let (old_name, old) = old;
    if old.is_some() {
        tracing::warn!(
            route,
            "a request body gave `{old_name}`, the old name of `{new_name}`; it is read as `{new_name}`{}",
            if new.is_some() { " (ignored: the body also gives the new name)" } else { "" }
        );
    }
    new.or(old)
}

#[cfg(test)]
mod tests {
    use super::renamed;

    #[test]
    fn the_old_name_is_read_and_the_new_one_wins() {
        let r = "POST /v1/boxes";
        assert_eq!(
            renamed(r, ("stop_after_s", None), ("idle_timeout_s", Some(60))),
            Some(60)
        );
        assert_eq!(
            renamed(r, ("stop_after_s", Some(5)), ("idle_timeout_s", Some(60))),
            Some(5)
        );
        assert_eq!(
            renamed::<u64>(r, ("stop_after_s", None), ("idle_timeout_s", None)),
            None
        );
    }
}
