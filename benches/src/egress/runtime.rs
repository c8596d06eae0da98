//! Each server side of the benchmark gets its own runtime and thread(s), as it would be its
//! own process in production; one worker thread each, the CPU budget nginx gets too
//! (`worker_processes 1`).

use std::io;

/// A one-worker multi-thread runtime named `name`. Dropping it stops its tasks.
pub fn one_worker(name: &str) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
}
