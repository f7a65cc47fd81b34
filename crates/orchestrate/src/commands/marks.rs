//! `disable`/`enable` and `hold`/`release` as one [`Planner`] for the one
//! [`crate::run::Run`] (issue 31): each call gathers anew and plans
//! through [`agentsadm_plan::plan_disable`] or [`agentsadm_plan::plan_hold`]
//! (a hold writes SAPI only: instance params for servers, service params
//! datacenter-wide), so every mark is made with `-n`, `-y`, the lock and a
//! history entry like every change; every later plan honours a hold.

use agentsadm_api::Apis;
use agentsadm_plan::{Mark, Operation, Plan, PlanOptions, PlanningInput, Request};
use agentsadm_types::catalog::Catalog;

use crate::carriers::gather;
use crate::carriers::images::{self, ImageChoice, ImageSources};
use crate::commands::session::SessionError;
use crate::runner::run::Planner;

/// `disable`, `hold` (`mark`), `enable` or `release` (`None`), as the
/// request's operation says, as a run's planner.
pub struct MarkPlanner<'a> {
    pub apis: &'a Apis,
    pub catalog: &'a Catalog,
    pub request: Request,
    pub mark: Option<Mark>,
    pub options: PlanOptions,
}

impl Planner for MarkPlanner<'_> {
    type Planned = Plan;
    type Error = SessionError;

    async fn plan(&self) -> Result<Plan, SessionError> {
        let (intent, reality) = gather::gather(self.apis, self.catalog).await?;
        // No image moves, but `gz disable|enable` are newer words: the
        // agentsadm a server with an older copy gets first is resolved as
        // for every request.
        let images = images::resolve(
            self.catalog,
            &[],
            ImageChoice::Intent,
            ImageSources {
                dc: &self.apis.imgapi,
                updates: None,
            },
            &intent,
        )
        .await?;
        let input = PlanningInput {
            catalog: self.catalog,
            intent: &intent,
            reality: &reality,
            request: &self.request,
            options: self.options,
            images: &images,
            durations: None,
        };
        Ok(match self.request.operation {
            Operation::Hold | Operation::Release => {
                agentsadm_plan::plan_hold(&input, self.mark.as_ref())?
            }
            _ => agentsadm_plan::plan_disable(&input, self.mark.as_ref())?,
        })
    }
}
