//! `agentsadm gz ...`: the GZ installer's command line (one server).
//!
//! Also [`run_captured`], the in-process entry point the simulator uses to
//! run `agentsadm gz ...` for CNAPI execute requests: same parsing, same
//! code, output captured instead of printed, no process-wide state.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Subcommand};
use tracing::instrument::WithSubscriber;

use super::{Cli, CmdResult, Command, GlobalOpts};
use crate::api::ApiConfig;
use crate::api::cnapi::ExecuteResult;
use crate::gz::fetch::ImageSource;
use crate::gz::platform::Platform;
use crate::gz::session::{GzSession, GzSettings, Layout};
use crate::gz::setup::SetupSource;
use crate::ids::ServerUuid;
use crate::remote::{AgentsReport, ComponentAction, GzResult};

#[derive(Args, Debug)]
pub struct GzArgs {
    #[command(flatten)]
    pub opts: GzOpts,
    #[command(subcommand)]
    pub command: GzCommand,
}

/// Options of every `gz` subcommand.
#[derive(Args, Clone, Debug)]
pub struct GzOpts {
    /// Root of the global zone (a directory for tests and the simulator).
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// On-disk layout: a Triton GZ, or a mockcloud tree (`--root` is the
    /// mockcloud root, `--server-uuid` picks the server).
    #[arg(long, global = true, value_enum, default_value_t = Layout::Smartdc)]
    pub layout: Layout,
    /// This server's UUID (instead of sysinfo's; required for mockcloud).
    #[arg(long, global = true, value_name = "UUID")]
    pub server_uuid: Option<ServerUuid>,
    /// Treat this server as the headnode (instead of sysinfo's boot parameter).
    #[arg(long, global = true)]
    pub headnode: bool,
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
    /// Retries of idempotent API requests and of broken downloads.
    #[arg(
        long,
        global = true,
        value_name = "N",
        default_value_t = 4,
        hide = true
    )]
    pub api_retries: u32,
}

/// A duration: `30s`, `5m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>()
        && secs >= 0.0
        && secs.is_finite()
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 30s, 5m)"))
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
    },
    /// Uninstall components.
    Remove {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
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
    /// Restore the version replaced by the last upgrade of a component.
    Rollback {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Run a job handed over by cn-agent (used by the agentsadm-install SMF
    /// service).
    #[command(hide = true)]
    RunJob {
        #[arg(long, value_name = "FILE")]
        job: PathBuf,
    },
}

/// Where output goes: the terminal, or buffers (in-process runs).
#[derive(Debug, Default)]
struct Printer {
    json: bool,
    quiet: bool,
    capture: Option<(String, String)>,
}

impl Printer {
    fn out(&mut self, text: &str) {
        match &mut self.capture {
            Some((o, _)) => {
                o.push_str(text);
                o.push('\n');
            }
            None => println!("{text}"),
        }
    }

    fn err(&mut self, text: &str) {
        match &mut self.capture {
            Some((_, e)) => {
                e.push_str(text);
                e.push('\n');
            }
            None => eprintln!("{text}"),
        }
    }

    fn line(&mut self, text: &str) {
        if !self.json && !self.quiet {
            self.out(text);
        }
    }

    fn json<T: serde::Serialize>(&mut self, value: &T) {
        let text = serde_json::to_string_pretty(value)
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        self.out(&text);
    }
}

/// `agentsadm gz ...` from the command line.
pub async fn run(global: &GlobalOpts, args: GzArgs) -> CmdResult {
    let mut printer = Printer {
        json: global.json,
        quiet: global.quiet,
        capture: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = execute(global, args, BTreeMap::new(), argv, None, &mut printer).await;
    Ok(ExitCode::from(code))
}

/// Run `agentsadm <argv...>` (a `gz` command) in this process with `env`
/// as its environment additions (API URLs, hook environment), capturing
/// stdout, stderr and the exit status. Safe to call concurrently for
/// different roots; runs for the same root wait for each other (the server
/// lock). No global state is touched: logging with `--log-file` goes to a
/// subscriber scoped to this call.
pub async fn run_captured(argv: Vec<String>, env: BTreeMap<String, String>) -> ExecuteResult {
    run_captured_on(argv, env, None).await
}

/// [`run_captured`] with the GZ's [`Platform`] given instead of the one the
/// root implies: the simulator's rooted servers hand cn-agent's own
/// replacement to a simulated agentsadm-install service this way.
pub async fn run_captured_on(
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    platform: Option<Arc<dyn Platform>>,
) -> ExecuteResult {
    let mut printer = Printer {
        capture: Some((String::new(), String::new())),
        ..Default::default()
    };
    let matches = match Cli::command()
        .try_get_matches_from(std::iter::once("agentsadm".to_string()).chain(argv.iter().cloned()))
    {
        Ok(m) => m,
        Err(e) => {
            let rendered = e.render().to_string();
            let is_help = matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            return ExecuteResult {
                exit_status: if is_help { 0 } else { 1 },
                stdout: if is_help {
                    rendered.clone()
                } else {
                    String::new()
                },
                stderr: if is_help { String::new() } else { rendered },
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            return ExecuteResult {
                exit_status: 1,
                stdout: String::new(),
                stderr: e.render().to_string(),
            };
        }
    };
    let mut global = cli.global;
    env_urls(&mut global, &matches, &env);
    let Command::Gz(args) = cli.command else {
        return ExecuteResult {
            exit_status: 1,
            stdout: String::new(),
            stderr: "agentsadm: error: only `agentsadm gz ...` commands run in-process\n".into(),
        };
    };
    printer.json = global.json;
    printer.quiet = global.quiet;
    let log = match &global.log_file {
        Some(path) => match crate::log::BunyanLayer::open(path, "agentsadm") {
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
                return ExecuteResult {
                    exit_status: 1,
                    stdout: String::new(),
                    stderr: format!(
                        "agentsadm: error: cannot open log file {}: {e}\n",
                        path.display()
                    ),
                };
            }
        },
        None => None,
    };
    let fut = execute(&global, args, env, argv, platform, &mut printer);
    let code = match log {
        Some(d) => fut.with_subscriber(d).await,
        None => fut.await,
    };
    let (stdout, stderr) = printer.capture.take().unwrap_or_default();
    ExecuteResult {
        exit_status: code as i32,
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

fn settings(
    global: &GlobalOpts,
    opts: &GzOpts,
    env: BTreeMap<String, String>,
) -> anyhow::Result<GzSettings> {
    let mut s = GzSettings::new(&opts.root);
    s.layout = opts.layout;
    s.server_uuid = opts.server_uuid;
    s.headnode = opts.headnode.then_some(true);
    s.no_sapi = opts.no_sapi;
    s.no_cnapi = opts.no_cnapi;
    s.hook_timeout = opts.hook_timeout;
    s.lock_wait = opts.lock_wait;
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
    s.env = env;
    s.catalog = global.load_catalog()?;
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
    let mut settings = match settings(global, &args.opts, env.clone()) {
        Ok(s) => s,
        Err(e) => {
            printer.err(&format!("agentsadm: error: {e:#}"));
            return 1;
        }
    };
    settings.platform = platform.clone();
    match args.command {
        GzCommand::Report { post } => {
            let session = match GzSession::open(settings, false).await {
                Ok(s) => s,
                Err(e) => {
                    printer.err(&format!(
                        "agentsadm: error: {}",
                        crate::error::error_chain(&e)
                    ));
                    return 1;
                }
            };
            let report = session.report();
            print_report(printer, &report);
            if post {
                if !session.has_cnapi() {
                    printer
                        .err("agentsadm: error: no CNAPI URL: pass --cnapi-url or set CNAPI_URL");
                    return 1;
                }
                if let Err(e) = session.post(&report).await {
                    printer.err(&format!(
                        "agentsadm: error: cannot post server.agents of {} to CNAPI: {}; retry later",
                        session.server(),
                        crate::error::error_chain(&e)
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
        GzCommand::RunJob { job } => {
            let text = match std::fs::read(&job) {
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
            let matches = match Cli::command().try_get_matches_from(
                std::iter::once("agentsadm".to_string()).chain(job_argv.iter().cloned()),
            ) {
                Ok(m) => m,
                Err(e) => {
                    printer.err(&format!(
                        "agentsadm: error: job {}: {}",
                        job.display(),
                        e.render()
                    ));
                    return 1;
                }
            };
            let cli = match Cli::from_arg_matches(&matches) {
                Ok(c) => c,
                Err(e) => {
                    printer.err(&format!("agentsadm: error: {}", e.render()));
                    return 1;
                }
            };
            let Command::Gz(inner) = cli.command else {
                printer.err("agentsadm: error: a job must be a gz command");
                return 1;
            };
            let mut inner_global = cli.global;
            env_urls(&mut inner_global, &matches, &env);
            printer.json = inner_global.json;
            printer.quiet = inner_global.quiet;
            // The job runs in this run's environment (the SMF service's).
            Box::pin(execute(
                &inner_global,
                inner,
                env,
                Vec::new(),
                platform,
                printer,
            ))
            .await
        }
        command => {
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
                GzCommand::Install { images, force } => {
                    let mut sources = Vec::new();
                    for i in &images {
                        match ImageSource::from_arg(i) {
                            Ok(s) => sources.push(s),
                            Err(e) => {
                                let result = GzResult {
                                    server_uuid: session.server(),
                                    components: Vec::new(),
                                    error: Some(crate::remote::GzFailure {
                                        component: None,
                                        step: "resolve".into(),
                                        message: crate::error::error_chain(&e),
                                    }),
                                    warnings: Vec::new(),
                                };
                                return print_result(printer, &result);
                            }
                        }
                    }
                    session.set_force(force);
                    session.install(&sources).await
                }
                GzCommand::Remove { names } => session.remove(&names).await,
                GzCommand::Rollback { name } => session.rollback(&name).await,
                GzCommand::Setup { source } => {
                    let src = if source == "imgapi" {
                        SetupSource::Imgapi
                    } else {
                        SetupSource::Dir(PathBuf::from(source))
                    };
                    session.setup(&src).await
                }
                GzCommand::Report { .. } | GzCommand::RunJob { .. } => {
                    unreachable!("handled above")
                }
            };
            print_result(printer, &result)
        }
    }
}

fn print_result(printer: &mut Printer, result: &GzResult) -> u8 {
    if printer.json {
        printer.json(result);
    } else {
        for c in &result.components {
            let version = c.version.as_deref().unwrap_or("");
            let image = c
                .image_uuid
                .map(|i| format!(" (image {i})"))
                .unwrap_or_default();
            let secs = c.elapsed_ms as f64 / 1000.0;
            let line = match c.action {
                ComponentAction::Installed => {
                    format!("{}: installed {version}{image} in {secs:.1}s", c.name)
                }
                ComponentAction::Upgraded => format!(
                    "{}: upgraded {}to {version}{image} in {secs:.1}s",
                    c.name,
                    c.from_image
                        .map(|i| format!("from image {i} "))
                        .unwrap_or_default()
                ),
                ComponentAction::Unchanged => {
                    format!("{}: {version}{image} already installed", c.name)
                }
                ComponentAction::Removed => format!(
                    "{}: removed {version}{}",
                    c.name,
                    c.from_image
                        .map(|i| format!(" (image {i})"))
                        .unwrap_or_default()
                ),
                ComponentAction::Absent => format!("{}: not installed, nothing to remove", c.name),
                ComponentAction::RolledBack => {
                    format!("{}: rolled back to {version}{image} in {secs:.1}s", c.name)
                }
            };
            printer.line(&line);
        }
        for w in &result.warnings {
            printer.err(&format!("warning: {w}"));
        }
    }
    match &result.error {
        None => 0,
        Some(f) => {
            if !printer.json {
                let who = f
                    .component
                    .as_deref()
                    .map(|c| format!("{c}: "))
                    .unwrap_or_default();
                // A run that could not identify its server has no UUID
                // to name (the message names the root instead).
                let server = if result.server_uuid.as_uuid().is_nil() {
                    String::new()
                } else {
                    format!(" on server {}", result.server_uuid)
                };
                printer.err(&format!(
                    "agentsadm: error: {who}{} failed{server}: {}",
                    f.step, f.message
                ));
            }
            1
        }
    }
}

fn print_report(printer: &mut Printer, report: &AgentsReport) {
    if printer.json {
        printer.json(report);
        return;
    }
    let rows: Vec<Vec<String>> = report
        .agents
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                a.version.clone(),
                a.image_uuid
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                a.uuid.map(|i| i.to_string()).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let table = crate::output::table(&["NAME", "VERSION", "IMAGE", "INSTANCE"], &rows);
    printer.line(table.trim_end());
    for e in &report.errors {
        printer.err(&format!("warning: {}: {}", e.name, e.message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// The simulator spawns these on a multi-threaded runtime.
    #[test]
    fn entry_points_are_send() {
        let f = run_captured(Vec::new(), BTreeMap::new());
        assert_send(&f);
        let g = crate::gz::install(GzSettings::new("/nonexistent"), &[]);
        assert_send(&g);
    }

    #[tokio::test]
    async fn captured_runs_report_usage_errors() {
        let r = run_captured(vec!["gz".into(), "frobnicate".into()], BTreeMap::new()).await;
        assert_eq!(r.exit_status, 1);
        assert!(r.stderr.contains("frobnicate"), "{}", r.stderr);
        let r = run_captured(vec!["list".into()], BTreeMap::new()).await;
        assert_eq!(r.exit_status, 1);
        assert!(r.stderr.contains("only `agentsadm gz"), "{}", r.stderr);
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("soon").is_err());
    }
}
