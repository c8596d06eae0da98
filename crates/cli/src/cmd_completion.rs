//! `berth completion SHELL`: the shell's completion script for `berth`, on stdout.

use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

#[derive(Debug, Args)]
#[command(after_help = "\
Install:
  bash:  berth completion bash > /etc/bash_completion.d/berth   (or source it from ~/.bashrc)
  zsh:   berth completion zsh > \"${fpath[1]}/_berth\"             (then restart zsh)
  fish:  berth completion fish > ~/.config/fish/completions/berth.fish")]
pub struct CompletionArgs {
    /// The shell: bash, zsh or fish (also elvish and powershell).
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: CompletionArgs) -> anyhow::Result<u8> {
    let mut command = crate::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, "berth", &mut out);
    Ok(0)
}
