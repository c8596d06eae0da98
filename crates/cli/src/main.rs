//! `berth`: the daemon (`berth up`) and the command-line client for its HTTP API.
//!
//! Errors become one line, `berth: <message>`, and an exit status here in `main`, and only
//! here.

mod args;
mod boot_phases;
mod client;
mod cmd_backup;
mod cmd_box;
mod cmd_box_set;
mod cmd_box_wakeup;
mod cmd_cluster;
mod cmd_completion;
mod cmd_cp;
mod cmd_cp_dir;
mod cmd_desktop;
mod cmd_desktop_vnc;
mod cmd_egress;
mod cmd_exec;
mod cmd_image;
mod cmd_image_wait;
mod cmd_logs;
mod cmd_mcp;
mod cmd_memory;
mod cmd_memory_cat;
mod cmd_memory_history;
mod cmd_node;
mod cmd_pair;
mod cmd_port;
mod cmd_process;
mod cmd_runtime;
mod cmd_secret;
mod cmd_send;
mod cmd_service;
mod cmd_session;
mod cmd_shell;
mod cmd_template;
mod cmd_tenant;
mod cmd_up;
mod cmd_webhook;
mod connector;
mod data_dir;
mod events;
mod logging;
mod output;
mod progress;
mod raw_terminal;
mod sse;
mod table;
mod tar_bounds;
mod target;

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const ENV_HELP: &str = "\
Environment:
  BERTH_URL       the daemon's address for client commands, e.g. http://127.0.0.1:7070
                  (default: read from <data dir>/berth.url, written by `berth up`)
  BERTH_API_KEY   the API key for client commands (default: <data dir>/admin.key)
  BERTH_DATA_DIR  the data directory, like --data-dir
  RUST_LOG        the log filter of `berth up` (default: info)";

/// berth gives each AI agent its own persistent, sealed computer: a box.
#[derive(Debug, Parser)]
#[command(name = "berth", version, after_help = ENV_HELP)]
pub struct Cli {
    /// berth's data directory [default: /var/lib/berth as root, else
    /// $XDG_DATA_HOME/berth or ~/.local/share/berth]. Client commands find the daemon's
    /// address and admin key there.
    #[arg(long, global = true, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the berth daemon in the foreground until SIGINT or SIGTERM.
    Up(cmd_up::UpArgs),
    /// Create, list, show, start, stop and remove boxes.
    #[command(subcommand, name = "box")]
    Box(cmd_box::BoxCommand),
    /// Run a command in a box, streaming its output; exits with its status.
    Exec(cmd_exec::ExecArgs),
    /// A box's background processes (`berth exec --background` starts them): list, follow
    /// their output, signal them, feed their stdin.
    #[command(subcommand)]
    Process(cmd_process::ProcessCommand),
    /// A box's services (the daemons its template declares, supervised in the box): list
    /// them, print one's log, restart one.
    #[command(subcommand)]
    Service(cmd_service::ServiceCommand),
    /// Computer use on a box with a desktop (`--template desktop`): its status, a
    /// screenshot, pointer and keyboard actions, the pointer's place.
    #[command(subcommand)]
    Desktop(cmd_desktop::DesktopCommand),
    /// Open a terminal in a box (a login shell, or CMD); exits with its status.
    Shell(cmd_shell::ShellArgs),
    /// Copy a file, or with -r a directory, into a box (LOCAL NAME:PATH) or out of one
    /// (NAME:PATH LOCAL).
    Cp(cmd_cp::CpArgs),
    /// Back a whole box up to one file: its volume, memory history and settings.
    Backup(cmd_backup::BackupArgs),
    /// Make a new box of a file `berth backup` wrote (checked whole first).
    Restore(cmd_backup::RestoreArgs),
    /// Send a message to a box's agent (waking the box) and print the answer as it streams.
    Send(cmd_send::SendArgs),
    /// Print a box's events (harness output, state changes); -f follows them live.
    Logs(cmd_logs::LogsArgs),
    /// Print a box's egress audit log: every connection it made or was refused.
    Egress(cmd_egress::EgressArgs),
    /// A box's /memory without waking it: list, read, search, links, snapshots, restore.
    Memory(cmd_memory::MemoryArgs),
    /// Reach a box's ports through berth: print a port's URL, make, list and revoke share
    /// links.
    #[command(subcommand)]
    Port(cmd_port::PortCommand),
    /// List templates and reload the user ones.
    #[command(subcommand)]
    Template(cmd_template::TemplateCommand),
    /// List the runtimes the daemon can run boxes on (sandbox, qemu, firecracker) and why one cannot.
    #[command(subcommand)]
    Runtime(cmd_runtime::RuntimeCommand),
    /// Build the VM images (kernel, initramfs, root filesystems) in the data dir.
    #[command(subcommand)]
    Image(cmd_image::ImageCommand),
    /// Manage tenants and their quotas (admin key needed) and API keys (the admin for any
    /// tenant, a tenant for its own).
    #[command(subcommand)]
    Tenant(cmd_tenant::TenantCommand),
    /// Set, list and delete your tenant's secrets (the real credentials the egress gateway
    /// adds to a box's requests; boxes only see placeholders).
    #[command(subcommand)]
    Secret(cmd_secret::SecretCommand),
    /// Add, list, test and delete webhooks: your boxes' events POSTed, signed, to a URL.
    #[command(subcommand)]
    Webhook(cmd_webhook::WebhookCommand),
    /// Print a one-time link (and its QR code) that signs a browser in to the web app.
    Pair(cmd_pair::PairArgs),
    /// List and revoke the browsers signed in to the web app.
    #[command(subcommand)]
    Session(cmd_session::SessionCommand),
    /// The cluster's certificate authority and the one-time tokens new nodes join with
    /// (on an API host; acts on the CA's directory and the store, not through a daemon).
    #[command(subcommand)]
    Cluster(cmd_cluster::ClusterCommand),
    /// Print the shell completion script for berth (bash, zsh, fish).
    Completion(cmd_completion::CompletionArgs),
    /// Serve berth's tools to an MCP client over stdio (docs/mcp.md).
    ///
    /// An MCP client starts `berth mcp` and speaks MCP (JSON-RPC, one message a line) on its
    /// stdin and stdout. Tools: box_create, box_list, box_exec, box_read_file, box_write_file,
    /// box_list_files, box_send_message, box_events, box_port_url, memory_read, memory_search.
    /// Each call acts with this
    /// command's API key, so the client sees exactly that key's tenant's boxes.
    ///
    /// The daemon is found like any client command's (BERTH_URL and BERTH_API_KEY, else the
    /// data dir's berth.url and admin.key); give an MCP client a tenant's key, not the admin's.
    /// The daemon also serves the same tools over Streamable HTTP at /mcp.
    Mcp(cmd_mcp::McpArgs),
    /// Run this machine as a node of a cluster (`berth node --store …`), or list the
    /// cluster's nodes (`berth node ls`). See docs/cluster.md.
    Node(cmd_node::NodeArgs),
}

fn main() -> ExitCode {
    // The daemon runs its own program confined to read a sleeping box's volume image
    // (berth_image::read_volume): before clap, a panic hook or a thread, as it can make
    // few system calls.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == berth_image::READER_ARG) {
        let code = berth_image::reader_main(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    install_panic_hook();
    // Parse errors exit 2 and --help/--version exit 0, both printed by clap.
    let cli = Cli::parse();
    match run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(err) => {
            let message = format!("{err:#}").replace('\n', " ");
            eprintln!("berth: {message}");
            ExitCode::from(exit_status(&err))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let data_dir = data_dir::resolve(cli.data_dir.as_deref());
    // The daemon is looked up only once the arguments are known to be good.
    let connect = || target::from_env(&data_dir).map(client::Client::new);
    match cli.command {
        Command::Up(args) => cmd_up::run(args, data_dir.clone()).map(|()| 0),
        Command::Image(command) => {
            end_quietly_on_closed_pipe();
            cmd_image::run(command, &data_dir)
        }
        Command::Completion(args) => {
            end_quietly_on_closed_pipe();
            cmd_completion::run(args)
        }
        Command::Cluster(command) => {
            end_quietly_on_closed_pipe();
            cmd_cluster::run(command, &data_dir)
        }
        Command::Box(command) => {
            client_main(async { cmd_box::run(&connect()?, command).await.map(|()| 0) })
        }
        Command::Exec(args) => client_main(async { cmd_exec::run(&connect()?, args).await }),
        Command::Process(command) => {
            client_main(async { cmd_process::run(&connect()?, command).await })
        }
        Command::Service(command) => {
            client_main(async { cmd_service::run(&connect()?, command).await })
        }
        Command::Desktop(command) => {
            client_main(async { cmd_desktop::run(&connect()?, command).await })
        }
        Command::Shell(args) => client_main(async { cmd_shell::run(&connect()?, args).await }),
        Command::Cp(args) => {
            let plan = cmd_cp::Plan::new(&args)?;
            client_main(async { cmd_cp::run(&connect()?, plan).await.map(|()| 0) })
        }
        Command::Backup(args) => {
            client_main(async { cmd_backup::backup(&connect()?, args).await.map(|()| 0) })
        }
        Command::Restore(args) => {
            client_main(async { cmd_backup::restore(&connect()?, args).await.map(|()| 0) })
        }
        Command::Send(args) => client_main(async { cmd_send::run(&connect()?, args).await }),
        Command::Logs(args) => client_main(async { cmd_logs::run(&connect()?, args).await }),
        Command::Egress(args) => client_main(async { cmd_egress::run(&connect()?, args).await }),
        Command::Memory(args) => client_main(async { cmd_memory::run(&connect()?, args).await }),
        Command::Template(command) => {
            client_main(async { cmd_template::run(&connect()?, command).await })
        }
        Command::Runtime(command) => {
            client_main(async { cmd_runtime::run(&connect()?, command).await })
        }
        Command::Tenant(command) => {
            client_main(async { cmd_tenant::run(&connect()?, command).await })
        }
        Command::Port(command) => client_main(async { cmd_port::run(&connect()?, command).await }),
        Command::Secret(command) => {
            client_main(async { cmd_secret::run(&connect()?, command).await })
        }
        Command::Webhook(command) => {
            client_main(async { cmd_webhook::run(&connect()?, command).await })
        }
        Command::Pair(args) => client_main(async { cmd_pair::run(&connect()?, args).await }),
        Command::Session(command) => {
            client_main(async { cmd_session::run(&connect()?, command).await })
        }
        Command::Node(args) => match args.command {
            Some(cmd_node::NodeCommand::Ls { json }) => {
                client_main(async { cmd_node::list(&connect()?, json).await.map(|()| 0) })
            }
            Some(cmd_node::NodeCommand::Drain { node, now, json }) => client_main(async {
                let body = serde_json::json!({ "now": now });
                cmd_node::operate(&connect()?, &node, "drain", body, json)
                    .await
                    .map(|()| 0)
            }),
            Some(cmd_node::NodeCommand::Expunge { node, json }) => client_main(async {
                let body = serde_json::json!({});
                cmd_node::operate(&connect()?, &node, "expunge", body, json)
                    .await
                    .map(|()| 0)
            }),
            None => cmd_node::run(args.run, data_dir.clone()).map(|()| 0),
        },
        Command::Mcp(args) => {
            client_main(async { cmd_mcp::run(target::from_env(&data_dir)?, args).await })
        }
    }
}

/// Runs a client command on a single-threaded runtime.
fn client_main(command: impl Future<Output = anyhow::Result<u8>>) -> anyhow::Result<u8> {
    end_quietly_on_closed_pipe();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(command)
}

/// A command writing into a closed pipe (`berth box ls | head -1`, `berth completion bash
/// | head`) ends quietly, as Unix tools do, rather than panic in `println!` on EPIPE. Not
/// for the daemon, whose sockets must survive a peer that went away.
fn end_quietly_on_closed_pipe() {
    // SAFETY: setting a signal disposition to SIG_DFL installs no handler of ours; every
    // caller does it before starting any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The one place an error becomes an exit status.
fn exit_status(err: &anyhow::Error) -> u8 {
    match err.downcast_ref::<args::ExecFailed>() {
        Some(failed) => failed.exit_status(),
        None => 1,
    }
}

/// A bug must still end in one `berth: …` line, not a backtrace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "berth: internal error (a bug, please report it): {}{location}",
            payload.replace('\n', " ")
        );
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_parses() {
        for args in [
            &[
                "berth",
                "up",
                "--listen",
                "0.0.0.0:1",
                "--oci-runtime",
                "crun",
            ][..],
            &[
                "berth",
                "box",
                "create",
                "alice",
                "--template",
                "host",
                "--memory-mib",
                "256",
                "--pids",
                "64",
                "--cpus",
                "0.5",
            ],
            &["berth", "box", "ls", "--json"],
            &["berth", "box", "list"],
            &["berth", "box", "rm", "alice"],
            &["berth", "box", "start", "alice"],
            &["berth", "box", "stop", "alice"],
            &["berth", "box", "show", "alice"],
            &["berth", "exec", "alice", "--", "true"],
            &["berth", "cp", "a.txt", "alice:a.txt"],
            &[
                "berth",
                "box",
                "create",
                "bob",
                "--template",
                "echo",
                "--stop-after",
                "5",
            ],
            &["berth", "send", "bob", "hi", "--id", "k1", "--no-wait"],
            &["berth", "send", "bob", "hi", "-v"],
            &["berth", "logs", "bob", "-f", "--after", "3", "--json"],
            &["berth", "template", "ls", "--json"],
            &["berth", "template", "reload"],
            &["berth", "tenant", "create", "acme"],
            &["berth", "secret", "set", "anthropic"],
            &["berth", "secret", "set", "gh", "--from-file", "/tmp/tok"],
            &["berth", "secret", "ls", "--json"],
            &["berth", "secret", "rm", "gh"],
            &[
                "berth", "box", "ls", "--label", "team=red", "--state", "running",
            ],
            &[
                "berth",
                "box",
                "set",
                "alice",
                "--stop-after",
                "30m",
                "--label",
                "a=b",
                "--unlabel",
                "c",
                "--env",
                "K=V",
                "--unset-env",
                "J",
                "--memory-mib",
                "1024",
                "--json",
            ],
            &[
                "berth", "box", "create", "a", "--label", "k=v", "--env", "K=V", "--json",
            ],
            &["berth", "box", "show", "alice", "--json"],
            &["berth", "box", "start", "alice", "--json"],
            &["berth", "box", "stop", "alice", "--json"],
            &["berth", "box", "rm", "alice", "--json"],
            &["berth", "exec", "alice", "--json", "--", "true"],
            &["berth", "send", "bob", "hi", "--json"],
            &["berth", "template", "reload", "--json"],
            &["berth", "secret", "rm", "gh", "--json"],
            &["berth", "tenant", "key", "rm", "acme", "key_1", "--json"],
            &["berth", "completion", "bash"],
            &["berth", "completion", "zsh"],
            &["berth", "completion", "fish"],
            &["berth", "mcp"],
        ] {
            Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
    }

    #[test]
    fn data_dir_is_global() {
        let cli = Cli::try_parse_from(["berth", "box", "ls", "--data-dir", "/d"]).unwrap();
        assert_eq!(cli.data_dir, Some(PathBuf::from("/d")));
        let cli = Cli::try_parse_from(["berth", "--data-dir", "/e", "up"]).unwrap();
        assert_eq!(cli.data_dir, Some(PathBuf::from("/e")));
    }

    #[test]
    fn usage_errors_are_caught_by_clap() {
        for args in [
            &["berth"][..],
            &["berth", "box"],
            &["berth", "box", "create"],
            &["berth", "box", "create", "a", "--cpus", "many"],
            &["berth", "cp", "onlyone"],
            &["berth", "frobnicate"],
            &["berth", "send", "bob"],
            &["berth", "logs", "bob", "--after", "-1"],
            &["berth", "box", "create", "a", "--stop-after", "soon"],
            &["berth", "template"],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_not_found_frames_exit_127() {
        let err = anyhow::Error::new(args::ExecFailed {
            code: berth_protocol::ErrorCode::NotFound,
            message: "no such program".into(),
        });
        assert_eq!(exit_status(&err), 127);
        assert_eq!(exit_status(&anyhow::anyhow!("other")), 1);
    }
}
