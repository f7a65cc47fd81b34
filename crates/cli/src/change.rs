//! What `plan`, `update`, `install` and `remove` share: their arguments,
//! normalised into a [`Change`], and the one run of a change (plan, show
//! the plan, confirm, then execute under the datacenter lock). The
//! commands themselves are in `commands/`.

use agentsadm_types::component::ComponentName;
use anyhow::bail;
use clap::{ArgAction, Args};
use serde_json::json;

use std::process::ExitCode;

use crate::CmdResult;
use crate::args::{ChannelArgs, ExecArgs, ServersArg};
use crate::execution::{CliOperator, Execution, ended, executed, interrupted, recorded, run_error};
use crate::settings::Settings;
use crate::updates::{Want, latest_target_line, updates_client};
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::run::{Run, RunOutcome, RunSettings, Shown};
use agentsadm_orchestrate::session::{RequestPlanner, Session};
use agentsadm_plan::ComponentSelection;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::ServerSelection;
use agentsadm_plan::timing::Durations;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::output::Output;

/// Servers shown one by one in a plan up to this many; beyond, servers with
/// the same changes are grouped (`-v` lists them all).
pub const DEFAULT_MAX_SERVERS: usize = 50;

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Components to update.
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    /// Every bulk-updatable managed component (never marlin-agent).
    #[arg(short = 'a', long, conflicts_with = "components")]
    pub all: bool,
    /// Update to this image (one component only): a UUID, its first 8
    /// characters, or a version; `COMPONENT@IMAGE` says the same.
    #[arg(long, value_name = "IMAGE", conflicts_with = "latest")]
    pub image: Option<String>,
    /// Update to the newest image: --latest takes the newest image in the
    /// update channel of the updates server (the channel: -C, else SAPI's
    /// update_channel, else the server's default; the server:
    /// --updates-url, else UPDATES_URL, else updatesServerUrl in the
    /// headnode's sdcadm configuration), and imports it into the
    /// datacenter IMGAPI; --latest --source dc takes the newest image
    /// already in the datacenter IMGAPI (air-gapped datacenters: nothing
    /// outside the datacenter is contacted).
    #[arg(long)]
    pub latest: bool,
    #[command(flatten)]
    pub source: ChannelArgs,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Servers to leave alone (UUIDs or hostnames).
    #[arg(short = 'x', long, value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append)]
    pub exclude: Vec<String>,
    /// Only import the images the plan needs into the datacenter IMGAPI,
    /// ahead of a maintenance window (sdcadm's --just-images): no server
    /// and no SAPI record is changed.
    #[arg(long)]
    pub just_import: bool,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The component to install.
    #[arg(value_name = "COMPONENT")]
    pub component: String,
    /// The image (default: the SAPI service's params.image_uuid): a UUID,
    /// its first 8 characters, or a version; `COMPONENT@IMAGE` says the same.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    #[command(flatten)]
    pub source: ChannelArgs,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Every set-up server that lacks the component.
    #[arg(long, conflicts_with = "servers")]
    pub all_servers: bool,
    /// Servers to leave alone (UUIDs or hostnames).
    #[arg(short = 'x', long, value_name = "SERVERS", value_delimiter = ',', action = ArgAction::Append)]
    pub exclude: Vec<String>,
    /// Only import the images the plan needs into the datacenter IMGAPI,
    /// ahead of a maintenance window (sdcadm's --just-images): no server
    /// and no SAPI record is changed.
    #[arg(long)]
    pub just_import: bool,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The component to remove.
    #[arg(value_name = "COMPONENT")]
    pub component: String,
    #[command(flatten)]
    pub servers: ServersArg,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// A changing command, normalised.
#[derive(Debug)]
pub(crate) struct Change {
    request: Request,
    choice: ImageChoice,
    /// `COMPONENT@IMAGE` or `--image` short of a full UUID: looked up
    /// before planning, then the choice is that image.
    image_spec: Option<(String, String)>,
    source: ChannelArgs,
    settings: RunSettings,
    /// Where the target comes from, printed first (`--latest`).
    target_line: Option<String>,
    /// `--just-import`: the plan's imports only.
    just_import: bool,
}

/// `vm-agent@1.1.0` as (`vm-agent`, `1.1.0`).
fn split_target(arg: &str) -> (String, Option<String>) {
    match arg.split_once('@') {
        Some((c, i)) => (c.to_string(), Some(i.to_string())),
        None => (arg.to_string(), None),
    }
}

/// The image asked for by `--image` or `COMPONENT@IMAGE` (not both):
/// a full UUID as is, anything else to look up.
fn image_target(
    component: &str,
    flag: Option<String>,
    at: Option<String>,
) -> anyhow::Result<(ImageChoice, Option<(String, String)>)> {
    let spec = match (flag, at) {
        (Some(_), Some(_)) => bail!("give the image once: COMPONENT@IMAGE or --image, not both"),
        (Some(s), None) | (None, Some(s)) => s,
        (None, None) => return Ok((ImageChoice::Intent, None)),
    };
    if spec.trim().is_empty() {
        bail!(
            "{component}@ needs an image: a version (1.1.0), an image UUID or its first 8 characters"
        );
    }
    Ok(match spec.trim().parse::<ImageUuid>() {
        Ok(u) => (ImageChoice::Image(u), None),
        Err(_) => (ImageChoice::Intent, Some((component.to_string(), spec))),
    })
}

impl UpdateArgs {
    pub(crate) fn change(mut self, catalog: &Catalog, here: &Settings) -> anyhow::Result<Change> {
        if !self.all && self.components.is_empty() {
            bail!("name the components to update, or pass --all");
        }
        let mut at = None;
        for c in &mut self.components {
            let (name, image) = split_target(c);
            if image.is_some() {
                if at.is_some() {
                    bail!("name one image per update (COMPONENT@IMAGE once)");
                }
                at = image;
            }
            *c = name;
        }
        let names = component_names(catalog, &self.components)?;
        if (self.image.is_some() || at.is_some()) && (self.all || self.components.len() != 1) {
            bail!("--image needs exactly one component (run one update per image)");
        }
        if at.is_some() && self.latest {
            bail!("COMPONENT@IMAGE and --latest ask for different images; give one");
        }
        let (choice, image_spec) = match self.components.first() {
            Some(c) => image_target(c, self.image.take(), at)?,
            None => (ImageChoice::Intent, None),
        };
        Ok(Change {
            request: Request {
                operation: Operation::Update,
                components: if self.all {
                    ComponentSelection::All
                } else {
                    ComponentSelection::Named(names)
                },
                servers: servers_selection(self.servers.servers),
                exclude: self.exclude,
            },
            choice: match (choice, self.latest) {
                (ImageChoice::Intent, true) => ImageChoice::Latest,
                (c, _) => c,
            },
            image_spec,
            source: self.source,
            just_import: self.just_import,
            settings: self.exec.settings(here),
            target_line: None,
        })
    }
}

impl InstallArgs {
    pub(crate) fn change(mut self, catalog: &Catalog, here: &Settings) -> anyhow::Result<Change> {
        let (name, at) = split_target(&self.component);
        self.component = name;
        let names = component_names(catalog, std::slice::from_ref(&self.component))?;
        let (choice, image_spec) = image_target(&self.component, self.image.take(), at)?;
        if self.servers.servers.is_empty() && !self.all_servers {
            bail!("name the servers with -s SERVERS, or pass --all-servers");
        }
        Ok(Change {
            request: Request {
                operation: Operation::Install,
                components: ComponentSelection::Named(names),
                servers: servers_selection(self.servers.servers),
                exclude: self.exclude,
            },
            choice,
            image_spec,
            source: self.source,
            just_import: self.just_import,
            settings: self.exec.settings(here),
            target_line: None,
        })
    }
}

impl RemoveArgs {
    pub(crate) fn change(self, catalog: &Catalog, here: &Settings) -> anyhow::Result<Change> {
        let names = component_names(catalog, std::slice::from_ref(&self.component))?;
        if self.servers.servers.is_empty() {
            bail!(
                "name the servers to remove {} from with -s SERVERS",
                self.component
            );
        }
        Ok(Change {
            request: Request {
                operation: Operation::Remove,
                components: ComponentSelection::Named(names),
                servers: servers_selection(self.servers.servers),
                exclude: Vec::new(),
            },
            choice: ImageChoice::Intent,
            image_spec: None,
            source: ChannelArgs::default(),
            just_import: false,
            settings: self.exec.settings(here),
            target_line: None,
        })
    }
}

/// The components named on the command line, as typed (a package name
/// such as `marlin` included), once the catalog knows each.
fn component_names(catalog: &Catalog, names: &[String]) -> anyhow::Result<Vec<ComponentName>> {
    names
        .iter()
        .map(|n| {
            catalog.require(n)?;
            Ok(n.parse()?)
        })
        .collect()
}

fn servers_selection(names: Vec<String>) -> ServerSelection {
    if names.is_empty() {
        ServerSelection::All
    } else {
        ServerSelection::Named(names)
    }
}

/// plan / update / install / remove, through the library's one run: the
/// datacenter lock, the plan made under it and again after the prompt
/// (fenced plans), the question or `-y`, imports, execution.
pub(crate) async fn run_change(g: &Settings, mut change: Change, plan_only: bool) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    // --latest looks in the update channel of the updates server
    // (sdcadm's rule), or with --source dc only in the datacenter IMGAPI.
    let latest = change.choice == ImageChoice::Latest;
    let want = if latest { Want::Latest } else { Want::Lookup };
    let updates = updates_client(g, &apis, &change.source, want).await?;
    let updates_imgapi = updates.as_ref().map(|u| &u.client);
    if latest {
        let names = match &change.request.components {
            ComponentSelection::All => Vec::new(),
            ComponentSelection::Named(v) => v.clone(),
        };
        change.target_line = Some(latest_target_line(&names, updates.as_ref(), &apis.imgapi));
    }
    let session = Session {
        apis: &apis,
        catalog: &catalog,
        updates: updates_imgapi,
    };
    if let Some((component, spec)) = &change.image_spec {
        let sources = agentsadm_orchestrate::images::ImageSources {
            dc: &apis.imgapi,
            updates: updates_imgapi,
        };
        let c = catalog.require(component)?;
        change.choice =
            ImageChoice::Image(agentsadm_orchestrate::images::find_image(sources, c, spec).await?);
    }
    let asked_dry_run = change.settings.dry_run || plan_only;
    change.settings.dry_run |= plan_only || change.just_import;
    // What servers took before: read once, before planning.
    let durations = g.history_store().durations().await;
    // sdcadm and gz-tools as this headnode's disk has them (sdcadm
    // changes them without telling CNAPI), read at every plan.
    let disk = agentsadm_flows::ondisk::HeadnodeDisk {
        catalog: &catalog,
        apis: &apis,
    };
    let planner = RequestPlanner {
        session,
        request: change.request.clone(),
        choice: change.choice,
        options: change.settings.plan_options(),
        durations: Some(durations.clone()),
        overlay: Some(&disk),
    };
    let operation = format!(
        "{} {}",
        change.request.operation,
        match &change.request.components {
            ComponentSelection::All => "--all".to_string(),
            ComponentSelection::Named(v) => v.join(","),
        }
    );
    let execution = Execution::new(g, change.request.operation.as_str());
    let operator = CliOperator::new(
        out,
        |plan: &Plan, shown| show_plan(g, &change, &catalog, &durations, plan, shown),
        crate::execution::proceed_question,
    )
    .with_display(execution.display());
    let reporter = execution.reporter();
    let mut run = recorded(
        Run::new(&apis, &catalog, &change.settings, &reporter, operation),
        g,
    );
    run.durations = Some(&durations);
    let outcome = run
        .go(&planner, &operator, interrupted())
        .await
        .map_err(run_error)?;
    if let RunOutcome::DryRun(plan) = &outcome
        && change.just_import
        && !asked_dry_run
    {
        return just_import(out, &apis, plan).await;
    }
    Ok(ExitCode::from(match ended(out, outcome, !plan_only) {
        Ok((planned, report)) => executed(out, &planned, &report),
        Err(status) => status,
    }))
}

/// `--just-import`: the images the plan needs, into the datacenter IMGAPI
/// (those already there are left as they are); nothing else changes.
async fn just_import(out: Output, apis: &agentsadm_api::Apis, plan: &Plan) -> CmdResult {
    let imported = agentsadm_orchestrate::images::import(&apis.imgapi, plan.imports())
        .await
        .map_err(|e| {
            anyhow::Error::new(e).context(format!("cannot import into {}", apis.imgapi.base_url()))
        })?;
    let names: Vec<String> = plan
        .imports()
        .iter()
        .map(|i| format!("{} {}", i.name, i.version))
        .collect();
    if out.json {
        out.json(&json!({"imported": plan.imports(), "executed": false, "exit_status": 0}));
    } else if names.is_empty() {
        out.line("Nothing to import: the datacenter IMGAPI has every image the plan needs; nothing was changed.");
    } else {
        out.line(format!(
            "Imported {imported} of {} image(s) into the datacenter IMGAPI ({}); no server or SAPI record was changed.",
            names.len(),
            names.join(", ")
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A plan of update, install, remove or revert as the operator sees it:
/// in `--json` only its warnings, on stderr, when the run stops without a
/// confirmation; otherwise whether it changed since shown, `head` (the
/// target line) and the plan, at most [`DEFAULT_MAX_SERVERS`] servers
/// unless `-v`. Whether text was shown.
pub(crate) fn show_plan_text(
    g: &Settings,
    settings: &RunSettings,
    plan: &Plan,
    shown: Shown,
    head: Option<&str>,
) -> bool {
    let out = g.output();
    if out.json {
        if shown == Shown::Unlocked && !plan.is_empty() {
            for w in plan.warnings() {
                eprintln!("warning: {w}");
            }
        }
        return false;
    }
    if shown == Shown::Changed {
        out.line("\nThe plan changed since it was shown; the new plan:");
    }
    let max = if g.verbose > 0 {
        usize::MAX
    } else {
        DEFAULT_MAX_SERVERS
    };
    if let Some(head) = head {
        out.line(head);
    }
    out.line(
        plan.display_compact(max)
            .with_health(settings.options.health)
            .to_string()
            .trim_end(),
    );
    true
}

/// Print a plan (text output only), and why an empty update changes
/// nothing. In `--json`, a plan shown because the run stops without a
/// confirmation has its warnings on stderr.
fn show_plan(
    g: &Settings,
    change: &Change,
    catalog: &Catalog,
    durations: &Durations,
    plan: &Plan,
    shown: Shown,
) {
    let out = g.output();
    if !show_plan_text(
        g,
        &change.settings,
        plan,
        shown,
        change.target_line.as_deref(),
    ) {
        return;
    }
    // A rollout too small for a median: how its slow servers are judged.
    if !plan.is_empty() {
        let mut known = change.settings.options.known.clone();
        known.add_catalog(catalog);
        known.add_history(durations);
        let policy = &change.settings.options.outlier;
        if let Some(line) = agentsadm_orchestrate::baseline::judgement(plan, &known, policy) {
            out.line(line);
        }
    }
    if plan.is_empty()
        && plan.operation() == Operation::Update
        && change.choice == ImageChoice::Intent
        && plan.skips().is_empty()
    {
        out.line(format!(
            "The selected servers already run the image SAPI names for {} (the service default); use --latest or COMPONENT@VERSION to move to another image.",
            plan.components().join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};
    use std::time::Duration;

    #[derive(Parser, Debug)]
    struct T {
        #[command(subcommand)]
        c: C,
    }
    #[derive(Subcommand, Debug)]
    enum C {
        Update(UpdateArgs),
        Install(InstallArgs),
        Remove(RemoveArgs),
    }

    fn update(args: &[&str]) -> anyhow::Result<Change> {
        let t = T::try_parse_from(
            std::iter::once("t")
                .chain(std::iter::once("update"))
                .chain(args.iter().copied()),
        )?;
        match t.c {
            C::Update(u) => u.change(&Catalog::builtin(), &Settings::offline()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn update_arguments() {
        let c = update(&[
            "vm-agent", "-s", "cn1,cn2", "-s", "cn3", "-x", "cn4", "--latest", "-y", "-J", "5",
        ])
        .unwrap();
        assert_eq!(
            c.request.servers,
            ServerSelection::Named(vec!["cn1".into(), "cn2".into(), "cn3".into()])
        );
        assert_eq!(c.request.exclude, vec!["cn4".to_string()]);
        assert_eq!(c.choice, ImageChoice::Latest);
        assert_eq!(c.settings.rollout.concurrency, 5);
        assert!(c.settings.yes);
        assert!(update(&[]).unwrap_err().to_string().contains("--all"));
        assert!(
            update(&["vm-agnet"])
                .unwrap_err()
                .to_string()
                .contains("unknown component")
        );
        let img = "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f";
        assert!(
            update(&["vm-agent", "cn-agent", "--image", img])
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        assert!(update(&["--all", "vm-agent"]).is_err());
        assert!(update(&["vm-agent", "--image", img, "--latest"]).is_err());
        let c = update(&[
            "--all",
            "--straggler-timeout",
            "10m",
            "--task-timeout",
            "5m",
        ])
        .unwrap();
        assert_eq!(
            c.settings.options.straggler_timeout,
            Some(Duration::from_secs(600))
        );
        assert_eq!(c.settings.options.task_timeout, Duration::from_secs(300));
        assert_eq!(c.settings.rollout.concurrency, 20);
        assert_eq!(c.settings.options.outlier.margin, Duration::from_secs(30));
        let c = update(&["--all", "--outlier-margin", "1s"]).unwrap();
        assert_eq!(c.settings.options.outlier.margin, Duration::from_secs(1));
    }

    #[test]
    fn targets_as_sdcadm_users_type_them() {
        let c = update(&["vm-agent@1.1.0", "-y"]).unwrap();
        assert_eq!(
            c.request.components,
            ComponentSelection::Named(vec!["vm-agent".parse().unwrap()])
        );
        assert_eq!(c.image_spec, Some(("vm-agent".into(), "1.1.0".into())));
        let img = "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f";
        let c = update(&[&format!("vm-agent@{img}")]).unwrap();
        assert_eq!(c.choice, ImageChoice::Image(img.parse().unwrap()));
        assert_eq!(c.image_spec, None);
        let c = update(&["vm-agent", "--image", "fd5f189c"]).unwrap();
        assert_eq!(c.image_spec, Some(("vm-agent".into(), "fd5f189c".into())));
        let e = |args: &[&str]| update(args).unwrap_err().to_string();
        assert!(e(&["vm-agent@1.1.0", "--latest"]).contains("--latest"));
        assert!(e(&["vm-agent@1.1.0", "--image", "fd5f189c"]).contains("not both"));
        assert!(e(&["vm-agent@1.1.0", "cn-agent"]).contains("exactly one"));
        assert!(e(&["vm-agent@"]).contains("needs an image"));
        let t = T::try_parse_from(["t", "install", "dockerlogger@1.2.0", "--all-servers"]).unwrap();
        let C::Install(i) = t.c else { unreachable!() };
        let c = i.change(&Catalog::builtin(), &Settings::offline()).unwrap();
        assert_eq!(c.image_spec, Some(("dockerlogger".into(), "1.2.0".into())));
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        let msg = |args: &[&str]| update(args).unwrap_err().to_string();
        let e = msg(&["vm-agent", "--task-timeout", "banana"]);
        assert!(e.contains("not a duration") && e.contains("90s, 5m"), "{e}");
        let e = msg(&["vm-agent", "-J", "0"]);
        assert!(e.contains("at least 1"), "{e}");
        let e = msg(&["vm-agent", "-s", ""]);
        assert!(e.contains("empty server name"), "{e}");
        let e = msg(&["vm-agent", "-s", "cn1,,cn2"]);
        assert!(e.contains("empty server name"), "{e}");
        assert_eq!(
            update(&["vm-agent", "-s", "cn1, cn2"])
                .unwrap()
                .request
                .servers,
            ServerSelection::Named(vec!["cn1".into(), "cn2".into()])
        );
    }

    #[test]
    fn install_and_remove_need_servers() {
        let t = T::try_parse_from(["t", "install", "dockerlogger"]).unwrap();
        let C::Install(i) = t.c else { unreachable!() };
        assert!(
            i.change(&Catalog::builtin(), &Settings::offline())
                .unwrap_err()
                .to_string()
                .contains("--all-servers")
        );
        let t = T::try_parse_from(["t", "remove", "dockerlogger"]).unwrap();
        let C::Remove(r) = t.c else { unreachable!() };
        assert!(
            r.change(&Catalog::builtin(), &Settings::offline())
                .unwrap_err()
                .to_string()
                .contains("-s SERVERS")
        );
    }
}
