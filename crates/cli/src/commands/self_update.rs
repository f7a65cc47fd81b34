//! `agentsadm self-update`: the command line of
//! [`agentsadm_flows::selfupdate`] (plan, `-n` stops there, else execute
//! under the datacenter lock) and its one line or JSON document.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use serde_json::json;

use crate::CmdResult;
use crate::args::ChannelArgs;
use crate::settings::Settings;
use crate::updates::{Want, updates_client};
use agentsadm_flows::selfupdate::{self, Allow, SelfUpdateEnv, Target};
use agentsadm_flows::selfupdate::{Done, SelfUpdateOutcome};
use agentsadm_gz::session::GzSettings;
use agentsadm_orchestrate::history::{Recorder, SapiHistory, ServerRecord, StepRecord};
use agentsadm_orchestrate::reporters::LogReporter;
use agentsadm_orchestrate::run::{Run, RunSettings};

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("target").required(true).args(["image", "latest", "rollback"])))]
pub struct SelfUpdateArgs {
    /// An agentsadm image: a UUID or version (the datacenter IMGAPI, then
    /// the updates server), or an image file with its .manifest beside it.
    #[arg(value_name = "IMAGE|FILE")]
    pub image: Option<String>,
    /// The newest build in the updates server's channel (within the
    /// installed major version).
    #[arg(long)]
    pub latest: bool,
    /// Put back the copy the last self-update replaced.
    #[arg(long)]
    pub rollback: bool,
    #[command(flatten)]
    pub source: ChannelArgs,
    /// Allow another major version.
    #[arg(long)]
    pub allow_major_update: bool,
    /// Allow an image older than the installed one.
    #[arg(long)]
    pub allow_downgrade: bool,
    /// Move agentsadm though it is held ('agentsadm hold agentsadm').
    #[arg(long)]
    pub ignore_holds: bool,
    /// Show what would be done, and do nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Take over the orchestrator lock even if another run holds it.
    #[arg(long)]
    pub break_lock: bool,
    /// On a headnode, wait this long for sdcadm's lock when an sdcadm
    /// command holds it, then stop.
    #[arg(long, value_parser = crate::args::duration, default_value = "1m", value_name = "DURATION")]
    pub sdcadm_lock_wait: std::time::Duration,
    /// The headnode's global zone root (a directory in tests).
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// `agentsadm self-update ...`.
pub async fn run(g: &Settings, a: SelfUpdateArgs) -> CmdResult {
    let out = g.output();
    let apis = g.apis()?;
    let target = match (&a.image, a.latest, a.rollback) {
        (_, _, true) => Target::Rollback,
        (_, true, _) => Target::Latest,
        (Some(i), _, _) if std::path::Path::new(i).exists() => Target::File(PathBuf::from(i)),
        (Some(i), _, _) => Target::Image(i.clone()),
        (None, false, false) => unreachable!("clap requires a target"),
    };
    // The updates server for --latest, and to look an image up in when the
    // datacenter does not have it.
    // (--latest follows the one rule of `update --latest`; an image is
    // looked up there only when an updates server is named.)
    let want = match target {
        Target::Latest => Want::Latest,
        _ => Want::Lookup,
    };
    let updates = updates_client(g, &apis, &a.source, want)
        .await?
        .map(|u| u.client);
    let platform = agentsadm_gz::session::platform_for_command_line(&a.root, &Default::default());
    let mut settings = GzSettings::new(&a.root, platform);
    settings.catalog = g.load_catalog()?;
    settings.clients = Some(apis.clone());
    let env = SelfUpdateEnv {
        settings,
        dc: &apis.imgapi,
        updates: updates.as_ref(),
        sapi: &apis.sapi,
        running_version: crate::release::VERSION,
    };
    let allow = Allow {
        major_update: a.allow_major_update,
        downgrade: a.allow_downgrade,
        ignore_holds: a.ignore_holds,
    };
    let plan = selfupdate::plan(&env, &target, allow).await?;
    for note in &plan.notes {
        out.warn(format!("note: {note}"));
    }
    if a.dry_run {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false, "exit_status": 0}));
        } else {
            out.line(plan.describe());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let note = |line: &str| out.warn(line);
    // Records of earlier versions move out of `sdc` first, so that the
    // service self-update sets is the moved one.
    let lost = std::sync::atomic::AtomicBool::new(false);
    let work = async {
        agentsadm_orchestrate::shape::move_and_note(&apis.sapi, Some(&apis.cnapi), note).await;
        // A history entry like every changing run's ('agentsadm history';
        // 'revert' names what undoes it); a killed run's is ended as
        // interrupted by the next run.
        let recorder = begin_history(g, &apis, &note).await;
        let result = selfupdate::execute(&env, &plan).await;
        let status = if lost.load(std::sync::atomic::Ordering::SeqCst) {
            2
        } else {
            0
        };
        match &result {
            Ok(outcome) => {
                let record = server_record(&plan, outcome);
                recorder.finish_outside(vec![record], status).await;
            }
            Err(e) => {
                recorder
                    .finish_error(&agentsadm_types::error::error_chain(e))
                    .await;
            }
        }
        result
    };
    // The lock is the run's: taken, refreshed and released as every
    // changing command's.
    let run_settings = RunSettings {
        break_lock: a.break_lock,
        sdcadm_lock: g.sdcadm_lock(a.sdcadm_lock_wait),
        login: g.login.clone(),
        ..RunSettings::default()
    };
    let catalog = g.load_catalog()?;
    let run = Run::sapi_only(
        &apis.sapi,
        &catalog,
        &run_settings,
        &LogReporter,
        "self-update",
    );
    let outcome = run.outside(&lost, note, work).await??;
    // A lock lost while it ran (said when noticed): the headnode may since
    // have been changed by the new holder, so this is not "done".
    let lock_lost = lost.load(std::sync::atomic::Ordering::SeqCst);
    let status: u8 = if lock_lost { 2 } else { 0 };
    if out.json {
        out.json(&json!({"plan": plan, "executed": true, "result": outcome, "lock_lost": lock_lost, "exit_status": status}));
    } else {
        for w in &outcome.warnings {
            if !plan.notes.contains(w) {
                out.warn(format!("warning: {w}"));
            }
        }
        out.line(outcome.line());
        if lock_lost {
            out.warn("the datacenter lock was lost while self-update ran: another agentsadm may since have changed this headnode; check it ('agentsadm gz report'), then run self-update again once the lock is free");
        }
    }
    Ok(ExitCode::from(status))
}

/// The run's history entry, begun (with an empty plan: self-update has
/// none) once the lock is held.
async fn begin_history(g: &Settings, apis: &agentsadm_api::Apis, note: &dyn Fn(&str)) -> Recorder {
    let empty = agentsadm_plan::PlanBuilder::new(
        agentsadm_plan::Operation::Update,
        &agentsadm_types::catalog::Catalog::builtin(),
        agentsadm_plan::Intent::none(),
    )
    .finish(&agentsadm_plan::RolloutPolicy::default());
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let recorder = Recorder::begin(
        &g.history_settings(),
        Some(SapiHistory::new(apis.sapi.clone())),
        &empty,
        agentsadm_orchestrate::revert::SELF_UPDATE,
        None,
        g.login.owner(),
        move |m| {
            let _ = tx.send(m.to_string());
        },
    )
    .await;
    for m in rx.try_iter() {
        note(&m);
    }
    recorder
}

/// What the self-update did to the headnode, as a history server record:
/// agentsadm from the copy before to the one now (no step when nothing
/// moved).
fn server_record(plan: &selfupdate::SelfUpdatePlan, o: &SelfUpdateOutcome) -> ServerRecord {
    let action = match o.done {
        Done::Updated => Some("upgrade"),
        Done::RolledBack => Some("rollback"),
        Done::UpToDate | Done::AlreadyInstalled => None,
    };
    let version = |v: &str| (!v.is_empty()).then(|| v.to_string());
    ServerRecord {
        server: Some(plan.server),
        hostname: plan.hostname.clone(),
        outcome: "succeeded".to_string(),
        steps: action
            .map(|action| StepRecord {
                component: agentsadm_gz::release::NAME.to_string(),
                action: action.to_string(),
                from: o.from.image,
                from_version: version(&o.from.version),
                to: o.to.image,
                to_version: version(&o.to.version),
                status: "done".to_string(),
                ..StepRecord::default()
            })
            .into_iter()
            .collect(),
        ..ServerRecord::default()
    }
}
