//! Progress of a long build: named stages, and bytes done where a stage counts them.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Told what a build is doing. Called from the building thread; implementations should be
/// cheap (a terminal bar redraws at most a few times a second).
pub trait Progress: Send + Sync {
    /// A new stage starts (e.g. "download linux-image-6.1.0-57-cloud-amd64").
    fn stage(&self, what: &str);
    /// Within the current stage, `done` of `total` bytes (total unknown: `None`).
    fn bytes(&self, done: u64, total: Option<u64>);
}

/// Ignores progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _what: &str) {}
    fn bytes(&self, _done: u64, _total: Option<u64>) {}
}

/// Draws stages and a byte bar on stderr: one line per stage, the bar redrawn in place.
#[derive(Debug)]
pub struct TerminalProgress {
    state: Mutex<TermState>,
}

#[derive(Debug)]
struct TermState {
    started: Instant,
    last_draw: Option<Instant>,
    bar_shown: bool,
}

/// Redraw the bar at most this often.
const REDRAW: Duration = Duration::from_millis(100);
const BAR_WIDTH: usize = 30;

impl TerminalProgress {
    pub fn new() -> Self {
        TerminalProgress {
            state: Mutex::new(TermState {
                started: Instant::now(),
                last_draw: None,
                bar_shown: false,
            }),
        }
    }
}

impl Default for TerminalProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for TerminalProgress {
    fn stage(&self, what: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = st.started.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        if st.bar_shown {
            let _ = writeln!(err);
            st.bar_shown = false;
        }
        let _ = writeln!(err, "[{elapsed:6.1}s] {what}");
        st.last_draw = None;
    }

    fn bytes(&self, done: u64, total: Option<u64>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let finished = total.is_some_and(|t| done >= t);
        if !finished && st.last_draw.is_some_and(|t| now - t < REDRAW) {
            return;
        }
        st.last_draw = Some(now);
        st.bar_shown = true;
        let line = bar_line(done, total);
        let _ = write!(std::io::stderr().lock(), "\r{line}");
    }
}

/// `[=====>      ]  12.0 / 40.0 MiB` or, without a total, `12.0 MiB`.
fn bar_line(done: u64, total: Option<u64>) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    match total {
        Some(total) if total > 0 => {
            let filled = ((done.min(total) as f64 / total as f64) * BAR_WIDTH as f64) as usize;
            let mut bar = "=".repeat(filled);
            if filled < BAR_WIDTH {
                bar.push('>');
                bar.push_str(&" ".repeat(BAR_WIDTH - filled - 1));
            }
            format!("[{bar}] {:7.1} / {:.1} MiB", mib(done), mib(total))
        }
        _ => format!("{:7.1} MiB", mib(done)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_fills_with_the_fraction_done() {
        assert!(bar_line(0, Some(100)).starts_with("[>"));
        let half = bar_line(50, Some(100));
        assert_eq!(half.matches('=').count(), BAR_WIDTH / 2);
        let full = bar_line(200, Some(100));
        assert_eq!(full.matches('=').count(), BAR_WIDTH);
        assert!(bar_line(3 << 20, None).contains("3.0 MiB"));
    }
}
