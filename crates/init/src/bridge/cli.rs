//! The command line: `berth-init bridge --serial PATH --uds-path PATH`. Exit status: 0 when
//! QEMU's connection ended, 1 when the bridge failed (one line on stderr with the whole
//! cause chain), 2 on bad arguments (one line with the usage).

use std::path::PathBuf;

use super::{Bridge, BridgeError, Options};

/// The subcommand's name, argv[1].
pub const SUBCOMMAND: &str = "bridge";

const USAGE: &str = "usage: berth-init bridge --serial PATH --uds-path PATH";

const HELP: &str = "Bridges a qemu box's serial channel to the host (one bridge per VM).
  --serial PATH    listen here for QEMU's virtserialport chardev (one connection)
  --uds-path PATH  listen here for host clients (`CONNECT <port>`, answered `OK <n>`);
                   the guest's streams to port 2025 go to PATH_2025
Both sockets are created 0600 before anything is accepted. Exits 0 when QEMU's connection
ends, 1 when the channel breaks (one line on stderr says why), 2 on bad arguments.";

/// Runs the bridge and exits.
pub fn main() -> ! {
    let args: Vec<String> = std::env::args().skip(2).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\n{HELP}");
        std::process::exit(0)
    }
    let options = parse(args).unwrap_or_else(|msg| {
        eprintln!("berth-init bridge: {msg}; {USAGE}");
        std::process::exit(2)
    });
    // Every file this process creates is its own only, the sockets' temporary names too.
    // SAFETY: umask only changes this process's file-creation mask; it cannot fail.
    unsafe { libc::umask(0o177) };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BridgeError::Runtime)
        .and_then(|rt| rt.block_on(async { Bridge::bind(&options)?.serve().await }));
    match result {
        Ok(()) => std::process::exit(0),
        Err(err) => {
            // One line with the whole cause chain, for the runtime's bridge.log.
            let causes = std::iter::successors(std::error::Error::source(&err), |e| e.source());
            let line: String = causes.map(|cause| format!(": {cause}")).collect();
            eprintln!("berth-init bridge: {err}{line}");
            std::process::exit(1)
        }
    }
}

/// Parses the flags after `bridge`.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let (mut serial, mut uds_path) = (None, None);
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let slot = match flag.as_str() {
            "--serial" => &mut serial,
            "--uds-path" => &mut uds_path,
            other => return Err(format!("unknown argument {other:?}")),
        };
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        if value.is_empty() {
            return Err(format!("{flag} needs a non-empty path"));
        }
        if slot.replace(PathBuf::from(value)).is_some() {
            return Err(format!("{flag} given twice"));
        }
    }
    Ok(Options {
        serial: serial.ok_or("--serial is required")?,
        uds_path: uds_path.ok_or("--uds-path is required")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Options, String> {
        parse(list.iter().map(|a| a.to_string()))
    }

    #[test]
    fn takes_both_paths_in_any_order() {
        let want = Options {
            serial: "/run/b/serial.sock".into(),
            uds_path: "/run/b/vsock.sock".into(),
        };
        let a = args(&[
            "--serial",
            "/run/b/serial.sock",
            "--uds-path",
            "/run/b/vsock.sock",
        ]);
        let b = args(&[
            "--uds-path",
            "/run/b/vsock.sock",
            "--serial",
            "/run/b/serial.sock",
        ]);
        assert_eq!(a.unwrap(), want);
        assert_eq!(b.unwrap(), want);
    }

    #[test]
    fn says_what_is_wrong_with_bad_arguments() {
        for (list, says) in [
            (&[][..], "--serial is required"),
            (&["--serial", "s"][..], "--uds-path is required"),
            (&["--serial"][..], "--serial needs a value"),
            (&["--serial", ""][..], "--serial needs a non-empty path"),
            (
                &["--serial", "a", "--serial", "b"][..],
                "--serial given twice",
            ),
            (&["--cid", "3"][..], "unknown argument \"--cid\""),
        ] {
            assert_eq!(args(list).unwrap_err(), says, "{list:?}");
        }
    }
}
