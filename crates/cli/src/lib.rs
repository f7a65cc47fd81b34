//! The command line: global options, the subcommand table, and the one place
//! errors become a line on stderr and an exit status.
//!
//! Exit status (design.md): 0 converged / success, 1 nothing was done (bad
//! input, API down, lock held), 2 finished with failed or skipped servers.
//! Each subcommand module owns its own clap arguments and `run` function.

mod args;
mod change;
mod commands;
mod earlier;
mod execution;
mod marking;
mod pictures;
pub mod progress;
mod question;
pub mod release;
pub mod settings;
mod terminal;
mod updates;

/// `agentsadm gz`: its entry point, also run in-process by the simulator.
pub use commands::gz;

/// The parts of `list` and the `--latest` rules, under the path tests and
/// tools use.
pub mod orch {
    pub use crate::commands::list::{ListRow, ListSummaryRow, list_rows, list_summary};
    pub use crate::updates::{LATEST_DC_RULE, LATEST_RULE};
}

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use agentsadm_orchestrate::report::ExecEvent;
use agentsadm_orchestrate::report::Reporter;
use agentsadm_orchestrate::reporters::LogReporter;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::output::Output;

/// What every subcommand returns: an exit status, or an error that becomes
/// one line on stderr and exit status 1.
pub type CmdResult = anyhow::Result<ExitCode>;

/// Exit status when a run finished but some servers failed or were skipped.
pub const EXIT_PARTIAL: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "agentsadm",
    version = release::VERSION,
    about = "Install, upgrade and track Triton global-zone agents, one component at a time"
)]
pub struct Cli<X: Extension = NoExtension> {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: TopCommand<X>,
}

/// The product's subcommands, then those the binary adds.
// One value per process, parsed once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum TopCommand<X: Extension> {
    #[command(flatten)]
    Product(Command),
    #[command(flatten)]
    Extra(X),
}

/// Subcommands a binary adds beside the product's: the developer's build
/// adds `sim`, `demo` and `bench` (crate `agentsadm-dev`); the server's
/// build adds none ([`NoExtension`]), so none of that code is in it.
pub trait Extension: Subcommand + std::fmt::Debug + Send + 'static {
    /// Run the subcommand.
    fn run(self, global: &GlobalOpts) -> futures::future::LocalBoxFuture<'_, CmdResult>;
    /// Whether this is a command that must not run inside itself (the
    /// demo, which runs other commands through [`run_in_process`]).
    fn runs_commands_in_process(&self) -> bool {
        false
    }
}

/// No extra subcommands: the server's build.
#[derive(Subcommand, Debug)]
pub enum NoExtension {}

impl Extension for NoExtension {
    fn run(self, _global: &GlobalOpts) -> futures::future::LocalBoxFuture<'_, CmdResult> {
        match self {}
    }
}

/// Options every subcommand accepts (shown under their own heading, after
/// the command's own).
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Global options")]
pub struct GlobalOpts {
    /// SAPI URL (default: from the SDC config on a headnode).
    #[arg(long, global = true, env = "SAPI_URL", value_name = "URL")]
    pub sapi_url: Option<String>,
    /// CNAPI URL (default: from the SDC config on a headnode).
    #[arg(long, global = true, env = "CNAPI_URL", value_name = "URL")]
    pub cnapi_url: Option<String>,
    /// IMGAPI URL of this datacenter (default: from the SDC config).
    #[arg(long, global = true, env = "IMGAPI_URL", value_name = "URL")]
    pub imgapi_url: Option<String>,
    /// Print one JSON document instead of text (`-j`, as sdcadm's list
    /// commands take it; the concurrency of a change is `-J`).
    #[arg(short = 'j', long, global = true)]
    pub json: bool,
    /// Print less.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more (repeat for debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Append bunyan JSON log records to this file (read them with
    /// `bunyan FILE`). plan and every command that changes the datacenter
    /// (update, install, remove, revert, disable, enable, adopt, check
    /// --fix, server, self-update) log by default: on a headnode under
    /// /var/log/agentsadm/logs/, elsewhere under
    /// $XDG_STATE_HOME/agentsadm/logs/.
    #[arg(long, global = true, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Use this component catalog instead of the built-in one.
    #[arg(long, global = true, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Also sent every execution event (not an option: set by callers that
    /// run commands in this process, such as the demo, to count what ran).
    #[arg(skip)]
    pub observer: Option<Observer>,
}

/// An extra [`Reporter`] for commands run in this process.
#[derive(Clone)]
pub struct Observer(pub Arc<dyn Reporter>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// The command line's progress display, then the observer (if any).
pub(crate) struct Tee<'a> {
    progress: &'a dyn Reporter,
    observer: Option<&'a dyn Reporter>,
}

impl Reporter for Tee<'_> {
    fn event(&self, event: &ExecEvent<'_>) {
        LogReporter.event(event);
        self.progress.event(event);
        if let Some(o) = self.observer {
            o.event(event);
        }
    }
}

impl GlobalOpts {
    pub fn output(&self) -> Output {
        Output {
            json: self.json,
            quiet: self.quiet,
        }
    }

    /// Where execution events go: `progress`, and the observer if set.
    pub(crate) fn reporter<'a>(&'a self, progress: &'a dyn Reporter) -> Tee<'a> {
        Tee {
            progress,
            observer: self.observer.as_ref().map(|o| o.0.as_ref()),
        }
    }

    /// The catalog `--catalog` names (blocking: for the developer's
    /// commands; the product's commands read [`settings::Settings`]).
    pub fn load_catalog(&self) -> anyhow::Result<Catalog> {
        match &self.catalog {
            Some(p) => Ok(Catalog::load(p)?),
            None => Ok(Catalog::builtin()),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List installed components per server (intent and reality).
    #[command(
        after_help = "Examples:\n  agentsadm list\n  agentsadm list vm-agent -s cn0001,cn0002\n  agentsadm list -H -o hostname,version --sort version vm-agent"
    )]
    List(commands::list::ListArgs),
    /// List images available for components.
    #[command(
        after_help = "Examples:\n  agentsadm avail vm-agent\n  agentsadm avail -C release\n  agentsadm avail --all-images --json"
    )]
    Avail(commands::avail::AvailArgs),
    /// Show the plan for update, install or remove without doing it.
    #[command(
        after_help = "Examples:\n  agentsadm plan update vm-agent --latest\n  agentsadm plan install dockerlogger -s cn0001"
    )]
    Plan(commands::plan::PlanArgs),
    /// Update components on servers to a target image.
    #[command(
        after_help = "Examples:\n  agentsadm update vm-agent --latest\n  agentsadm update vm-agent@1.1.0 -s cn0001,cn0002 -y\n  agentsadm update --all --latest -C release -n"
    )]
    Update(commands::update::UpdateArgs),
    /// Install a component on servers that do not have it.
    #[command(
        after_help = "Examples:\n  agentsadm install dockerlogger -s cn0001\n  agentsadm install cmon-agent --all-servers -y"
    )]
    Install(commands::install::InstallArgs),
    /// Uninstall a component from servers and delete its SAPI instances.
    #[command(
        after_help = "Examples:\n  agentsadm remove dockerlogger -s cn0001\n  agentsadm remove dockerlogger -s cn0001,cn0002 -y"
    )]
    Remove(commands::remove::RemoveArgs),
    /// Keep a component's SMF services disabled on servers (recorded in
    /// SAPI), across every later upgrade.
    #[command(
        after_help = "Examples:\n  agentsadm disable net-agent -s cn0042 --reason 'RFD 58: migration destination'"
    )]
    Disable(commands::disable::DisableArgs),
    /// Let a component disabled with `agentsadm disable` run again.
    #[command(after_help = "Examples:\n  agentsadm enable net-agent -s cn0042 -y")]
    Enable(commands::enable::EnableArgs),
    /// Leave a component where it is: every bulk change skips it (recorded in SAPI).
    #[command(
        after_help = "Examples:\n  agentsadm hold vm-agent -s cn0007,cn0008 --reason 'support case 4711'\n  agentsadm hold marlin-agent --reason 'Manta freeze'"
    )]
    Hold(commands::hold::HoldArgs),
    /// Lift a hold put with `agentsadm hold`.
    #[command(after_help = "Examples:\n  agentsadm release vm-agent -s cn0007,cn0008")]
    Release(commands::release::ReleaseArgs),
    /// List the runs that changed the datacenter, or show one per server.
    #[command(
        after_help = "Examples:\n  agentsadm history\n  agentsadm history -n 5 --since 2d\n  agentsadm history 1f0c2a9e --json"
    )]
    History(commands::history::HistoryArgs),
    /// Put back what a recorded run changed (the images servers ran before).
    #[command(
        after_help = "Examples:\n  agentsadm revert 1f0c2a9e -n\n  agentsadm revert 1f0c2a9e -y --canary 1"
    )]
    Revert(commands::revert::RevertArgs),
    /// Create SAPI agent services and instances for what is installed.
    #[command(after_help = "Examples:\n  agentsadm adopt -n\n  agentsadm adopt -y")]
    Adopt(commands::adopt::AdoptArgs),
    /// Report drift between SAPI intent, CNAPI and the servers; optionally fix it.
    #[command(
        after_help = "Examples:\n  agentsadm check\n  agentsadm check --live --json\n  agentsadm check --fix -y"
    )]
    Check(commands::check::CheckArgs),
    /// Delete or factory-reset a server, cleaning up its SAPI agent instances.
    Server(commands::server::ServerArgs),
    /// Helpers for the setup scripts in installer/: the USB key's image
    /// directory, image import, setup state.
    Installer(commands::installer::InstallerArgs),
    /// Global-zone installer commands (run on one server).
    Gz(commands::gz::command::GzArgs),
    /// Update agentsadm on this headnode, and what new servers get.
    #[command(
        after_help = "Examples:\n  agentsadm self-update --latest\n  agentsadm self-update -n --latest -C staging\n  agentsadm self-update --rollback"
    )]
    SelfUpdate(commands::self_update::SelfUpdateArgs),
}

impl Command {
    /// The name in the file name of a run's default log, for the commands
    /// that change the datacenter and `plan` (which logs as `update -n`
    /// does: the plan an operator saw is on record); `None` for the
    /// others (they log only with `--log-file`).
    fn run_log_name(&self) -> Option<&'static str> {
        match self {
            Command::Plan(_) => Some("plan"),
            Command::Update(_) => Some("update"),
            Command::Install(_) => Some("install"),
            Command::Remove(_) => Some("remove"),
            Command::Adopt(_) => Some("adopt"),
            Command::Disable(_) => Some("disable"),
            Command::Enable(_) => Some("enable"),
            Command::Revert(_) => Some("revert"),
            Command::Check(c) if c.fix => Some("check"),
            Command::Server(s) => Some(match s.command {
                commands::server::ServerCommand::Delete(_) => "server-delete",
                commands::server::ServerCommand::FactoryReset(_) => "server-factory-reset",
            }),
            Command::SelfUpdate(a) if !a.dry_run => Some("self-update"),
            _ => None,
        }
    }
}

/// Run the command with its settings resolved once, before it runs.
async fn dispatch<X: Extension>(cli: Cli<X>, argv: Vec<String>) -> CmdResult {
    let command = match cli.command {
        TopCommand::Product(c) => c,
        TopCommand::Extra(x) => return x.run(&cli.global).await,
    };
    let g = &settings::Settings::resolve(cli.global, argv).await;
    match command {
        Command::List(a) => commands::list::run(g, a).await,
        Command::Avail(a) => commands::avail::run(g, a).await,
        Command::Plan(a) => commands::plan::run(g, a).await,
        Command::Update(a) => commands::update::run(g, a).await,
        Command::Install(a) => commands::install::run(g, a).await,
        Command::Remove(a) => commands::remove::run(g, a).await,
        Command::Adopt(a) => commands::adopt::run(g, a).await,
        Command::Disable(a) => commands::disable::run(g, a).await,
        Command::Enable(a) => commands::enable::run(g, a).await,
        Command::Hold(a) => commands::hold::run(g, a).await,
        Command::Release(a) => commands::release::run(g, a).await,
        Command::History(a) => commands::history::run(g, a).await,
        Command::Revert(a) => commands::revert::run(g, a).await,
        Command::Check(a) => commands::check::run(g, a).await,
        Command::Server(a) => commands::server::run(g, a).await,
        Command::Installer(a) => commands::installer::run(g, a).await,
        Command::Gz(a) => commands::gz::run(g, a).await,
        Command::SelfUpdate(a) => commands::self_update::run(g, a).await,
    }
}

/// clap's message as one line: its first paragraph (some messages, such as
/// missing required arguments, list the arguments on the next lines),
/// without the `error: ` prefix.
fn usage_error_line(rendered: &str) -> String {
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let line = paragraph.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    if line.is_empty() {
        "invalid arguments".to_string()
    } else {
        line.to_string()
    }
}

/// An exit status as the number the process exits with.
pub fn exit_number(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(1)
}

/// The short flags that take no value, as they may be bundled (`-jy`,
/// `-nj`): a bundle of these with `j` in it asks for JSON.
const BUNDLED_FLAGS: &str = "jynqvHa";

/// Whether `arg` is `-j` or a bundle of value-less short flags with `j`
/// in it (`-jy`).
fn is_short_json(arg: &std::ffi::OsStr) -> bool {
    let Some(letters) = arg.to_str().and_then(|a| a.strip_prefix('-')) else {
        return false;
    };
    !letters.starts_with('-')
        && letters.contains('j')
        && letters.chars().all(|c| BUNDLED_FLAGS.contains(c))
}

/// Whether the command line asks for JSON, read from the raw arguments
/// (for errors found before they parse): `--json`, `-j` or a bundle such
/// as `-jy`, before any `--`.
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json" || is_short_json(a))
}

/// `-j 5`: sdcadm's update takes `-j` as its concurrency, but here `-j`
/// is `--json` and the number would be read as a component or a run.
/// Refused as a usage error before parsing, so that it never starts a
/// rollout.
fn mistaken_concurrency(args: &[std::ffi::OsString]) -> Option<String> {
    let words: Vec<&std::ffi::OsString> = args.iter().skip(1).take_while(|a| *a != "--").collect();
    words.windows(2).find_map(|pair| {
        let number = pair[1].to_str()?;
        (is_short_json(pair[0]) && !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()))
            .then(|| {
                format!(
                    "-j is --json here; for {number} servers at once give -J {number} (--concurrency {number})"
                )
            })
    })
}

/// A usage error: one line on stderr, and with `--json` the error document
/// on stdout (a script piping `--json` always gets a document). Exit 1.
fn usage_error(rendered: &str, json: bool) -> ExitCode {
    let first = usage_error_line(rendered);
    if json {
        Output {
            json: true,
            quiet: false,
        }
        .json(&serde_json::json!({
            "error": {"message": first, "usage": true},
            "exit_status": 1,
        }));
    }
    eprintln!("agentsadm: error: {first} (see 'agentsadm --help')");
    ExitCode::from(1)
}

/// Parse arguments, run the command, and turn the outcome into an exit
/// status. Usage errors are one line on stderr and exit 1 (not clap's 2,
/// which means "partial" here).
pub fn main<X: Extension>() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(message) = mistaken_concurrency(&args) {
        return usage_error(&message, wants_json(&args));
    }
    let cli = match Cli::<X>::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                };
            }
            return usage_error(&e.render().to_string(), wants_json(&args));
        }
    };
    let mut cli = cli;
    if cli.global.log_file.is_none()
        && let TopCommand::Product(command) = &cli.command
        && let Some(name) = command.run_log_name()
        && let Some(dir) = agentsadm_types::log::default_log_dir()
        && std::fs::create_dir_all(&dir).is_ok()
    {
        cli.global.log_file = Some(agentsadm_types::log::run_log_path(
            &dir,
            name,
            std::time::SystemTime::now(),
        ));
    }
    if let Err(e) = agentsadm_types::log::init(cli.global.verbose, cli.global.log_file.as_deref()) {
        let json = cli.global.json;
        return usage_error(&format!("cannot open log file: {e}"), json);
    }
    let argv: Vec<String> = std::env::args().collect();
    tracing::info!(
        target: agentsadm_types::log::FILE_ONLY_TARGET,
        component = "cli",
        argv = format!("{argv:?}"),
        user = std::env::var("USER").unwrap_or_default(),
        version = env!("CARGO_PKG_VERSION"),
        "agentsadm {}",
        argv.iter().skip(1).cloned().collect::<Vec<_>>().join(" ")
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentsadm: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run_parsed(cli))
}

/// An error as one line: its causes joined with `: `, stopping at a
/// connection failure (which names the URL; what the HTTP client says
/// below it is noise to an operator).
fn error_line(e: &anyhow::Error) -> String {
    agentsadm_types::error::error_chain_until(e.as_ref(), |cause| {
        matches!(
            cause.downcast_ref::<agentsadm_api::ApiError>(),
            Some(agentsadm_api::ApiError::Connect { .. })
        )
    })
}

/// Run a parsed command line; an error becomes one line on stderr and
/// exit status 1.
async fn run_parsed<X: Extension>(cli: Cli<X>) -> ExitCode {
    let log_file = cli.global.log_file.clone();
    let json = cli.global.json;
    agentsadm_types::log::set_run_log(log_file.clone());
    // A command that ended in an error changed nothing: its one line says
    // why (the log keeps the record), so the path is not printed after it.
    let mut failed = false;
    let argv: Vec<String> = std::env::args().collect();
    let code = match dispatch(cli, argv).await {
        Ok(code) => {
            tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET, component = "cli", exit_status = exit_number(code), "command finished with exit status {}", exit_number(code));
            code
        }
        Err(e) => {
            // The log file keeps the record; stderr gets the one line below.
            tracing::error!(target: agentsadm_types::log::FILE_ONLY_TARGET, component = "cli", error = format!("{e:#}"), exit_status = 1u8, "command failed with exit status 1");
            if json {
                // `| json` always gets a document.
                Output {
                    json: true,
                    quiet: false,
                }
                .json(&serde_json::json!({
                    "error": {"message": error_line(&e)},
                    "exit_status": 1,
                }));
            }
            eprintln!("agentsadm: error: {}", error_line(&e));
            failed = true;
            ExitCode::from(1)
        }
    };
    agentsadm_types::log::set_run_log(None);
    // With --json the path is in the document; with -q it is still said.
    if let Some(p) = log_file
        && !json
        && !failed
    {
        eprintln!("log: {}", p.display());
    }
    code
}

/// Run one `agentsadm` command line in this process, as the binary would
/// (same parsing, output, errors and exit status), with `observer` also
/// receiving execution events. `args` starts with the program name. For the
/// demo; logging is whatever this process set up.
#[cfg(feature = "in-process")]
pub async fn run_in_process<X, I, T>(args: I, observer: Option<Observer>) -> ExitCode
where
    X: Extension,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    if let Some(message) = mistaken_concurrency(&args) {
        return usage_error(&message, wants_json(&args));
    }
    let mut cli = match Cli::<X>::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e.render().to_string(), wants_json(&args)),
    };
    if matches!(&cli.command, TopCommand::Extra(x) if x.runs_commands_in_process()) {
        eprintln!("agentsadm: error: the demo cannot run inside itself");
        return ExitCode::from(1);
    }
    cli.global.observer = observer;
    // Boxed: dispatch reaches this function again through the demo.
    Box::pin(run_parsed(cli)).await
}

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory;

    #[test]
    fn help_shows_own_options_then_globals_then_examples() {
        let mut cli = super::Cli::<super::NoExtension>::command();
        cli.build();
        for name in [
            "list", "avail", "plan", "update", "install", "remove", "adopt", "check",
        ] {
            let sub = cli.find_subcommand_mut(name).expect(name);
            let help = sub.render_help().to_string();
            let own = help.find("Options:").expect("own options");
            let global = help.find("Global options:").expect("global heading");
            let examples = help.find("Examples:").expect("examples");
            assert!(own < global && global < examples, "{name}:\n{help}");
            let n = help[examples..]
                .lines()
                .filter(|l| l.trim_start().starts_with("agentsadm "))
                .count();
            assert!((2..=3).contains(&n), "{name}: {n} examples");
            assert!(!help[..global].contains("--sapi-url"), "{name}:\n{help}");
        }
    }

    /// One set of execution options for every changing command, with one
    /// validation.
    #[test]
    fn every_changing_command_takes_the_same_execution_options() {
        use clap::Parser as _;
        let parse = |args: &str| {
            super::Cli::<super::NoExtension>::try_parse_from(args.split_whitespace())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let options = "-J 3 --canary 1 --max-failures 10% --max-per-rack 2 --task-timeout 5m --break-lock -n -y";
        for command in [
            "update vm-agent",
            "revert 1f0c2a9e",
            "install dockerlogger -s cn1",
            "remove dockerlogger -s cn1",
            "check --fix",
            "adopt",
            "server delete cn1",
            "server factory-reset cn1",
        ] {
            parse(&format!("agentsadm {command} {options}")).unwrap();
            let e = parse(&format!("agentsadm {command} -J 0")).unwrap_err();
            assert!(e.contains("at least 1"), "{command}: {e}");
            let e = parse(&format!("agentsadm {command} --max-per-rack 0")).unwrap_err();
            assert!(e.contains("at least 1"), "{command}: {e}");
            let e = parse(&format!("agentsadm {command} --max-failures lots")).unwrap_err();
            assert!(e.contains("percentage"), "{command}: {e}");
        }
    }
}
