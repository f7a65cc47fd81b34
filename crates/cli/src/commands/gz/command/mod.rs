//! The installer's own entry point: `agentsadm gz ...` parsed, turned into
//! [`GzSettings`] once, run, and printed.
//!
//! - [`run`]: the command line (`agentsadm gz ...`), with the command
//!   line's own global options ([`GlobalOpts`]).
//! - [`run_captured`] / [`run_captured_on`]: the same command line run in
//!   this process (what a CNAPI execute request of
//!   [`agentsadm_api::remote::gz_execute_request`] asks the simulator for): same
//!   parsing, same code, output captured instead of printed, no
//!   process-wide state.
//!
//! Exit status: 0 done, 1 failed (the result document says how).

mod fetch_args;
mod print;

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use agentsadm_api::ApiConfig;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_platform::Platform;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::CatalogError;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

use crate::GlobalOpts;

use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::layout::LayoutKind;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::setup::SetupSource;
use agentsadm_gz::step::Step;
use agentsadm_types::error::error_chain;
use print::{Printer, print_report, print_result};

#[derive(Args, Debug)]
pub struct GzArgs {
    #[command(flatten)]
    pub opts: GzOpts,
    #[command(subcommand)]
    pub command: GzCommand,
}

/// The `--layout` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// A Triton global zone (`/` or a rooted directory).
    #[default]
    Smartdc,
    /// A mockcloud tree: `<root>/servers/<uuid>/agents/<name>/...`.
    Mockcloud,
}

impl From<LayoutArg> for LayoutKind {
    fn from(a: LayoutArg) -> LayoutKind {
        match a {
            LayoutArg::Smartdc => LayoutKind::Smartdc,
            LayoutArg::Mockcloud => LayoutKind::Mockcloud,
        }
    }
}

/// Options of every `gz` subcommand.
#[derive(Args, Clone, Debug)]
pub struct GzOpts {
    /// Root of the global zone (a directory for tests and the simulator).
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// On-disk layout: a Triton GZ, or a mockcloud tree (`--root` is the
    /// mockcloud root, `--server-uuid` picks the server).
    #[arg(long, global = true, value_enum, default_value_t = LayoutArg::Smartdc)]
    pub layout: LayoutArg,
    /// This server's UUID (instead of sysinfo's; required for mockcloud).
    #[arg(long, global = true, value_name = "UUID")]
    pub server_uuid: Option<ServerUuid>,
    /// Treat this server as the headnode (instead of sysinfo's boot parameter).
    #[arg(long, global = true)]
    pub headnode: bool,
    /// This command runs as a child of cn-agent (CNAPI CommandExecute):
    /// work that stops cn-agent is handed to the agentsadm-install service.
    #[arg(long, global = true)]
    pub inside_cn_agent: bool,
    /// Do not adopt instances into SAPI (headnode setup before SAPI exists).
    #[arg(long, global = true)]
    pub no_sapi: bool,
    /// Do not report the installed set to CNAPI.
    #[arg(long, global = true)]
    pub no_cnapi: bool,
    /// Time limit of each lifecycle hook (e.g. 90s, 10m).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    pub hook_timeout: Duration,
    /// How long to wait for another agentsadm run on this server.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration, default_value = "5m")]
    pub lock_wait: Duration,
    /// Timeout of each API request.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration, default_value = "30s", hide = true)]
    pub api_timeout: Duration,
    /// Health gate: how long each service of a new version must stay
    /// online before the install counts (default 10s on a real server, 0
    /// on a rooted directory; 0 = online once).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub min_healthy: Option<Duration>,
    /// Health gate: how long a service may take to come online before the
    /// install is rolled back as unhealthy.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration, default_value = "2m")]
    pub health_timeout: Duration,
    /// Retries of idempotent API requests and of broken downloads.
    #[arg(
        long,
        global = true,
        value_name = "N",
        default_value_t = 4,
        hide = true
    )]
    pub api_retries: u32,
    #[command(flatten)]
    pub fetch: fetch_args::FetchArgs,
}

/// A `--hook-timeout` (or similar) that is not a duration.
#[derive(Debug, thiserror::Error)]
#[error("{input:?} is not a duration (use e.g. 30s, 5m)")]
pub struct DurationError {
    input: String,
    #[source]
    err: humantime::DurationError,
}

/// A duration: `30s`, `5m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    if let Ok(secs) = s.parse::<f64>()
        && secs >= 0.0
        && secs.is_finite()
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s).map_err(|err| DurationError {
        input: s.to_string(),
        err,
    })
}

/// `--expect-current IMAGE_UUID|none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectCurrent(pub Option<ImageUuid>);

/// An `--expect-current` that is neither an image UUID nor `none`.
#[derive(Debug, thiserror::Error)]
#[error("{input:?} is not an image UUID or 'none'")]
pub struct ExpectCurrentError {
    input: String,
}

/// `--expect NAME=IMAGE_UUID|none`: one component's expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectOne(pub ComponentName, pub Option<ImageUuid>);

/// An `--expect` that is not `NAME=IMAGE_UUID|none`.
#[derive(Debug, thiserror::Error)]
#[error("{input:?} is not NAME=IMAGE_UUID or NAME=none (e.g. vm-agent=none)")]
pub struct ExpectOneError {
    input: String,
}

fn parse_expect_one(s: &str) -> Result<ExpectOne, ExpectOneError> {
    let bad = || ExpectOneError {
        input: s.to_string(),
    };
    let (name, image) = s.split_once('=').ok_or_else(bad)?;
    let name = ComponentName::new(name).map_err(|_| bad())?;
    let ExpectCurrent(image) = parse_expect_current(image).map_err(|_| bad())?;
    Ok(ExpectOne(name, image))
}

fn parse_expect_current(s: &str) -> Result<ExpectCurrent, ExpectCurrentError> {
    if s == "none" {
        return Ok(ExpectCurrent(None));
    }
    s.parse()
        .map(|i| ExpectCurrent(Some(i)))
        .map_err(|_| ExpectCurrentError {
            input: s.to_string(),
        })
}

#[derive(Subcommand, Debug)]
pub enum GzCommand {
    /// Install or upgrade components from IMGAPI images or local image files.
    Install {
        /// Image UUIDs (fetched from IMGAPI) or image files (a `.manifest`
        /// next to each).
        #[arg(required = true, value_name = "IMAGE_UUID|FILE")]
        images: Vec<String>,
        /// Reinstall even if the image is already installed.
        #[arg(long)]
        force: bool,
        /// Refuse (changed since the plan) unless each component has this
        /// image installed now, or nothing with `none`; the orchestrator
        /// passes the image its plan saw.
        #[arg(long, value_name = "IMAGE_UUID|none", value_parser = parse_expect_current)]
        expect_current: Option<ExpectCurrent>,
        /// The same for one component, `NAME=IMAGE_UUID|none` (repeat it
        /// per component; over `--expect-current` for that component).
        #[arg(long, value_name = "NAME=IMAGE_UUID|none", value_parser = parse_expect_one)]
        expect: Vec<ExpectOne>,
    },
    /// Check that an installed component's services are online and stay
    /// online (`--min-healthy`); exit 1 (step `unhealthy`) if not.
    Health {
        #[arg(value_name = "NAME")]
        name: ComponentName,
    },
    /// Uninstall components.
    Remove {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<ComponentName>,
    },
    /// Install the default set of this server's role.
    Setup {
        /// `imgapi` (each SAPI agent service's params.image_uuid) or a
        /// directory of `<name>/<uuid>.{manifest,file}`.
        #[arg(long, value_name = "DIR|imgapi")]
        source: String,
    },
    /// Report installed components (the `server.agents` list).
    Report {
        /// Also POST it to CNAPI as server.agents.
        #[arg(long)]
        post: bool,
    },
    /// Keep an installed component's services disabled on this server,
    /// across every later upgrade, reinstall and rollback.
    Disable {
        #[arg(value_name = "NAME")]
        name: ComponentName,
        /// Who asked (recorded; the orchestrator passes SAPI's).
        #[arg(long, value_name = "WHO")]
        by: Option<String>,
        /// When (recorded; the orchestrator passes SAPI's).
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Why (recorded).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Let a component disabled with `gz disable` run again.
    Enable {
        #[arg(value_name = "NAME")]
        name: ComponentName,
    },
    /// Restore the version replaced by the last upgrade of a component.
    Rollback {
        #[arg(value_name = "NAME")]
        name: ComponentName,
    },
    /// Run a job handed over by cn-agent (used by the agentsadm-install SMF
    /// service).
    #[command(hide = true)]
    RunJob {
        #[arg(long, value_name = "FILE")]
        job: PathBuf,
    },
}

/// `agentsadm [OPTIONS] gz ...` as an in-process run parses it.
#[derive(Parser, Debug)]
#[command(
    name = "agentsadm",
    version,
    about = "Install, upgrade and track Triton global-zone agents, one component at a time"
)]
struct Invocation {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Subcommand, Debug)]
enum TopCommand {
    /// Global-zone installer commands (run on one server).
    Gz(GzArgs),
}

/// Why the settings of a run could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// Why an in-process command line was not run.
enum ParseFailure {
    /// A command other than `gz`.
    NotGz,
    Clap(clap::Error),
}

/// The parser of [`Invocation`], built once per process and reused:
/// building it (every subcommand, the global options copied into each)
/// was half of the CPU of a `gz health` the simulator runs for each server
/// step (a rollout's profile: 6.5% of all its CPU in `parse`), and a clone
/// of the built parser cost as much again (it copies those global options
/// too). Parsing takes it by `&mut` and leaves it as built, so each parse
/// waits only for the one before it (microseconds).
fn with_invocation_command<T>(parse: impl FnOnce(&mut clap::Command) -> T) -> T {
    static BUILT: std::sync::OnceLock<std::sync::Mutex<clap::Command>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let mut command = Invocation::command();
        command.build();
        std::sync::Mutex::new(command)
    });
    // A parse that panicked leaves the parser as it was: keep using it.
    let mut command = built.lock().unwrap_or_else(|e| e.into_inner());
    parse(&mut command)
}

/// Parse `agentsadm <argv...>` as a `gz` command line.
fn parse(argv: &[String]) -> Result<(Invocation, clap::ArgMatches), ParseFailure> {
    let matches = with_invocation_command(|command| {
        command.try_get_matches_from_mut(
            std::iter::once("agentsadm".to_string()).chain(argv.iter().cloned()),
        )
    })
    .map_err(|e| {
        // `agentsadm list` and the like: a command of the command line,
        // not of the installer.
        let invalid = match e.get(ContextKind::InvalidSubcommand) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        match invalid {
            Some(cmd)
                if e.kind() == ErrorKind::InvalidSubcommand
                    && argv.iter().take_while(|a| **a != cmd).all(|a| a != "gz") =>
            {
                ParseFailure::NotGz
            }
            _ => ParseFailure::Clap(e),
        }
    })?;
    let invocation = Invocation::from_arg_matches(&matches).map_err(ParseFailure::Clap)?;
    Ok((invocation, matches))
}

/// `agentsadm gz ...` from the command line (`argv`: its words after the
/// program's name); returns the exit status.
pub async fn run(global: &GlobalOpts, argv: Vec<String>, args: GzArgs) -> u8 {
    let mut printer = Printer::terminal(global.json, global.quiet);
    exit_status(execute(global, args, BTreeMap::new(), argv, None, &mut printer).await)
}

/// The exit status `agentsadm gz` reports: never
/// [`agentsadm_api::remote::UR_REBOOT_EXIT_STATUS`], which Ur, the way
/// CNAPI execute usually reaches a server, answers as success before
/// rebooting the server.
fn exit_status(code: u8) -> u8 {
    if i32::from(code) == agentsadm_api::remote::UR_REBOOT_EXIT_STATUS {
        1
    } else {
        code
    }
}

/// Run `agentsadm <argv...>` (a `gz` command) in this process with `env`
/// as its environment additions (API URLs, hook environment), capturing
/// stdout, stderr and the exit status. Safe to call concurrently for
/// different roots; runs for the same root wait for each other (the server
/// lock). No global state is touched: logging with `--log-file` goes to a
/// subscriber scoped to this call.
#[cfg(feature = "in-process")]
pub async fn run_captured(
    argv: Vec<String>,
    env: BTreeMap<String, String>,
) -> agentsadm_api::cnapi::ExecuteResult {
    run_captured_on(argv, env, None).await
}

/// [`run_captured`] with the GZ's [`Platform`] given instead of the one the
/// root implies: the simulator's rooted servers hand cn-agent's own
/// replacement to a simulated agentsadm-install service this way.
#[cfg(feature = "in-process")]
pub async fn run_captured_on(
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    platform: Option<Arc<dyn Platform>>,
) -> agentsadm_api::cnapi::ExecuteResult {
    use agentsadm_api::cnapi::ExecuteResult;
    use tracing::instrument::WithSubscriber;
    let failed = |stderr: String| ExecuteResult {
        exit_status: 1,
        stdout: String::new(),
        stderr,
    };
    let (invocation, matches) = match parse(&argv) {
        Ok(parsed) => parsed,
        Err(ParseFailure::NotGz) => {
            return failed(
                "agentsadm: error: only `agentsadm gz ...` commands run in-process\n".into(),
            );
        }
        Err(ParseFailure::Clap(e)) => {
            let rendered = e.render().to_string();
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                return ExecuteResult {
                    exit_status: 0,
                    stdout: rendered,
                    stderr: String::new(),
                };
            }
            return failed(rendered);
        }
    };
    let mut global = invocation.global;
    env_urls(&mut global, &matches, &env);
    let TopCommand::Gz(args) = invocation.command;
    let mut printer = Printer::captured(global.json, global.quiet);
    let log = match global.log_file.clone() {
        Some(path) => match blocking({
            let path = path.clone();
            move || agentsadm_types::log::BunyanLayer::open(&path, "agentsadm")
        })
        .await
        {
            Ok(layer) => {
                use tracing_subscriber::layer::SubscriberExt;
                let sub =
                    tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
                        layer,
                        tracing_subscriber::EnvFilter::new("agentsadm=debug"),
                    ));
                Some(tracing::Dispatch::new(sub))
            }
            Err(e) => {
                return failed(format!(
                    "agentsadm: error: cannot open log file {}: {e}\n",
                    path.display()
                ));
            }
        },
        None => None,
    };
    let fut = execute(&global, args, env, argv, platform, &mut printer);
    let code = match log {
        Some(d) => fut.with_subscriber(d).await,
        None => fut.await,
    };
    let (stdout, stderr) = printer.take();
    ExecuteResult {
        exit_status: i32::from(exit_status(code)),
        stdout,
        stderr,
    }
}

/// The API URLs of an in-process run's environment `env` win over this
/// process's (but not over flags).
fn env_urls(global: &mut GlobalOpts, matches: &clap::ArgMatches, env: &BTreeMap<String, String>) {
    for (id, var) in [
        ("sapi_url", "SAPI_URL"),
        ("cnapi_url", "CNAPI_URL"),
        ("imgapi_url", "IMGAPI_URL"),
    ] {
        if matches.value_source(id) != Some(ValueSource::CommandLine)
            && let Some(v) = env.get(var)
        {
            let slot = match id {
                "sapi_url" => &mut global.sapi_url,
                "cnapi_url" => &mut global.cnapi_url,
                _ => &mut global.imgapi_url,
            };
            *slot = Some(v.clone());
        }
    }
}

/// The run's settings, from the command line and `env`: the one place
/// arguments become [`GzSettings`].
async fn settings(
    global: &GlobalOpts,
    opts: &GzOpts,
    env: BTreeMap<String, String>,
) -> Result<GzSettings, SettingsError> {
    let platform = agentsadm_gz::session::platform_for_command_line(&opts.root, &env);
    let mut s = GzSettings::new(&opts.root, platform);
    s.layout = opts.layout.into();
    s.server_uuid = opts.server_uuid;
    s.headnode = opts.headnode.then_some(true);
    s.inside_cn_agent = opts.inside_cn_agent;
    s.no_sapi = opts.no_sapi;
    s.no_cnapi = opts.no_cnapi;
    s.hook_timeout = opts.hook_timeout;
    s.lock_wait = opts.lock_wait;
    if let Some(gate) = s.health.as_mut() {
        if let Some(m) = opts.min_healthy {
            gate.min_healthy = m;
        }
        gate.timeout = opts.health_timeout;
    }
    s.imgapi_url = global.imgapi_url.clone();
    s.sapi_url = global.sapi_url.clone();
    s.cnapi_url = global.cnapi_url.clone();
    s.api = ApiConfig {
        timeout: opts.api_timeout,
        retries: opts.api_retries,
        ..ApiConfig::default()
    };
    s.fetch.read_timeout = opts.api_timeout;
    s.fetch.retries = opts.api_retries.min(2);
    opts.fetch.apply(&mut s.fetch);
    s.env = env;
    s.catalog = match global.catalog.clone() {
        Some(p) => blocking(move || Catalog::load(&p)).await?,
        None => Catalog::builtin(),
    };
    Ok(s)
}

/// Run one parsed `gz` command; returns the exit status.
async fn execute(
    global: &GlobalOpts,
    args: GzArgs,
    env: BTreeMap<String, String>,
    argv: Vec<String>,
    platform: Option<Arc<dyn Platform>>,
    printer: &mut Printer,
) -> u8 {
    let mut settings = match settings(global, &args.opts, env.clone()).await {
        Ok(s) => s,
        Err(e) => {
            printer.err(&format!("agentsadm: error: {}", error_chain(&e)));
            return 1;
        }
    };
    settings.platform = platform.clone();
    let command = match args.command {
        GzCommand::Report { post } => return report(settings, post, printer).await,
        GzCommand::RunJob { job } => return run_job(&job, env, platform, printer).await,
        GzCommand::Health { name } => return health(settings, &name, printer).await,
        command => command,
    };
    settings.job_argv = Some(argv);
    let mut session = match GzSession::open(settings, true).await {
        Ok(s) => s,
        Err(e) => {
            let result = GzResult {
                server_uuid: args.opts.server_uuid.unwrap_or(ServerUuid::from_u128(0)),
                components: Vec::new(),
                error: Some(e.to_failure()),
                warnings: Vec::new(),
            };
            return print_result(printer, &result);
        }
    };
    let result = match command {
        GzCommand::Install {
            images,
            force,
            expect_current,
            expect,
        } => {
            let mut sources = Vec::new();
            for i in &images {
                match ImageSource::from_arg(i) {
                    Ok(s) => sources.push(s),
                    Err(e) => {
                        let result = GzResult {
                            server_uuid: session.server(),
                            components: Vec::new(),
                            error: Some(GzFailure {
                                component: None,
                                step: Step::Resolve,
                                message: error_chain(&e),
                            }),
                            warnings: Vec::new(),
                        };
                        return print_result(printer, &result);
                    }
                }
            }
            session.set_force(force);
            session.set_expect_current(expect_current.map(|e| e.0));
            session.set_expect_each(expect.into_iter().map(|e| (e.0, e.1)).collect());
            session.install(&sources).await
        }
        GzCommand::Remove { names } => session.remove(&names).await,
        GzCommand::Rollback { name } => session.rollback(&name).await,
        GzCommand::Disable {
            name,
            by,
            at,
            reason,
        } => {
            let record = agentsadm_gz::keep_off::OffRecord {
                by: by.unwrap_or_else(|| "agentsadm gz disable".into()),
                at: at.unwrap_or_default(),
                reason,
            };
            session.disable(&name, record).await
        }
        GzCommand::Enable { name } => session.enable(&name).await,
        GzCommand::Setup { source } => {
            let src = if source == "imgapi" {
                SetupSource::Imgapi
            } else {
                SetupSource::Dir(PathBuf::from(source))
            };
            session.setup(&src).await
        }
        GzCommand::Report { .. } | GzCommand::RunJob { .. } | GzCommand::Health { .. } => {
            unreachable!("report, run-job and health returned above")
        }
    };
    print_result(printer, &result)
}

/// `gz health NAME`: no lock (it changes nothing), the result document
/// (`--json`) or one line.
async fn health(settings: GzSettings, name: &ComponentName, printer: &mut Printer) -> u8 {
    let mut session = match GzSession::open(settings, false).await {
        Ok(s) => s,
        Err(e) => {
            printer.err(&format!("agentsadm: error: {}", error_chain(&e)));
            return 1;
        }
    };
    let (result, checked) = session.health(name).await;
    print::print_health(printer, &result, &checked)
}

/// `gz report [--post]`.
async fn report(settings: GzSettings, post: bool, printer: &mut Printer) -> u8 {
    let session = match GzSession::open(settings, false).await {
        Ok(s) => s,
        Err(e) => {
            printer.err(&format!("agentsadm: error: {}", error_chain(&e)));
            return 1;
        }
    };
    let report = session.report().await;
    print_report(printer, &report);
    if post {
        if !session.has_cnapi() {
            printer.err("agentsadm: error: no CNAPI URL: pass --cnapi-url or set CNAPI_URL");
            return 1;
        }
        if let Err(e) = session.post(&report).await {
            printer.err(&format!(
                "agentsadm: error: cannot post server.agents of {} to CNAPI: {}; retry later",
                session.server(),
                error_chain(&e)
            ));
            return 1;
        }
        printer.line(&format!(
            "posted {} components to CNAPI",
            report.agents.len()
        ));
    }
    0
}

/// `gz run-job --job FILE`: the command line cn-agent handed over, run in
/// this run's environment (the SMF service's).
async fn run_job(
    job: &std::path::Path,
    env: BTreeMap<String, String>,
    platform: Option<Arc<dyn Platform>>,
    printer: &mut Printer,
) -> u8 {
    let text = match tokio::fs::read(job).await {
        Ok(t) => t,
        Err(e) => {
            printer.err(&format!(
                "agentsadm: error: cannot read job {}: {e}",
                job.display()
            ));
            return 1;
        }
    };
    let job_argv: Vec<String> = serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("argv")?.clone()).ok())
        .unwrap_or_default();
    if job_argv.is_empty() || job_argv.iter().any(|a| a == "run-job") {
        printer.err(&format!(
            "agentsadm: error: job {} has no valid argv",
            job.display()
        ));
        return 1;
    }
    let (invocation, matches) = match parse(&job_argv) {
        Ok(parsed) => parsed,
        Err(ParseFailure::NotGz) => {
            printer.err("agentsadm: error: a job must be a gz command");
            return 1;
        }
        Err(ParseFailure::Clap(e)) => {
            printer.err(&format!(
                "agentsadm: error: job {}: {}",
                job.display(),
                e.render()
            ));
            return 1;
        }
    };
    let mut global = invocation.global;
    env_urls(&mut global, &matches, &env);
    printer.set_mode(global.json, global.quiet);
    let TopCommand::Gz(inner) = invocation.command;
    Box::pin(execute(&global, inner, env, Vec::new(), platform, printer)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator spawns these on a multi-threaded runtime.
    #[cfg(feature = "in-process")]
    #[test]
    fn entry_points_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let f = run_captured(Vec::new(), BTreeMap::new());
        assert_send(&f);
        let g = agentsadm_gz::install(
            GzSettings::new("/nonexistent", agentsadm_gz::session::PlatformKind::Rooted),
            &[],
        );
        assert_send(&g);
    }

    #[cfg(feature = "in-process")]
    #[tokio::test]
    async fn captured_runs_report_usage_errors() {
        let r = run_captured(vec!["gz".into(), "frobnicate".into()], BTreeMap::new()).await;
        assert_eq!(r.exit_status, 1);
        assert!(r.stderr.contains("frobnicate"), "{}", r.stderr);
        let r = run_captured(vec!["list".into()], BTreeMap::new()).await;
        assert_eq!(r.exit_status, 1);
        assert!(r.stderr.contains("only `agentsadm gz"), "{}", r.stderr);
    }

    /// The parser is built once and reused: each parse sees its own
    /// command line only (no option of the one before, defaults back),
    /// exactly as a parser built for it, after an error too.
    #[test]
    fn a_reused_parser_parses_each_command_line_afresh() {
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let fresh = |s: &str| {
            let argv = std::iter::once("agentsadm".to_string()).chain(words(s));
            format!("{:?}", Invocation::try_parse_from(argv).expect(s))
        };
        let reused = |s: &str| match parse(&words(s)) {
            Ok((invocation, _)) => format!("{invocation:?}"),
            Err(ParseFailure::NotGz) => panic!("{s}: not a gz command"),
            Err(ParseFailure::Clap(e)) => panic!("{s}: {e}"),
        };
        for line in [
            "--json -vv gz --root /a health vm-agent",
            "gz remove net-agent",
            "gz --root /b --layout mockcloud --server-uuid 00000000-0000-0000-0000-000000000005 health vm-agent",
            "-q gz health cn-agent",
        ] {
            assert_eq!(reused(line), fresh(line), "{line}");
            assert!(matches!(
                parse(&words("gz frobnicate")),
                Err(ParseFailure::Clap(_))
            ));
        }
    }

    #[test]
    fn durations_are_seconds_or_humantime() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn gz_never_exits_with_urs_reboot_status() {
        assert_eq!(exit_status(113), 1);
        for code in [0u8, 1, 2, 3, 112, 114, 255] {
            assert_eq!(exit_status(code), code);
        }
    }
}
