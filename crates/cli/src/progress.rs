//! Bytes moved so far, on stderr every half second while a long copy runs (when stderr is
//! a terminal), and a summary line at its end.

use std::io::{self, IsTerminal as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Bytes moved so far, shown on stderr while a copy runs.
pub struct Progress {
    pub bytes: Arc<AtomicU64>,
    started: Instant,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub fn start(what: String) -> Progress {
        let bytes = Arc::new(AtomicU64::new(0));
        let ticker = io::stderr().is_terminal().then(|| {
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(PROGRESS_EVERY);
                every.tick().await;
                loop {
                    every.tick().await;
                    let so_far = bytes.load(Ordering::Relaxed);
                    eprint!("\r\x1b[K{what}: {}", human(so_far));
                }
            })
        });
        Progress {
            bytes,
            started: Instant::now(),
            ticker,
        }
    }

    pub fn finish(self, summary: &str) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
            eprint!("\r\x1b[K");
        }
        let secs = self.started.elapsed().as_secs_f64();
        eprintln!("{summary} in {secs:.1} s");
    }
}

pub fn human(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
