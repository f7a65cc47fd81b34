//! `agentsadm demo`: the whole story on an in-process simulated datacenter,
//! told as an operator session. Each act has a short header; each command
//! is shown as `$ agentsadm ...` and runs in this process through the same
//! parsing and dispatch as the binary ([`agentsadm_cli::run_in_process`]), against
//! the simulator's URLs, so its output is exactly what an operator sees
//! (plain progress lines when stderr is not a terminal, bars when it is).
//! Lines starting with `#` are the demo's own narration.
//!
//! The script and the cast are in [`crate::demo`]. The demo exits 0 when
//! every command ended as the story expects (the update's exit status 2
//! included), 1 otherwise.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use agentsadm_cli::CmdResult;

use agentsadm_cli::GlobalOpts;

use crate::demo::ActTime;
use crate::demo::BAD_COMPONENT;
use crate::demo::CHANNEL;
use crate::demo::Cast;
use crate::demo::Census;
use crate::demo::FIXED_VERSION;
use crate::demo::NEWER_COMPONENTS;
use crate::demo::NEWER_VERSION;
use crate::demo::ROLLOUT_MAX_PER_RACK;
use crate::demo::Summary;
use crate::demo::Tally;
use crate::demo::Timings;
use agentsadm_api::Apis;
use agentsadm_cli::Observer;
use agentsadm_orchestrate::gather;
use agentsadm_orchestrate::report::fmt_duration;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of compute nodes besides the headnode (at least 12).
    #[arg(long, default_value_t = 200)]
    pub servers: usize,
    /// Seed of the simulated datacenter (server UUIDs, fault draws).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Leave the simulated datacenter running at the end and print its
    /// URLs, to try commands against it (Ctrl-C stops it).
    #[arg(long)]
    pub keep: bool,
}

/// Acts in the story (for the `[n/11]` headers).
const ACTS: usize = 11;

/// How long a new server may take to be set up before the demo gives up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

struct Story {
    dc: SimDc,
    apis: Apis,
    /// The global options every command gets (the simulator's URLs), not
    /// shown: the operator exported them once.
    hidden: Vec<String>,
    tally: Arc<Tally>,
    acts: Vec<ActTime>,
    current: Option<(usize, String, Instant)>,
    started: Instant,
    commands: usize,
    surprises: Vec<String>,
}

impl Story {
    /// Close the act under way and open the next.
    fn act(&mut self, number: usize, title: &str) {
        self.close_act();
        println!("\n=== [{number}/{ACTS}] {title} ===");
        self.current = Some((number, title.to_string(), Instant::now()));
    }

    fn close_act(&mut self) {
        if let Some((number, title, t)) = self.current.take() {
            self.acts.push(ActTime {
                number,
                title,
                elapsed: t.elapsed(),
            });
        }
    }

    /// Narration: `# ` before every line.
    fn say(&self, text: impl AsRef<str>) {
        for line in text.as_ref().lines() {
            println!("# {line}");
        }
    }

    /// Show and run one command; note it when its exit status is not the
    /// one the story expects. `hidden_args` are appended but not shown:
    /// what the operator exported (the updates server URL).
    async fn run(&mut self, shown: &[&str], hidden_args: &[&str], expect: u8) -> u8 {
        println!("\n$ agentsadm {}", shown.join(" "));
        self.commands += 1;
        let mut args: Vec<String> = vec!["agentsadm".into()];
        args.extend(self.hidden.iter().cloned());
        args.extend(shown.iter().map(|s| s.to_string()));
        args.extend(hidden_args.iter().map(|s| s.to_string()));
        let observer = Observer(self.tally.clone());
        let code =
            agentsadm_cli::run_in_process::<super::DevCommand, _, _>(args, Some(observer)).await;
        let status = (0..=u8::MAX)
            .find(|n| ExitCode::from(*n) == code)
            .unwrap_or(u8::MAX);
        if status != 0 {
            println!("(exit status {status})");
        }
        if status != expect {
            self.surprises.push(format!(
                "`agentsadm {}` exited {status}, the story expects {expect}",
                shown.join(" ")
            ));
        }
        status
    }

    fn server(&self, hostname: &str) -> anyhow::Result<ServerUuid> {
        self.dc
            .server(hostname)
            .map(|s| s.uuid)
            .with_context(|| format!("the simulated datacenter has no server {hostname}"))
    }

    /// How many servers CNAPI's `server.agents` shows running `image` of
    /// `component`, and the image SAPI's service for the component names
    /// as the default for new servers.
    async fn image_census(
        &self,
        component: &str,
        image: ImageUuid,
    ) -> anyhow::Result<(usize, Option<ImageUuid>)> {
        let answers = gather::fetch(&self.apis)
            .await
            .context("cannot read SAPI and CNAPI")?;
        let running = answers
            .servers
            .iter()
            .filter(|s| {
                s.agents
                    .iter()
                    .flatten()
                    .any(|a| a.name == component && a.image_uuid == Some(image))
            })
            .count();
        let default = answers
            .services
            .iter()
            .find(|s| s.name == component)
            .and_then(|s| s.image_uuid());
        Ok((running, default))
    }

    /// The SAPI agent instances of this server: those whose
    /// `params.server_uuid` names it, and the params-less ones its
    /// `server.agents` lists (as the real vm-agent and net-agent
    /// postinstalls leave them).
    async fn instances_of(&self, server: ServerUuid) -> anyhow::Result<BTreeSet<InstanceUuid>> {
        let reported: BTreeSet<InstanceUuid> = match self.apis.cnapi.get_server(server).await {
            Ok(s) => s.agents.iter().flatten().filter_map(|a| a.uuid).collect(),
            Err(e) if e.is_not_found() => BTreeSet::new(),
            Err(e) => return Err(e).context("cannot read the server from CNAPI"),
        };
        let all = self
            .apis
            .sapi
            .list_agent_instances()
            .await
            .context("cannot list SAPI agent instances")?;
        Ok(all
            .iter()
            .filter(|i| match i.server_uuid() {
                Some(s) => s == server,
                None => reported.contains(&i.uuid),
            })
            .map(|i| i.uuid)
            .collect())
    }

    /// The canary wave of the run that finished last, as its plan picked
    /// it (`none` when it had none).
    fn last_canary(&self) -> String {
        self.tally
            .counts()
            .canaries
            .last()
            .map(|c| c.join(", "))
            .unwrap_or_else(|| "none".to_string())
    }

    /// How many of `instances` SAPI still has.
    async fn still_in_sapi(&self, instances: &BTreeSet<InstanceUuid>) -> anyhow::Result<usize> {
        let all = self
            .apis
            .sapi
            .list_agent_instances()
            .await
            .context("cannot list SAPI agent instances")?;
        Ok(all.iter().filter(|i| instances.contains(&i.uuid)).count())
    }
}

pub async fn run(g: &GlobalOpts, a: DemoArgs) -> CmdResult {
    if g.json {
        bail!(
            "the demo prints an operator session and has no --json form; for JSON, run the commands against `agentsadm sim serve`"
        );
    }
    let cast = Cast::new(a.servers)?;
    // Once a command has listened for Ctrl-C, the signal no longer ends the
    // process by itself: stop the story here (dropping the simulator
    // removes its directory).
    let (dc, summary) = tokio::select! {
        told = tell(g, &a, &cast) => told?,
        _ = tokio::signal::ctrl_c() => {
            bail!("interrupted; the simulated datacenter was stopped and removed")
        }
    };
    if a.keep {
        let urls = dc.urls();
        println!(
            "\nThe simulated datacenter keeps running; in another shell:\n\
             export IMGAPI_URL={} SAPI_URL={} CNAPI_URL={} UPDATES_URL={}\n\
             Press Ctrl-C to stop it.",
            urls.imgapi, urls.sapi, urls.cnapi, urls.updates
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    dc.shutdown().await;
    if summary.surprises.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!(
            "the story did not go as designed: {}",
            summary.surprises.join("; ")
        )
    }
}

/// Tell the story; the datacenter (still running) and the summary.
async fn tell(g: &GlobalOpts, a: &DemoArgs, cast: &Cast) -> anyhow::Result<(SimDc, Summary)> {
    let timings = Timings::standard();
    let started = Instant::now();

    // Act 1: the datacenter.
    println!(
        "agentsadm demo: a simulated datacenter with a headnode and {} compute nodes, in this process.",
        cast.servers
    );
    println!(
        "Lines starting with '#' are narration; '$' lines are the real commands, run in process."
    );
    println!("\n=== [1/{ACTS}] Build the datacenter ===");
    let act1 = Instant::now();
    let config = SimConfig::default()
        .servers(cast.servers)
        .rng_seed(a.seed)
        .not_setup(cast.new_servers.iter().cloned())
        .populate(SeedSpec::default());
    let dc = SimDc::start(config)
        .await
        .context("cannot start the simulated datacenter")?;
    // The commands keep their history and run logs under the simulated
    // datacenter's directory (removed with it), never the account's: the
    // history of an earlier demo, whose servers had the same UUIDs, would
    // decide this one's canaries.
    let own_state = dc.state_dir().join("operator-state");
    if !agentsadm_types::log::use_state_dir(own_state.clone()) {
        bail!(
            "this process already keeps its state elsewhere than {}: run the demo in a process of its own",
            own_state.display()
        );
    }
    let urls = dc.urls().clone();
    let hidden = vec![
        "--imgapi-url".to_string(),
        urls.imgapi.clone(),
        "--sapi-url".to_string(),
        urls.sapi.clone(),
        "--cnapi-url".to_string(),
        urls.cnapi.clone(),
    ];
    let mut story = Story {
        apis: dc.apis(),
        dc,
        hidden,
        tally: Arc::new(Tally::default()),
        acts: Vec::new(),
        current: Some((1, "Build the datacenter".to_string(), act1)),
        started,
        commands: 0,
        surprises: Vec::new(),
    };
    for h in cast.manta.iter().chain(&cast.new_servers).chain(&cast.slow) {
        story.server(h)?;
    }
    let seed = story.dc.seed_report();
    story.say(format!(
        "IMGAPI, SAPI and CNAPI (and an updates server) listen on loopback; every server's global zone\n\
         is a directory under {} and every install runs the real GZ installer (hooks, SMF, journal).\n\
         Started in {}: {} images, SAPI application sdc with {} agent services.",
        story.dc.state_dir().display(),
        fmt_duration(act1.elapsed()),
        seed.as_ref().map(|s| s.images.len()).unwrap_or(0),
        seed.as_ref().map(|s| s.services.len()).unwrap_or(0),
    ));
    println!(
        "\n$ export IMGAPI_URL={} SAPI_URL={} CNAPI_URL={} UPDATES_URL={}",
        urls.imgapi, urls.sapi, urls.cnapi, urls.updates
    );
    story.say("Each component's image in the datacenter IMGAPI; 'default' is its SAPI service's params.image_uuid,\nwhat new servers get.");
    story.run(&["avail"], &[], 0).await;

    // Act 2: new servers.
    story.act(2, "Set up servers the new way");
    let seeded = cast.servers - cast.new_servers.len();
    story.say(format!(
        "The headnode and {seeded} compute nodes come from the simulator's seed: each GZ written from a real\n\
         install of its default set. {} are new and not set up yet:",
        cast.new_servers.join(" and ")
    ));
    for h in &cast.new_servers {
        let uuid = story.server(h)?;
        let s = story
            .apis
            .cnapi
            .get_server(uuid)
            .await
            .with_context(|| format!("cannot read {h} ({uuid}) from CNAPI"))?;
        story.say(format!(
            "  CNAPI {h} ({uuid}): setup {}, server.agents lists {} components",
            s.setup,
            s.agents.map(|a| a.len()).unwrap_or(0)
        ));
    }
    let new_list = cast.new_servers.join(",");
    story.say(
        "Setting them up the way an operator does (`sdc-server setup`): CNAPI ServerSetup. The setup job\n\
         runs agentsetup.sh, i.e. `agentsadm gz setup --source imgapi`: each component's SAPI default image,\n\
         adopted into SAPI (params.server_uuid, params.image_uuid) and reported to CNAPI server.agents.",
    );
    for h in &cast.new_servers {
        let uuid = story.server(h)?;
        let t = Instant::now();
        println!("\n$ sdc-server setup {uuid}    # {h}");
        let job = story
            .apis
            .cnapi
            .setup_server(uuid, None)
            .await
            .with_context(|| format!("CNAPI refused to set up {h} ({uuid})"))?;
        let agents = wait_until_set_up(&story.apis, uuid, h).await?;
        story.say(format!(
            "{h}: setup job {} done in {}; server.agents lists {agents} components",
            job.map(|j| j.to_string())
                .unwrap_or_else(|| "(already set up)".into()),
            fmt_duration(t.elapsed())
        ));
    }
    story.run(&["list", "-s", &new_list], &[], 0).await;

    // Act 3: the fleet.
    story.act(3, "The fleet");
    story.say(format!(
        "`agentsadm list` prints one line per server and component ({} servers here); --summary groups\nthem by component and image.",
        cast.servers + 1
    ));
    story.run(&["list", "--summary"], &[], 0).await;

    // Act 4: marlin-agent on Manta storage servers.
    story.act(4, "marlin-agent on the Manta storage servers");
    story.say(
        "marlin-agent is opt-in and never touched by bulk operations: restarting it aborts running Manta jobs.",
    );
    let manta = cast.manta.join(",");
    story
        .run(&["install", "marlin-agent", "-s", &manta, "-y"], &[], 0)
        .await;

    // Act 5: newer builds.
    story.act(5, "New builds arrive");
    let opts = BuildOptions {
        stamp: "20260301T120000Z".to_string(),
        ..BuildOptions::new(NEWER_VERSION)
    };
    let mut bad_image = None;
    for name in NEWER_COMPONENTS {
        let published = story.dc.publish_component(
            name,
            &opts,
            PublishTarget::Updates {
                channels: vec![CHANNEL.to_string()],
            },
        );
        if name == BAD_COMPONENT {
            bad_image = published.map(|m| m.uuid);
        }
    }
    let bad_image =
        bad_image.with_context(|| format!("the simulator could not build {BAD_COMPONENT}"))?;
    // The bug nobody has seen yet: the new build's service fails on start,
    // on every server.
    story
        .dc
        .faults()
        .unhealthy_build(BAD_COMPONENT, bad_image, &[]);
    story.say(format!(
        "The build published {NEWER_VERSION} of {} on the updates server, channel {CHANNEL}.\n\
         Nobody knows yet that {BAD_COMPONENT} {NEWER_VERSION} has a bug: its SMF service fails on start and goes\n\
         to maintenance (the simulator's fault, on every server).",
        NEWER_COMPONENTS.join(", ")
    ));
    let updates_url = urls.updates.clone();
    let mut avail: Vec<&str> = vec!["avail", "-C", CHANNEL];
    avail.extend(NEWER_COMPONENTS);
    story.run(&avail, &["--updates-url", &updates_url], 0).await;

    // Act 6: faults.
    story.act(6, "Faults for realism");
    let faults = story.dc.faults();
    faults.set_install_latency(timings.install_latency);
    for h in &cast.slow {
        faults.set_slow(story.server(h)?, timings.slow_factor);
    }
    faults.fail_installs_on(story.server(&cast.failing)?);
    story.say(format!(
        "Simulator settings, not commands:\n\
         - every install takes {} to {} ms (download, unpack, restart);\n\
         - {} are {}x slower (a busy disk);\n\
         - every install on {} fails (a full /opt).\n\
         Outliers are servers running past max(factor x median, median + margin); the defaults (3 and 30s)\n\
         suit real rollouts, far longer than this one, so the updates run with --outlier-factor {} --outlier-margin {}.",
        timings.install_latency.base_ms,
        timings.install_latency.base_ms + timings.install_latency.jitter_ms,
        cast.slow.join(", "),
        timings.slow_factor,
        cast.failing,
        timings.factor_arg(),
        timings.margin_arg()
    ));

    // Act 7: the bad build meets its canary.
    story.act(7, "A bad build meets its canary");
    let hidden_updates = ["--updates-url", updates_url.as_str()];
    let margin = timings.margin_arg();
    let factor = timings.factor_arg();
    let canary_arg = "1".to_string();
    story.say(format!(
        "{BAD_COMPONENT} {NEWER_VERSION} first, with one canary: the server the plan picks (the quickest by this\n\
         datacenter's history of completed installs, else the first by hostname) is updated alone and must pass its\n\
         health gate (after cn-agent's install-agent task, `agentsadm gz health {BAD_COMPONENT}` on the server, through\n\
         CNAPI execute) before any other server is touched."
    ));
    story
        .run(
            &[
                "update",
                BAD_COMPONENT,
                "--latest",
                "-C",
                CHANNEL,
                "-y",
                "--canary",
                &canary_arg,
                "--outlier-factor",
                &factor,
                "--outlier-margin",
                &margin,
            ],
            &hidden_updates,
            2,
        )
        .await;
    let (bad_running, bad_default) = story.image_census(BAD_COMPONENT, bad_image).await?;
    let bad_canary = story.last_canary();
    story.say(format!(
        "Caught at the canary: {} went to maintenance on {}, which was put back on its previous image (and its\n\
         SAPI instance with it); the rollout halted. Servers CNAPI shows running {BAD_COMPONENT} {NEWER_VERSION}: {bad_running}.\n\
         SAPI's {BAD_COMPONENT} default for new servers: {}.",
        BAD_COMPONENT,
        bad_canary,
        match bad_default {
            Some(u) if u == bad_image => format!("{NEWER_VERSION} ({u})"),
            Some(u) => format!(
                "the previous image ({}), put back by the halted rollout",
                &u.to_string()[..8]
            ),
            None => "unset".to_string(),
        }
    ));
    if bad_running != 0 || bad_default == Some(bad_image) {
        story.surprises.push(format!(
            "after the canary failed, {bad_running} servers run the bad {BAD_COMPONENT} build and SAPI's default is {bad_default:?}"
        ));
    }

    // Act 8: the fixed build rolls out.
    story.act(8, "Roll out the fixed build");
    let fixed = BuildOptions {
        stamp: "20260302T090000Z".to_string(),
        ..BuildOptions::new(FIXED_VERSION)
    };
    story.dc.publish_component(
        BAD_COMPONENT,
        &fixed,
        PublishTarget::Updates {
            channels: vec![CHANNEL.to_string()],
        },
    );
    story.say(format!(
        "The {BAD_COMPONENT} team fixed the bug and published {FIXED_VERSION}. Now every component, the whole fleet:\n\
         one canary first, at most {ROLLOUT_MAX_PER_RACK} servers of a rack (CNAPI rack_identifier) in flight at once, and\n\
         the default failure budget (5% of the servers): past it, no new server would start."
    ));
    story
        .run(
            &["plan", "update", "--all", "--latest", "-C", CHANNEL],
            &hidden_updates,
            0,
        )
        .await;
    let per_rack = ROLLOUT_MAX_PER_RACK.to_string();
    let before = story.tally.counts();
    let status = story
        .run(
            &[
                "update",
                "--all",
                "--latest",
                "-C",
                CHANNEL,
                "-y",
                "--canary",
                &canary_arg,
                "--max-per-rack",
                &per_rack,
                "--outlier-factor",
                &factor,
                "--outlier-margin",
                &margin,
            ],
            &hidden_updates,
            2,
        )
        .await;
    let after = story.tally.counts();
    let flagged: Vec<&String> = after.outliers[before.outliers.len()..].iter().collect();
    story.say(format!(
        "Exit status {status}: the canary ({}) passed and the rollout finished, but {} failed (the report above\n\
         names the server, the component, the step and the remote error): one failure, within the budget, so no\n\
         server was held back; every other server converged. Outliers flagged: {}.\n\
         marlin-agent was skipped by --all; it is updated only where named:",
        story.last_canary(),
        cast.failing,
        if flagged.is_empty() {
            "none".to_string()
        } else {
            flagged
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    story
        .run(
            &[
                "update",
                "marlin-agent",
                "--latest",
                "-C",
                CHANNEL,
                "-s",
                &manta,
                "-y",
            ],
            &hidden_updates,
            0,
        )
        .await;

    // Act 9: drift.
    story.act(9, "Check, fix, check");
    story.run(&["check"], &[], 2).await;
    story.say(format!(
        "{} gets its disk space back: the simulator stops failing its installs (and the slow servers recover).",
        cast.failing
    ));
    story.dc.faults().clear();
    story.run(&["check", "--fix", "-y"], &[], 0).await;
    story.run(&["check"], &[], 0).await;

    // Act 10: server delete.
    story.act(10, "Delete a server, with cleanup");
    let victim = story.server(&cast.deleted)?;
    let before = story.instances_of(victim).await?;
    story.say(format!(
        "{} ({victim}) is being decommissioned. Its SAPI agent instances (params.server_uuid, or listed in server.agents): {}.",
        cast.deleted,
        before.len()
    ));
    story
        .run(&["server", "delete", &cast.deleted, "-y"], &[], 0)
        .await;
    let left = story.still_in_sapi(&before).await?;
    let cnapi = match story.apis.cnapi.get_server(victim).await {
        Ok(_) => "still lists it".to_string(),
        Err(e) if e.is_not_found() => "answers 404 for it".to_string(),
        Err(e) => format!("cannot be asked ({e})"),
    };
    story.say(format!(
        "SAPI agent instances of {} now: {left}; CNAPI GET /servers/{victim} {cnapi}.",
        cast.deleted
    ));
    if left != 0 || !cnapi.contains("404") {
        story.surprises.push(format!(
            "after the delete of {}: {left} SAPI instances left, CNAPI {cnapi}",
            cast.deleted
        ));
    }

    // Act 11: summary.
    story.act(11, "Summary");
    let catalog = g.load_catalog()?;
    let answers = gather::fetch(&story.apis)
        .await
        .context("cannot read SAPI and CNAPI for the summary")?;
    let census = Census::take(
        &catalog,
        &answers.servers,
        &answers.services,
        &answers.instances,
    );
    if !census.is_exact() {
        story.surprises.push(format!(
            "SAPI has {} agent instances, {} expected",
            census.instances, census.expected
        ));
    }
    story.close_act();
    let summary = Summary {
        acts: story.acts.clone(),
        total: story.started.elapsed(),
        servers_started: cast.servers + 1,
        commands: story.commands,
        tally: story.tally.counts(),
        census,
        surprises: story.surprises.clone(),
    };
    println!("{}", summary.render().trim_end());
    Ok((story.dc, summary))
}
/// Wait for CNAPI to show the server set up (its setup job done); the
/// number of components `server.agents` then lists.
async fn wait_until_set_up(apis: &Apis, uuid: ServerUuid, hostname: &str) -> anyhow::Result<usize> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let s = apis
            .cnapi
            .get_server(uuid)
            .await
            .with_context(|| format!("cannot read {hostname} ({uuid}) from CNAPI"))?;
        if s.setup && s.setting_up != Some(true) {
            return Ok(s.agents.map(|a| a.len()).unwrap_or(0));
        }
        if Instant::now() > deadline {
            bail!(
                "{hostname} ({uuid}) is still not set up after {}; its setup job may have failed (see the log with -v)",
                fmt_duration(SETUP_TIMEOUT)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
