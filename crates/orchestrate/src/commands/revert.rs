//! `agentsadm revert RUN` as a [`Planner`] for [`crate::run::Run`]: read
//! what the run changed from its history entry (and which later runs
//! touched the same servers), gather the datacenter, look up the images
//! before in the datacenter IMGAPI, and plan with the pure
//! [`agentsadm_plan::revert::plan_revert`]. Everything else (lock, fence,
//! question, waves, canaries, budget, gates, the history entry of the
//! revert itself) is the run's, as for any other plan.

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;

use crate::carriers::gather::{self, GatherError};
use crate::carriers::images::{self, ImageChoice, ImageError, ImageSources};
use crate::commands::session::Session;
use crate::runner::history::HistoryEntry;
use crate::runner::run::Planner;
use agentsadm_plan::revert::{LeftOut, RevertChange, RevertRequest, ServiceRevert, plan_revert};
use agentsadm_plan::timing::Durations;
use agentsadm_plan::{
    ComponentSelection, Operation, Plan, PlanError, PlanOptions, PlanningInput, Request, RevertOf,
    ServerSelection,
};
use agentsadm_types::ids::ImageUuid;

/// A revert that cannot be planned; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    #[error(
        "run {run} is still running (its process lives, or it holds the datacenter lock); wait for it to end"
    )]
    StillRunning { run: String },
    /// A self-update changed the headnode's own copy, the USB key's copy
    /// and SAPI's default together: a revert through the executor would
    /// put back only the first.
    #[error(
        "run {run} was a self-update; 'agentsadm self-update --rollback' puts the previous agentsadm back on the headnode and gives new servers it again"
    )]
    SelfUpdate { run: String },
    /// Boxed: the gathering error is large and rare.
    #[error(transparent)]
    Gather(Box<GatherError>),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Plan(#[from] PlanError),
}

impl From<GatherError> for RevertError {
    fn from(e: GatherError) -> Self {
        RevertError::Gather(Box::new(e))
    }
}

/// The operation a self-update's history entry records.
pub const SELF_UPDATE: &str = "self-update";

/// What a recorded run changed, and what later runs changed since, as the
/// planner reads it. `later`: the runs that started after it, oldest
/// first.
pub fn revert_request(
    run: &HistoryEntry,
    later: &[HistoryEntry],
) -> Result<RevertRequest, RevertError> {
    let short = run.short_id();
    let Some(id) = run.id else {
        return Err(RevertError::StillRunning { run: short });
    };
    if run.status == crate::runner::history::RunStatus::Running {
        return Err(RevertError::StillRunning { run: short });
    }
    if run.operation == SELF_UPDATE {
        return Err(RevertError::SelfUpdate { run: short });
    }
    let (changes, left_out) = what_changed(run);
    let services = run
        .plan
        .service_changes
        .iter()
        .filter(|c| !c.put_back)
        .filter_map(|c| {
            Some(ServiceRevert {
                component: c.component.parse().ok()?,
                before: c.from?,
                after: c.to?,
            })
        })
        .collect();
    let mut by = BTreeMap::new();
    let mut by_service = BTreeMap::new();
    for e in later.iter().filter(|e| e.started > run.started) {
        let name = format!("run {} ({})", e.short_id(), e.operation);
        for s in &e.servers {
            let Some(server) = s.server else { continue };
            for st in s.steps.iter().filter(|st| st.changed()) {
                if let Ok(component) = st.component.parse::<ComponentName>() {
                    by.insert((server, component), name.clone());
                }
            }
        }
        for c in e.plan.service_changes.iter().filter(|c| !c.put_back) {
            if let Ok(component) = c.component.parse::<ComponentName>() {
                by_service.insert(component, name.clone());
            }
        }
    }
    Ok(RevertRequest {
        of: RevertOf {
            run: id,
            operation: run.operation.clone(),
            started: run.started.clone(),
        },
        changes,
        services,
        later: by,
        later_services: by_service,
        left_out,
    })
}

/// The steps of `run` that changed a server, or may have (their end is
/// not known), and what its record cannot say enough about to put back.
fn what_changed(run: &HistoryEntry) -> (Vec<RevertChange>, Vec<LeftOut>) {
    let mut changes = Vec::new();
    let mut left_out = Vec::new();
    for s in &run.servers {
        let unsettled = matches!(s.outcome.as_str(), "interrupted" | "unknown" | "timed-out");
        for st in &s.steps {
            let settled = st.changed();
            let maybe = unsettled && matches!(st.status.as_str(), "not-run" | "unknown")
                || st.status == "unknown";
            if !settled && !maybe {
                continue;
            }
            let mut leave = |why: String| {
                left_out.push(LeftOut {
                    server: s.server,
                    hostname: s.hostname.clone(),
                    component: st.component.clone(),
                    why,
                })
            };
            // The history is a file: anything may be in it.
            let Some(server) = s.server else {
                leave("the run's record names no server UUID".into());
                continue;
            };
            if st.action == "upgrade" && st.from.is_none() {
                leave(format!(
                    "the run did not record the image before its {} (put one back with 'agentsadm update {}@IMAGE -s {}')",
                    st.action, st.component, s.hostname
                ));
                continue;
            }
            let Ok(component) = st.component.parse::<ComponentName>() else {
                leave("the run's record names no known component".into());
                continue;
            };
            changes.push(RevertChange {
                server,
                hostname: s.hostname.clone(),
                component,
                before: st.from,
                after: st.to,
                settled,
            });
        }
    }
    (changes, left_out)
}

/// The revert of one recorded run, planned anew at each call.
pub struct RevertPlanner<'a> {
    pub session: Session<'a>,
    pub run: HistoryEntry,
    /// The runs after it (for "changed since by run ...").
    pub later: Vec<HistoryEntry>,
    pub options: PlanOptions,
    /// What servers took before (read once, before the first plan).
    pub durations: Option<Durations>,
}

impl Planner for RevertPlanner<'_> {
    type Planned = Plan;
    type Error = RevertError;

    async fn plan(&self) -> Result<Plan, RevertError> {
        let request = revert_request(&self.run, &self.later)?;
        let catalog = self.session.catalog;
        let (intent, reality) = gather::gather(self.session.apis, catalog).await?;
        let mut names: Vec<ComponentName> = request
            .changes
            .iter()
            .map(|c| c.component.clone())
            .chain(request.services.iter().map(|s| s.component.clone()))
            .collect();
        names.sort();
        names.dedup();
        let components: Vec<_> = names.iter().filter_map(|n| catalog.get(n)).collect();
        let dc = &self.session.apis.imgapi;
        let mut resolved = images::resolve(
            catalog,
            &components,
            ImageChoice::Intent,
            ImageSources { dc, updates: None },
            &intent,
        )
        .await?;
        let wanted: Vec<(ComponentName, ImageUuid)> = request
            .changes
            .iter()
            .flat_map(|c| {
                [c.before, c.after]
                    .into_iter()
                    .flatten()
                    .map(|i| (c.component.clone(), i))
            })
            .chain(request.services.iter().flat_map(|s| {
                [
                    (s.component.clone(), s.before),
                    (s.component.clone(), s.after),
                ]
            }))
            .collect();
        images::add_known(dc, catalog, &wanted, &mut resolved).await?;
        let req = Request {
            operation: Operation::Revert,
            components: ComponentSelection::Named(names),
            servers: ServerSelection::All,
            exclude: Vec::new(),
        };
        Ok(plan_revert(
            &PlanningInput {
                catalog,
                intent: &intent,
                reality: &reality,
                request: &req,
                options: self.options,
                images: &resolved,
                durations: self.durations.as_ref(),
            },
            &request,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{RunStatus, ServerRecord, StepRecord};
    use agentsadm_types::ids::{RunId, ServerUuid};

    fn step(component: &str, from: Option<u128>, to: u128, status: &str) -> StepRecord {
        StepRecord {
            component: component.into(),
            action: "upgrade".into(),
            from: from.map(ImageUuid::from_u128),
            to: Some(ImageUuid::from_u128(to)),
            status: status.into(),
            ..StepRecord::default()
        }
    }

    fn server(n: u128, outcome: &str, steps: Vec<StepRecord>) -> ServerRecord {
        ServerRecord {
            server: Some(ServerUuid::from_u128(n)),
            hostname: format!("cn{n}"),
            outcome: outcome.into(),
            steps,
            ..ServerRecord::default()
        }
    }

    /// Every step that changed a server, or may have, is in the request;
    /// what its record cannot say enough about is left out by name, with
    /// why (before, those were dropped without a word).
    #[test]
    fn what_a_revert_cannot_put_back_is_named() {
        let mut no_uuid = server(4, "succeeded", vec![step("vm-agent", Some(1), 2, "done")]);
        no_uuid.server = None;
        let run = HistoryEntry {
            id: Some(RunId::from_u128(9)),
            status: RunStatus::Interrupted,
            servers: vec![
                server(1, "succeeded", vec![step("vm-agent", Some(1), 2, "done")]),
                server(
                    2,
                    "interrupted",
                    vec![step("vm-agent", Some(1), 2, "not-run")],
                ),
                server(3, "failed", vec![step("vm-agent", Some(1), 2, "failed")]),
                no_uuid,
                server(5, "succeeded", vec![step("vm-agent", None, 2, "done")]),
                server(
                    6,
                    "succeeded",
                    vec![step("no such agent", Some(1), 2, "done")],
                ),
                server(
                    7,
                    "not-started",
                    vec![step("vm-agent", Some(1), 2, "not-run")],
                ),
            ],
            ..HistoryEntry::default()
        };
        let r = revert_request(&run, &[]).unwrap();
        let changes: Vec<(&str, bool)> = r
            .changes
            .iter()
            .map(|c| (c.hostname.as_str(), c.settled))
            .collect();
        assert_eq!(changes, [("cn1", true), ("cn2", false)]);
        let left: Vec<(&str, &str)> = r
            .left_out
            .iter()
            .map(|l| (l.hostname.as_str(), l.why.as_str()))
            .collect();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left[0].0 == "cn4" && left[0].1.contains("no server UUID"));
        assert!(left[1].0 == "cn5" && left[1].1.contains("did not record the image before"));
        assert!(left[2].0 == "cn6" && left[2].1.contains("no known component"));
    }
}
