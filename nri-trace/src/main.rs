//! The `nri-trace` command line: parse, then hand each command to its
//! module (`commands/`). Argument types live in `cli/`; the pipeline and
//! everything under it in the library.

mod cli;
mod commands;

use anyhow::Result;
use clap::{CommandFactory, Parser};

use cli::{Cli, Cmd};

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let cmd = match cli.cmd {
        Some(c) => c,
        // `nri-trace watch` with its defaults: the TUI on a terminal.
        None if commands::on_terminal() => Cmd::Watch(
            match Cli::parse_from(["nri-trace", "watch", "-o", "tui"]).cmd {
                Some(Cmd::Watch(w)) => w,
                _ => unreachable!("`watch` parses to Cmd::Watch"),
            },
        ),
        None => {
            Cli::command().print_help()?;
            anyhow::bail!(
                "no command given, and this is not a terminal (the TUI needs one): \
                 choose a command, e.g. `nri-trace watch -o text`"
            );
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let result = rt.block_on(async move {
        match cmd {
            Cmd::Watch(a) => commands::watch::run(a).await,
            Cmd::Record(a) => commands::record::run(a).await,
            Cmd::Replay(a) => commands::replay::run(a),
            Cmd::Report(a) => commands::replay::report(a),
            Cmd::Explain(a) => commands::explain::run(a).await,
            Cmd::Doctor { output, backend } => commands::doctor::run(output, backend),
            Cmd::Debug(d) => commands::debug::run(d).await,
            Cmd::Hold(a) => commands::hold::run(a).await,
            Cmd::WriteCost(a) => commands::write_cost::run(a),
        }
    });
    // The reader went away (`| head`): done, as other command-line tools.
    match result {
        Err(e) if commands::broken_pipe(&e) => Ok(()),
        other => other,
    }
}
