//! The daemon's descriptor limit (`RLIMIT_NOFILE`) against what `[server] max_connections`
//! needs: each connection is a socket, and each stream or proxied request one more to the
//! box, besides the store, logs, boxes' channels and runtimes' pipes. A soft limit below
//! that (often 1024) is raised at start, as servers do, to what is wanted (not further:
//! boxes' runtimes and VMMs inherit it) or the hard limit if that is lower; a hard limit
//! below it is a warning naming what to change.

/// Descriptors the daemon wants for `max_connections`: two per connection (its socket and
/// one to a box), and 1024 for everything else.
pub fn wanted(max_connections: usize) -> u64 {
    2 * max_connections as u64 + 1024
}

/// What to do about a limit of `soft` (hard `hard`) when `wanted` are wanted.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Enough,
    /// Raise the soft limit to this: `wanted`, or the hard limit if that is lower.
    Raise(u64),
}

fn plan(soft: u64, hard: u64, wanted: u64) -> Plan {
    if soft >= wanted {
        return Plan::Enough;
    }
    // RLIM_INFINITY is the largest value: no special case.
    Plan::Raise(wanted.min(hard).max(soft))
}

/// Raises the soft `RLIMIT_NOFILE` when it is below what `max_connections` wants; logs a
/// warning when even the hard one is.
pub fn ensure(max_connections: usize) {
    let wanted = wanted(max_connections);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(error = %e, "cannot read the descriptor limit (RLIMIT_NOFILE)");
        return;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    let Plan::Raise(to) = plan(soft, hard, wanted) else {
        return;
    };
    if to > soft {
        limit.rlim_cur = to;
        // SAFETY: setrlimit reads only the struct passed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!(error = %e, soft, to, "cannot raise the descriptor limit (RLIMIT_NOFILE)");
            return;
        }
        tracing::info!(from = soft, to, "descriptor limit (RLIMIT_NOFILE) raised");
    }
    if to < wanted {
        tracing::warn!(
            limit = to,
            wanted,
            max_connections,
            "the descriptor limit (RLIMIT_NOFILE) is below what [server] max_connections wants \
             (two per connection and 1024 more): past it new connections and boxes fail; \
             raise the hard limit (LimitNOFILE= in the systemd unit, ulimit -Hn) or lower \
             max_connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_low_soft_limit_is_raised_toward_the_hard_one() {
        let wanted = wanted(1024);
        assert_eq!(wanted, 3072);
        assert_eq!(plan(1024, 524_288, wanted), Plan::Raise(wanted));
        assert_eq!(plan(1024, 2048, wanted), Plan::Raise(2048));
        assert_eq!(plan(1024, libc::RLIM_INFINITY, wanted), Plan::Raise(wanted));
        assert_eq!(plan(20_000, 20_000, wanted), Plan::Enough);
        assert_eq!(plan(3072, 3072, wanted), Plan::Enough);
    }
}
