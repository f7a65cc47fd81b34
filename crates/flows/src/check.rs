//! `agentsadm check` as a library call (the command line, the demo and the
//! tests use it):
//!
//! - [`check`]: one ServerList, one ListServices and one ListInstances
//!   (the orchestrator's [`gather::fetch`]), with `--live` each selected
//!   server's own `agentsadm gz report` through CNAPI execute, and a GetImage
//!   for every image intent or reality names; then the pure finder.
//! - [`FixPlanner`]: check and plan the repairs, as
//!   [`agentsadm_orchestrate::run::Run`] does it for `check --fix` (lock,
//!   question or `-y`, fence, waves), and [`after_fix`]: what the repairs
//!   did and a check of what is left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde::Serialize;
use serde_json::json;

use super::drift;

use super::drift::DriftInput;

use super::drift::Finding;

use super::drift::Survey;
use super::repair;
use super::repair::FixPlan;
use super::repair::RepairPlan;
use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::cnapi::CnapiClient;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_orchestrate::execute::DEFAULT_CONCURRENCY;
use agentsadm_orchestrate::gather;
use agentsadm_orchestrate::gather::Answers;
use agentsadm_orchestrate::gather::GatherError;
use agentsadm_orchestrate::history::{HistoryEntry, HistoryStore};
use agentsadm_orchestrate::records::RecordStatus;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::run::Planner;
use agentsadm_plan::ImageRef;
use agentsadm_plan::Plan;
use agentsadm_plan::PlanError;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::resolve_servers;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::component::ComponentName;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

/// What to check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckRequest {
    /// `-s`: servers by UUID or hostname (all when empty).
    pub servers: Vec<String>,
    /// `-x`: servers to leave out (a hung one, whose live report or
    /// repair would wait for its timeout), by UUID or hostname.
    pub exclude: Vec<String>,
    /// `--live`: also ask each server for its own report.
    pub live: bool,
}

/// How live reports are read.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// Limit of one `agentsadm gz report` through CNAPI execute.
    pub live_timeout: Duration,
    /// Environment for `agentsadm gz` on the servers (the simulator's URLs).
    pub execute_env: BTreeMap<String, String>,
    /// Servers asked at once.
    pub concurrency: usize,
    /// agentsadm's run history, which says where it wrote instances'
    /// params (`None`: not read, and a bare instance is never taken for
    /// one that lost them; marks the services' ledgers keep still are).
    pub history: Option<HistoryStore>,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            live_timeout: Duration::from_secs(60),
            execute_env: BTreeMap::new(),
            concurrency: DEFAULT_CONCURRENCY,
            history: None,
        }
    }
}

/// The check could not be made; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Gather(#[from] GatherError),
    #[error(transparent)]
    Servers(#[from] PlanError),
    #[error("cannot look up image {image} in the datacenter IMGAPI")]
    Image {
        image: ImageUuid,
        #[source]
        err: Box<ApiError>,
    },
}

/// One check: what was read, and what the finder made of it.
#[derive(Clone, Debug)]
pub struct CheckRun {
    pub answers: Answers,
    /// Live reports of the servers that could be asked.
    pub live: BTreeMap<ServerUuid, AgentsReport>,
    /// Images the datacenter IMGAPI has, of those intent and reality name.
    pub images: BTreeMap<ImageUuid, ImageRef>,
    pub selection: Option<BTreeSet<ServerUuid>>,
    pub survey: Survey,
    pub findings: Vec<Finding>,
    /// Servers whose live report could not be read (with `--live`).
    pub warnings: Vec<String>,
    pub servers_checked: usize,
    pub live_requested: bool,
}

impl CheckRun {
    /// Whether any finding is drift (informational ones are not).
    pub fn has_drift(&self) -> bool {
        drift::has_drift(&self.findings)
    }

    /// 0 clean; 2 drift, or a live report that could not be read.
    pub fn exit_status(&self) -> u8 {
        if self.has_drift() || (self.live_requested && !self.warnings.is_empty()) {
            2
        } else {
            0
        }
    }

    /// The repairs `--fix` would make (pure), with the library's neutral
    /// rollout.
    pub fn repair_plan(&self, catalog: &Catalog) -> RepairPlan {
        self.repair_plan_with(catalog, &RolloutPolicy::default())
    }

    /// The repairs `--fix` would make (pure), rolled out under `policy`.
    pub fn repair_plan_with(&self, catalog: &Catalog, policy: &RolloutPolicy) -> RepairPlan {
        repair::plan_repairs_with(
            catalog,
            &self.survey,
            &self.live,
            &self.findings,
            policy,
            self.agentsadm(catalog),
        )
    }

    /// The agentsadm servers get first when theirs cannot parse a repair:
    /// the SAPI `agentsadm` service's default image, when the datacenter
    /// IMGAPI has it.
    fn agentsadm(&self, catalog: &Catalog) -> Option<&ImageRef> {
        let c = catalog
            .iter()
            .find(|c| c.kind == agentsadm_types::catalog::ComponentKind::Agentsadm)?;
        let image = self.survey.intent.services.get(&c.name)?.default_image?;
        self.images.get(&image)
    }

    /// The findings as operators read them.
    pub fn render(&self) -> String {
        let mut out = drift::render(&self.findings, self.servers_checked);
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }

    /// The `--json` document of a check.
    pub fn to_json(&self) -> serde_json::Value {
        let counts: BTreeMap<&str, usize> = drift::counts(&self.findings)
            .into_iter()
            .map(|(k, n)| (k.as_str(), n))
            .collect();
        json!({
            "servers_checked": self.servers_checked,
            "live": self.live_requested,
            "findings": self.findings,
            "counts": counts,
            "warnings": self.warnings,
        })
    }
}

/// Read intent, reality, live reports and images, and find drift.
pub async fn check(
    apis: &Apis,
    catalog: &Catalog,
    request: &CheckRequest,
    config: &CheckConfig,
) -> Result<CheckRun, CheckError> {
    let mut answers = gather::fetch(apis).await?;
    let mut warnings = Vec::new();
    let mut changed_by_sdcadm: BTreeMap<ServerUuid, BTreeSet<ComponentName>> = BTreeMap::new();
    if !request.live {
        // What sdcadm changed behind agentsadm on this headnode, from its
        // disk (with --live the server's own report says it, and CNAPI's
        // stale view is a finding with its fix).
        let disk = super::ondisk::overlay_headnode(&mut answers.servers, catalog, apis).await;
        changed_by_sdcadm.extend(disk.read.clone());
        warnings.extend(disk.changes.iter().map(|c| {
            format!(
                "{} {}: read from this headnode's disk (sdcadm changed it; CNAPI still shows agentsadm's registration): 'agentsadm check --live --fix -s {}' posts the server's own report",
                c.hostname, c.component, c.hostname
            )
        }));
    }
    let cnapi = agentsadm_orchestrate::Reality::from_servers(catalog, &answers.servers);
    let selection: Option<BTreeSet<ServerUuid>> = if request.servers.is_empty() {
        None
    } else {
        Some(
            resolve_servers(&cnapi, &request.servers)?
                .into_iter()
                .collect(),
        )
    };
    let excluded: BTreeSet<ServerUuid> = if request.exclude.is_empty() {
        BTreeSet::new()
    } else {
        resolve_servers(&cnapi, &request.exclude)?
            .into_iter()
            .collect()
    };
    let selected = |s: &ServerUuid| {
        selection.as_ref().is_none_or(|set| set.contains(s)) && !excluded.contains(s)
    };
    let servers_checked = cnapi.servers.keys().filter(|s| selected(s)).count();

    let mut live = BTreeMap::new();
    if request.live {
        let mut targets = Vec::new();
        for s in cnapi.servers.values().filter(|s| selected(&s.uuid)) {
            if !s.setup {
                continue;
            }
            if !s.is_running() {
                warnings.push(format!(
                    "{}: no live report: the server is not running (CNAPI status {:?})",
                    s.label(),
                    s.status
                ));
                continue;
            }
            if !s.has_execute() {
                // Asking would wait for CNAPI's Ur timeout (an hour).
                warnings.push(format!(
                    "{}: no live report: it is a mockcloud server, which has no CNAPI execute to run 'agentsadm gz report'",
                    s.label()
                ));
                continue;
            }
            targets.push((s.uuid, s.label()));
        }
        let results: Vec<(ServerUuid, String, Result<AgentsReport, LiveReportError>)> =
            stream::iter(targets)
                .map(|(uuid, label)| async move {
                    (uuid, label, live_report(&apis.cnapi, uuid, config).await)
                })
                .buffer_unordered(config.concurrency.max(1))
                .collect()
                .await;
        for (uuid, label, r) in results {
            match r {
                Ok(report) => {
                    live.insert(uuid, report);
                }
                Err(e) => warnings.push(format!("{label}: no live report: {}", error_chain(&e))),
            }
        }
        warnings.sort();
    }

    if request.live {
        changed_by_sdcadm = changed_in_reports(&answers.servers, &live, catalog);
    }
    let images = lookup_images(apis, &answers, &live).await?;
    let written = written_in(config.history.as_ref()).await;
    let (survey, mut findings) = drift::find(&DriftInput {
        catalog,
        servers: &answers.servers,
        services: &answers.services,
        instances: &answers.instances,
        live: &live,
        images: &images,
        selection: selection.as_ref(),
        changed_by_sdcadm: &changed_by_sdcadm,
        written_by_agentsadm: &written,
    });
    // What an excluded server shows is neither reported nor repaired.
    findings.retain(|f| f.server.is_none_or(|s| !excluded.contains(&s)));
    Ok(CheckRun {
        answers,
        live,
        images,
        selection,
        survey,
        findings,
        warnings,
        servers_checked,
        live_requested: request.live,
    })
}

/// [`written_by_agentsadm`] from `history`, when it is read.
async fn written_in(
    history: Option<&HistoryStore>,
) -> BTreeMap<ServerUuid, BTreeSet<ComponentName>> {
    match history {
        Some(history) => written_by_agentsadm(&history.list().await.entries),
        None => BTreeMap::new(),
    }
}

/// Where agentsadm wrote instances' params, from its run history (oldest
/// run first): a component it installed or upgraded on a server to the
/// end (its record was written after the step), or whose instance a run
/// adopted, completed or restored (`adopt`, `check --fix`), unless a
/// later run of it removed the component there.
pub fn written_by_agentsadm(
    entries: &[HistoryEntry],
) -> BTreeMap<ServerUuid, BTreeSet<ComponentName>> {
    let mut out: BTreeMap<ServerUuid, BTreeSet<ComponentName>> = BTreeMap::new();
    for entry in entries {
        steps_written(entry, &mut out);
        for (server, components) in &entry.params_written {
            for component in components {
                if let Ok(component) = ComponentName::new(component) {
                    out.entry(*server).or_default().insert(component);
                }
            }
        }
    }
    out.retain(|_, c| !c.is_empty());
    out
}

/// [`written_by_agentsadm`] for one run's steps.
fn steps_written(entry: &HistoryEntry, out: &mut BTreeMap<ServerUuid, BTreeSet<ComponentName>>) {
    for server in &entry.servers {
        let Some(uuid) = server.server else {
            continue;
        };
        for step in server.steps.iter().filter(|s| s.changed()) {
            let Ok(component) = ComponentName::new(&step.component) else {
                continue;
            };
            match step.action.as_str() {
                "install" | "upgrade" => {
                    out.entry(uuid).or_default().insert(component);
                }
                "remove" => {
                    if let Some(c) = out.get_mut(&uuid) {
                        c.remove(&component);
                    }
                }
                _ => {}
            }
        }
    }
}

/// What sdcadm changed behind agentsadm, as the servers' own reports show
/// it ([`super::ondisk::changed_behind`]).
fn changed_in_reports(
    servers: &[agentsadm_api::cnapi::Server],
    live: &BTreeMap<ServerUuid, AgentsReport>,
    catalog: &Catalog,
) -> BTreeMap<ServerUuid, BTreeSet<ComponentName>> {
    live.iter()
        .map(|(s, report)| {
            (
                *s,
                super::ondisk::changed_behind(servers, *s, report, catalog),
            )
        })
        .filter(|(_, changed)| !changed.is_empty())
        .collect()
}

/// Every image a service default, an instance or a server names, looked up
/// in the datacenter IMGAPI (absent ones are left out).
async fn lookup_images(
    apis: &Apis,
    answers: &Answers,
    live: &BTreeMap<ServerUuid, AgentsReport>,
) -> Result<BTreeMap<ImageUuid, ImageRef>, CheckError> {
    let mut wanted: BTreeSet<ImageUuid> = BTreeSet::new();
    wanted.extend(answers.services.iter().filter_map(|s| s.image_uuid()));
    wanted.extend(answers.instances.iter().filter_map(|i| i.image_uuid()));
    for s in &answers.servers {
        wanted.extend(s.reported_agents().0.iter().filter_map(|a| a.image_uuid));
    }
    for r in live.values() {
        wanted.extend(r.agents.iter().filter_map(|a| a.image_uuid));
    }
    let found: Vec<Result<Option<ImageRef>, CheckError>> = stream::iter(wanted)
        .map(|uuid| async move {
            match apis.imgapi.get_image(uuid).await {
                Ok(m) => Ok(Some(ImageRef {
                    uuid: m.uuid,
                    name: m.name,
                    version: m.version,
                    import_from: None,
                })),
                Err(e) if e.is_not_found() => Ok(None),
                Err(err) => Err(CheckError::Image {
                    image: uuid,
                    err: Box::new(err),
                }),
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut out = BTreeMap::new();
    for r in found {
        if let Some(i) = r? {
            out.insert(i.uuid, i);
        }
    }
    Ok(out)
}

/// Why a server's own report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveReportError {
    /// CNAPI execute failed; its message says how.
    #[error(transparent)]
    Execute(ApiError),
    #[error(
        "'agentsadm gz report' exited {exit_status} ({tail}); is agentsadm installed at {binary}?",
        binary = agentsadm_api::remote::GZ_BINARY
    )]
    NoReport {
        exit_status: i32,
        /// The last lines of its stderr (else stdout), joined with ` | `.
        tail: String,
    },
}

/// A server's own report: `agentsadm gz report --json` through CNAPI
/// execute.
pub async fn live_report(
    cnapi: &CnapiClient,
    server: ServerUuid,
    config: &CheckConfig,
) -> Result<AgentsReport, LiveReportError> {
    let request = gz_execute_request(
        &agentsadm_api::compat::report_args(),
        config.execute_env.clone(),
    );
    let result = cnapi
        .execute(server, &request, config.live_timeout)
        .await
        .map_err(LiveReportError::Execute)?;
    match parse_last_json::<AgentsReport>(&result.stdout) {
        Some(r) if result.exit_status == 0 => Ok(r),
        _ => {
            let text = if result.stderr.trim().is_empty() {
                result.stdout.trim()
            } else {
                result.stderr.trim()
            };
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            Err(LiveReportError::NoReport {
                exit_status: result.exit_status,
                tail: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            })
        }
    }
}

/// The JSON document a command printed: all of stdout, or the last part
/// that starts a line with `{` and parses.
fn parse_last_json<T: serde::de::DeserializeOwned>(stdout: &str) -> Option<T> {
    let text = stdout.trim();
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    text.rmatch_indices("\n{")
        .map(|(i, _)| i + 1)
        .find_map(|i| serde_json::from_str(&text[i..]).ok())
}

/// A repair that failed (or was not made).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepairFailure {
    /// What was being done (`post server.agents of cn1`, `delete instance ...`).
    pub what: String,
    pub message: String,
}

/// What the repairs did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    pub reports_posted: usize,
    pub sapi_done: usize,
    /// The orchestrator's report of the server steps (absent without steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<ExecReport>,
    /// Instances deleted because an install replaced them.
    pub replaced_deleted: usize,
    pub failures: Vec<RepairFailure>,
    pub interrupted: bool,
}

impl RepairReport {
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
            || self.interrupted
            || self.servers.as_ref().is_some_and(|r| !r.all_succeeded())
    }

    /// What the executor's report of a repair plan comes to.
    pub fn from_exec(plan: &Plan, report: ExecReport) -> RepairReport {
        let mut out = RepairReport {
            interrupted: report.interrupted,
            replaced_deleted: report.servers.values().map(|o| o.replaced.len()).sum(),
            ..RepairReport::default()
        };
        for r in &report.records {
            let why = match &r.status {
                RecordStatus::Failed { message } => message.clone(),
                RecordStatus::NotRun { reason } => reason.clone(),
                _ if r.change.is_sapi() => {
                    out.sapi_done += 1;
                    continue;
                }
                _ => {
                    out.reports_posted += 1;
                    continue;
                }
            };
            out.failures.push(RepairFailure {
                what: agentsadm_plan::display::record_line(&r.change),
                message: why,
            });
        }
        if !plan.servers().is_empty() {
            out.servers = Some(report);
        }
        out
    }
}

/// What `check --fix` did and what is left.
#[derive(Clone, Debug)]
pub struct FixOutcome {
    pub repairs: RepairReport,
    /// The check after the repairs: what remains.
    pub after: CheckRun,
}

impl FixOutcome {
    /// 0 when nothing remains and every repair worked, else 2.
    pub fn exit_status(&self) -> u8 {
        if self.repairs.failed() {
            2
        } else {
            self.after.exit_status()
        }
    }
}

/// The end of `check --fix`: what the executor did, and a check of what
/// is left.
pub async fn after_fix(
    apis: &Apis,
    catalog: &Catalog,
    request: &CheckRequest,
    config: &CheckConfig,
    plan: &Plan,
    report: ExecReport,
) -> Result<FixOutcome, CheckError> {
    let repairs = RepairReport::from_exec(plan, report);
    let after = check(apis, catalog, request, config).await?;
    Ok(FixOutcome { repairs, after })
}

/// `check --fix` as a [`Planner`] for [`agentsadm_orchestrate::run::Run`]:
/// each call checks the datacenter anew and plans its repairs.
pub struct FixPlanner<'a> {
    pub apis: &'a Apis,
    pub catalog: &'a Catalog,
    pub request: &'a CheckRequest,
    pub config: &'a CheckConfig,
    pub policy: RolloutPolicy,
}

impl Planner for FixPlanner<'_> {
    type Planned = FixPlan;
    type Error = CheckError;

    async fn plan(&self) -> Result<FixPlan, CheckError> {
        let run = check(self.apis, self.catalog, self.request, self.config).await?;
        Ok(FixPlan::new(run, self.catalog, &self.policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_report_after_other_output() {
        let doc = r#"{
  "server_uuid": "44454c4c-4800-1034-804a-b2c04f354d31",
  "agents": []
}"#;
        assert!(parse_last_json::<AgentsReport>(doc).is_some());
        assert!(parse_last_json::<AgentsReport>(&format!("note\n{doc}\n")).is_some());
        assert!(parse_last_json::<AgentsReport>("nothing").is_none());
    }

    #[test]
    fn the_history_says_where_agentsadm_wrote_an_instance() {
        use agentsadm_orchestrate::history::{ServerRecord, StepRecord};
        let cn1: ServerUuid = "44454c4c-4800-1034-804a-b2c04f354d31".parse().unwrap();
        let cn2: ServerUuid = "44454c4c-4800-1034-804a-b2c04f354d32".parse().unwrap();
        let step = |component: &str, action: &str, status: &str| StepRecord {
            component: component.into(),
            action: action.into(),
            status: status.into(),
            ..StepRecord::default()
        };
        let run = |server: ServerUuid, steps: Vec<StepRecord>| HistoryEntry {
            servers: vec![ServerRecord {
                server: Some(server),
                steps,
                ..ServerRecord::default()
            }],
            ..HistoryEntry::default()
        };
        let entries = [
            run(
                cn1,
                vec![
                    step("vm-agent", "upgrade", "done"),
                    step("net-agent", "install", "done"),
                    step("cmon-agent", "upgrade", "failed"),
                ],
            ),
            run(cn2, vec![step("vm-agent", "upgrade", "not-run")]),
            // Removed by a later run: whatever instance it has now is
            // another tool's.
            run(cn1, vec![step("net-agent", "remove", "done")]),
        ];
        let written = written_by_agentsadm(&entries);
        let names = |s: &ServerUuid| -> Vec<String> {
            written
                .get(s)
                .map(|c| c.iter().map(|c| c.to_string()).collect())
                .unwrap_or_default()
        };
        assert_eq!(names(&cn1), vec!["vm-agent".to_string()]);
        assert!(!written.contains_key(&cn2));

        // An adoption (`adopt`, `check --fix`) wrote params with no step;
        // a later removal still ends it.
        let adopted = |server: ServerUuid, component: &str| HistoryEntry {
            params_written: [(server, vec![component.to_string()])].into(),
            ..HistoryEntry::default()
        };
        let entries = [
            adopted(cn2, "vm-agent"),
            adopted(cn2, "net-agent"),
            run(cn2, vec![step("net-agent", "remove", "done")]),
        ];
        let written = written_by_agentsadm(&entries);
        assert_eq!(
            written
                .get(&cn2)
                .map(|c| c.iter().map(|c| c.to_string()).collect::<Vec<_>>()),
            Some(vec!["vm-agent".to_string()])
        );
    }
}
