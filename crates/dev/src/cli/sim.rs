//! `agentsadm sim ...`: run the simulated datacenter (`serve`) and publish
//! component images into any IMGAPI (`publish`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use agentsadm_cli::CmdResult;

use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_cli::GlobalOpts;
use agentsadm_sim::BurstSpec;
use agentsadm_sim::Distribution;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::GzLayout;
use agentsadm_sim::MemoryUsage;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimApi;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::image_spec;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::publish_via_client;
use agentsadm_sim::sim_api_config;
use agentsadm_types::image::Compression;

#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Serve IMGAPI, SAPI, CNAPI and an updates server on loopback.
    Serve(Box<ServeArgs>),
    /// Build component images and publish them to an IMGAPI.
    Publish(PublishArgs),
}

/// `sim serve` options. Flags override the scenario file's values.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Compute nodes besides the headnode.
    #[arg(long)]
    pub servers: Option<usize>,
    /// Base port: IMGAPI on P, SAPI P+1, CNAPI P+2, updates P+3 (0: the
    /// kernel picks P; default: an ephemeral port for each).
    #[arg(long, value_name = "P")]
    pub port: Option<u16>,
    /// Keep state here across restarts (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Scenario JSON file (servers, population, faults...).
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Seed for UUIDs, hostnames and fault draws.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Start with empty APIs and no server set up.
    #[arg(long)]
    pub empty: bool,
    /// Servers (hostnames or UUIDs, comma-separated) that are not set up.
    #[arg(long, value_delimiter = ',', value_name = "SERVERS")]
    pub not_setup: Vec<String>,
    /// Servers whose CNAPI status is `unknown`.
    #[arg(long, value_delimiter = ',', value_name = "SERVERS")]
    pub not_running: Vec<String>,
    /// Give a server VMs: SERVER=N (repeatable).
    #[arg(long, value_name = "SERVER=N")]
    pub with_vms: Vec<String>,
    /// Injected install latency (base), milliseconds.
    #[arg(long, value_name = "MS")]
    pub install_latency: Option<u64>,
    /// Install latency jitter, milliseconds.
    #[arg(long, value_name = "MS")]
    pub latency_jitter: Option<u64>,
    /// fixed, uniform, normal, exponential or lognormal.
    #[arg(long, value_name = "D")]
    pub latency_distribution: Option<String>,
    /// Slow servers (hostnames or UUIDs).
    #[arg(long, value_delimiter = ',', value_name = "SERVERS")]
    pub slow: Vec<String>,
    /// Also make this many random compute nodes slow.
    #[arg(long, value_name = "N")]
    pub slow_count: Option<usize>,
    /// How many times slower a slow server is.
    #[arg(long, value_name = "F")]
    pub slow_factor: Option<f64>,
    /// Probability that an install fails.
    #[arg(long, value_name = "RATE")]
    pub fail_rate: Option<f64>,
    /// Servers where every install fails.
    #[arg(long, value_delimiter = ',', value_name = "SERVERS")]
    pub fail_servers: Vec<String>,
    /// Limit injected failures to these components.
    #[arg(long, value_delimiter = ',', value_name = "COMPONENTS")]
    pub fail_components: Vec<String>,
    /// Servers whose tasks never finish.
    #[arg(long, value_delimiter = ',', value_name = "SERVERS")]
    pub hung_servers: Vec<String>,
    /// Probability that a task never finishes.
    #[arg(long, value_name = "RATE")]
    pub hung_rate: Option<f64>,
    /// Serve these images (UUIDs or component names) with a flipped byte.
    #[arg(long, value_delimiter = ',', value_name = "IMAGES")]
    pub corrupt_image: Vec<String>,
    /// Stop downloads of these images (UUIDs or names) halfway.
    #[arg(long, value_delimiter = ',', value_name = "IMAGES")]
    pub truncate_image: Vec<String>,
    /// The next COUNT requests to API get STATUS: API=COUNT[:STATUS]
    /// (API: imgapi, updates, sapi, cnapi; STATUS 500 or 503).
    #[arg(long, value_name = "API=COUNT[:STATUS]")]
    pub api_burst: Vec<String>,
    /// Added latency per request: API=MS.
    #[arg(long, value_name = "API=MS")]
    pub request_latency: Vec<String>,
    /// Delay before server.agents shows a new cn-agent, milliseconds.
    #[arg(long, value_name = "MS")]
    pub cn_agent_restart_ms: Option<u64>,
    /// How CNAPI runs execute: cn-agent (FEATURE_USE_CNAGENT_COMMAND_EXECUTE
    /// on, written into SAPI's cnapi service; timeout honoured) or ur (the
    /// default: a timeout crashes CNAPI, as the real one).
    #[arg(long, value_name = "T")]
    pub execute_transport: Option<String>,
    /// Scale of SAPI's modelled time per list and write (1: the real
    /// SAPI's, the default; 0: off).
    #[arg(long, value_name = "SCALE")]
    pub sapi_timing: Option<f64>,
    /// How long CNAPI stays down after it crashes, milliseconds.
    #[arg(long, value_name = "MS")]
    pub cnapi_restart_ms: Option<u64>,
    /// Each server's GZ: `rooted` (a full GZ tree, hooks run; the default)
    /// or `mockcloud` (three files per component; for thousands of servers).
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub gz_layout: Option<GzLayoutArg>,
}

/// `--gz-layout`: the command line's spelling of [`GzLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GzLayoutArg {
    /// A full rooted GZ per server: hooks run, SMF state kept.
    Rooted,
    /// The installer's mockcloud layout: three files per component.
    Mockcloud,
}

impl From<GzLayoutArg> for GzLayout {
    fn from(a: GzLayoutArg) -> GzLayout {
        match a {
            GzLayoutArg::Rooted => GzLayout::Rooted,
            GzLayoutArg::Mockcloud => GzLayout::Mockcloud,
        }
    }
}

/// `sim publish` options.
#[derive(Args, Debug)]
pub struct PublishArgs {
    /// Components to publish (default with --all: every catalog component).
    pub components: Vec<String>,
    /// Publish every catalog component.
    #[arg(long)]
    pub all: bool,
    /// Semver of the images (`<semver>-<branch>-<stamp>-g<sha>` is built;
    /// a cn-agent 1.x moves onto cn-agent's 2.x line: 1.0.0 is 2.9.0).
    #[arg(long = "version", value_name = "SEMVER")]
    pub semver: String,
    #[arg(long, default_value = "master")]
    pub branch: String,
    /// Build stamp, YYYYMMDDTHHMMSSZ (default: now).
    #[arg(long)]
    pub stamp: Option<String>,
    /// Filler bytes in each image.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    pub size: usize,
    /// gzip, bzip2 or none (default: the kind's usual: gzip'd tarballs, shars for
    /// dockerlogger and sdcadm; gzip or bzip2 make those kinds tarballs too).
    #[arg(long)]
    pub compression: Option<String>,
    /// Lifecycle scripts: NAME=BASH (preinstall, postinstall, preuninstall,
    /// postuninstall); repeatable. Replaces the default hooks.
    #[arg(long, value_name = "NAME=SCRIPT")]
    pub hook: Vec<String>,
    /// Images without lifecycle scripts.
    #[arg(long)]
    pub no_hooks: bool,
    /// The IMGAPI to publish to (default: --imgapi-url / IMGAPI_URL).
    #[arg(long, value_name = "URL")]
    pub to: Option<String>,
    /// Channel on an updates server.
    #[arg(long)]
    pub channel: Option<String>,
}

pub async fn run(global: &GlobalOpts, args: SimArgs) -> CmdResult {
    match args.command {
        SimCommand::Serve(a) => serve(global, *a).await,
        SimCommand::Publish(a) => publish(global, a).await,
    }
}

fn parse_kv(s: &str, what: &str) -> anyhow::Result<(String, String)> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .with_context(|| format!("{what} {s:?} is not of the form KEY=VALUE"))
}

/// The simulator configuration from a scenario file and flags.
pub fn serve_config(a: &ServeArgs) -> anyhow::Result<SimConfig> {
    let mut c = match &a.scenario {
        Some(p) => SimConfig::from_scenario_file(p)?,
        None => SimConfig {
            servers: 10,
            populate: Some(SeedSpec::with_newer()),
            ..SimConfig::default()
        },
    };
    if let Some(n) = a.servers {
        c.servers = n;
    }
    if let Some(p) = a.port {
        c.port = Some(p);
    }
    if let Some(d) = &a.state {
        // Absolute, like `gz --root`: the simulated servers' rooted GZs run
        // hooks with other working directories.
        c.state_dir = Some(std::path::absolute(d).unwrap_or_else(|_| d.clone()));
    }
    if let Some(s) = a.seed {
        c.rng_seed = s;
    }
    if a.empty {
        c.populate = None;
    }
    c.not_setup.extend(a.not_setup.iter().cloned());
    c.faults.not_running.extend(a.not_running.iter().cloned());
    for v in &a.with_vms {
        let (server, n) = parse_kv(v, "--with-vms")?;
        let n: usize = n
            .parse()
            .with_context(|| format!("--with-vms {v:?}: {n:?} is not a number"))?;
        c.with_vms.insert(server, n);
    }
    let f = &mut c.faults;
    if let Some(ms) = a.install_latency {
        f.install_latency.base_ms = ms;
    }
    if let Some(ms) = a.latency_jitter {
        f.install_latency.jitter_ms = ms;
        if f.install_latency.distribution == Distribution::Fixed {
            f.install_latency.distribution = Distribution::Uniform;
        }
    }
    if let Some(d) = &a.latency_distribution {
        f.install_latency.distribution = serde_json::from_value(serde_json::json!(d))
            .with_context(|| {
                format!(
                    "--latency-distribution {d:?}: use fixed, uniform, normal, exponential or lognormal"
                )
            })?;
    }
    f.slow_servers.servers.extend(a.slow.iter().cloned());
    if let Some(n) = a.slow_count {
        f.slow_servers.count = n;
    }
    if let Some(x) = a.slow_factor {
        f.slow_servers.factor = x;
    } else if f.slow_servers.factor == 0.0 {
        f.slow_servers.factor = 10.0;
    }
    if let Some(r) = a.fail_rate {
        f.failing_installs.rate = r;
    }
    f.failing_installs
        .servers
        .extend(a.fail_servers.iter().cloned());
    f.failing_installs
        .components
        .extend(a.fail_components.iter().cloned());
    f.hung_tasks.servers.extend(a.hung_servers.iter().cloned());
    if let Some(r) = a.hung_rate {
        f.hung_tasks.rate = r;
    }
    f.corrupt_images.extend(a.corrupt_image.iter().cloned());
    f.truncated_images.extend(a.truncate_image.iter().cloned());
    for b in &a.api_burst {
        let (api, spec) = parse_kv(b, "--api-burst")?;
        let (count, status) = match spec.split_once(':') {
            Some((c, s)) => (c.to_string(), s.to_string()),
            None => (spec.clone(), "503".to_string()),
        };
        let burst = BurstSpec {
            count: count
                .parse()
                .with_context(|| format!("--api-burst {b:?}: bad count"))?,
            status: status
                .parse()
                .with_context(|| format!("--api-burst {b:?}: bad status"))?,
        };
        check_api(&api)?;
        f.api_bursts.insert(api, burst);
    }
    for l in &a.request_latency {
        let (api, ms) = parse_kv(l, "--request-latency")?;
        check_api(&api)?;
        let ms: u64 = ms
            .parse()
            .with_context(|| format!("--request-latency {l:?}: bad milliseconds"))?;
        f.request_latency_ms.insert(api, ms);
    }
    if let Some(l) = a.gz_layout {
        c.gz_layout = l.into();
    }
    if let Some(ms) = a.cn_agent_restart_ms {
        c.cn_agent_restart_ms = ms;
    }
    if let Some(t) = &a.execute_transport {
        c.execute_transport = match t.as_str() {
            "cn-agent" => ExecuteTransport::CnAgent,
            "ur" => ExecuteTransport::Ur,
            other => anyhow::bail!("--execute-transport {other:?}: use cn-agent or ur"),
        };
    }
    if let Some(scale) = a.sapi_timing {
        if !(scale.is_finite() && scale >= 0.0) {
            anyhow::bail!("--sapi-timing {scale}: use a scale of 0 or more (1: the real SAPI's)");
        }
        c.sapi_timing = agentsadm_sim::SapiTiming { scale };
    }
    if let Some(ms) = a.cnapi_restart_ms {
        c.cnapi_restart_ms = ms;
    }
    Ok(c)
}

fn check_api(api: &str) -> anyhow::Result<()> {
    if SimApi::from_key(api).is_none() {
        anyhow::bail!("unknown API {api:?}: use imgapi, updates, sapi or cnapi");
    }
    Ok(())
}

async fn serve(_global: &GlobalOpts, a: ServeArgs) -> CmdResult {
    let config = serve_config(&a)?;
    let dc = SimDc::start(config)
        .await
        .context("cannot start the simulated datacenter")?;
    let urls = dc.urls().clone();
    let mem = MemoryUsage::now();
    // One JSON line on stdout, for scripts: `eval` nothing, parse this.
    let line = serde_json::json!({
        "imgapi": urls.imgapi,
        "sapi": urls.sapi,
        "cnapi": urls.cnapi,
        "updates": urls.updates,
        "servers": dc.servers().len(),
        "state_dir": dc.state_dir(),
        "rss_mb": mem.rss_kb / 1024,
    });
    // Listen for SIGTERM before announcing the URLs: a script that reads
    // the line and stops us at once must get a clean shutdown (and a saved
    // state), not the default action of the signal.
    let stop = stop_signal();
    println!("{line}");
    eprintln!(
        "simulated datacenter with {} servers is up; to use it:\n  export IMGAPI_URL={} SAPI_URL={} CNAPI_URL={} UPDATES_URL={}\n(UPDATES_URL is the simulated updates server; Ctrl-C to stop)",
        dc.servers().len(),
        urls.imgapi,
        urls.sapi,
        urls.cnapi,
        urls.updates
    );
    stop.await;
    eprintln!("stopping the simulated datacenter");
    let persistent = a.state.is_some();
    if persistent {
        dc.save().context("cannot save the simulator state")?;
    }
    tokio::time::timeout(Duration::from_secs(5), dc.shutdown())
        .await
        .ok();
    Ok(ExitCode::SUCCESS)
}

/// A future that resolves on Ctrl-C or SIGTERM. On Unix the handlers are
/// installed when this is called, not when the future is first polled.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let streams = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::terminate())
            .and_then(|t| signal(SignalKind::interrupt()).map(|i| (t, i)))
            .ok()
    };
    async move {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn hooks_from(a: &PublishArgs) -> anyhow::Result<Option<Hooks>> {
    if a.no_hooks {
        return Ok(Some(Hooks::default()));
    }
    if a.hook.is_empty() {
        return Ok(None);
    }
    let mut h = Hooks::default();
    for spec in &a.hook {
        let (name, body) = parse_kv(spec, "--hook")?;
        let slot = match name.as_str() {
            "preinstall" => &mut h.preinstall,
            "postinstall" => &mut h.postinstall,
            "preuninstall" => &mut h.preuninstall,
            "postuninstall" => &mut h.postuninstall,
            other => anyhow::bail!(
                "--hook {other:?}: use preinstall, postinstall, preuninstall or postuninstall"
            ),
        };
        *slot = Some(body);
    }
    Ok(Some(h))
}

async fn publish(global: &GlobalOpts, a: PublishArgs) -> CmdResult {
    let catalog = global.load_catalog()?;
    let url =
        a.to.clone().or_else(|| global.imgapi_url.clone()).context(
            "no IMGAPI to publish to: pass --to URL or --imgapi-url (or set IMGAPI_URL)",
        )?;
    if a.components.is_empty() && !a.all {
        anyhow::bail!("name the components to publish, or pass --all");
    }
    let components: Vec<&agentsadm_types::catalog::Component> = if a.all {
        catalog.iter().collect()
    } else {
        a.components
            .iter()
            .map(|n| catalog.require(n))
            .collect::<Result<_, _>>()?
    };
    if agentsadm_types::image::parse_agent_version(&a.semver).is_none() {
        anyhow::bail!("--version {:?} is not a semver (e.g. 1.2.3)", a.semver);
    }
    let compression = match a.compression.as_deref() {
        None => None,
        Some("gzip") => Some(Compression::Gzip),
        Some("bzip2") => Some(Compression::Bzip2),
        Some("none") => Some(Compression::None),
        Some(other) => anyhow::bail!("--compression {other:?}: use gzip, bzip2 or none"),
    };
    let stamp = a.stamp.clone().unwrap_or_else(|| {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        // 2026-11-22T11:48:42Z -> 20261122T114842Z
        now.replace(['-', ':'], "")
    });
    let mut opts = agentsadm_sim::BuildOptions::new(&a.semver);
    opts.branch = a.branch.clone();
    opts.stamp = stamp;
    opts.payload_bytes = a.size;
    opts.hooks = hooks_from(&a)?;
    opts.compression = compression;
    let client = ImgapiClient::new(&url, sim_api_config()).context("invalid IMGAPI URL")?;
    let out = global.output();
    let mut published = Vec::new();
    for c in components {
        let img = build(&image_spec(c, &opts));
        let m = publish_via_client(&client, &img, a.channel.as_deref())
            .await
            .with_context(|| format!("cannot publish {} to {url}", c.name))?;
        out.line(format!("{}  {}  {}", m.uuid, m.name, m.version));
        published.push(serde_json::json!({"uuid": m.uuid, "name": m.name, "version": m.version}));
    }
    if global.json {
        out.json(&published);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn config(args: &[&str]) -> anyhow::Result<SimConfig> {
        let w = Wrap::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))?;
        serve_config(&w.serve)
    }

    #[test]
    fn flags_become_a_config() {
        let c = config(&[
            "--servers",
            "7",
            "--seed",
            "3",
            "--not-setup",
            "cn0007,cn0006",
            "--with-vms",
            "cn0001=2",
            "--install-latency",
            "50",
            "--latency-jitter",
            "10",
            "--slow",
            "cn0002",
            "--fail-rate",
            "0.1",
            "--api-burst",
            "cnapi=3:500",
            "--request-latency",
            "sapi=5",
            "--execute-transport",
            "ur",
            "--gz-layout",
            "mockcloud",
            "--sapi-timing",
            "0.5",
            "--cnapi-restart-ms",
            "100",
        ])
        .unwrap();
        assert_eq!(c.gz_layout, GzLayout::Mockcloud);
        assert_eq!(c.sapi_timing.scale, 0.5);
        assert_eq!(c.cnapi_restart_ms, 100);
        assert_eq!(SimConfig::default().sapi_timing.scale, 1.0);
        assert_eq!((c.servers, c.rng_seed), (7, 3));
        assert_eq!(c.not_setup, ["cn0007", "cn0006"]);
        assert_eq!(c.with_vms["cn0001"], 2);
        assert_eq!(c.faults.install_latency.base_ms, 50);
        assert_eq!(c.faults.install_latency.distribution, Distribution::Uniform);
        assert_eq!(c.faults.slow_servers.factor, 10.0);
        assert_eq!(c.faults.api_bursts["cnapi"].status, 500);
        assert_eq!(c.faults.request_latency_ms["sapi"], 5);
        assert_eq!(c.execute_transport, ExecuteTransport::Ur);
        assert!(c.populate.as_ref().unwrap().dc_newer.is_some());
        assert!(config(&["--empty"]).unwrap().populate.is_none());
    }

    #[test]
    fn bad_flags_are_refused_with_the_flag_named() {
        for (args, needle) in [
            (vec!["--with-vms", "cn0001"], "--with-vms"),
            (vec!["--api-burst", "cnapi=x"], "--api-burst"),
            (vec!["--request-latency", "nope=1"], "unknown API"),
            (
                vec!["--latency-distribution", "zipf"],
                "--latency-distribution",
            ),
            (vec!["--execute-transport", "ssh"], "--execute-transport"),
            (vec!["--sapi-timing=-1"], "--sapi-timing"),
            (vec!["--sapi-timing", "NaN"], "--sapi-timing"),
        ] {
            let err = config(&args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
