//! `update`, `install` and `remove` against a datacenter's APIs, as library
//! calls: gather, resolve images, plan ([`Session::plan`], or
//! [`RequestPlanner`] for [`crate::run::Run`]). Carrying a plan out is the
//! run's alone (the lock, the plan made again under it, the question or
//! `-y`, history): the command line, the demo, the simulator-backed tests
//! and the benchmarks all give a [`RequestPlanner`] (or the plan they
//! made) to [`crate::run::Run::go`], so they exercise the same path.
//!
//! ```no_run
//! # async fn f(apis: agentsadm_api::Apis) -> Result<(), Box<dyn std::error::Error>> {
//! use agentsadm_types::catalog::Catalog;
//! use agentsadm_orchestrate::images::ImageChoice;
//! use agentsadm_plan::*;
//! use agentsadm_orchestrate::session::Session;
//! let catalog = Catalog::builtin();
//! let session = Session { apis: &apis, catalog: &catalog, updates: None };
//! let request = Request {
//!     operation: Operation::Update,
//!     components: ComponentSelection::Named(vec!["vm-agent".parse()?]),
//!     servers: ServerSelection::All,
//!     exclude: vec![],
//! };
//! let planned = session.plan(&request, ImageChoice::Latest, TransportMode::Auto).await?;
//! println!("{}", planned.plan);
//! # Ok(()) }
//! ```

use crate::executor::execute::ExecError;

use crate::carriers::gather;
use crate::carriers::gather::GatherError;
use crate::carriers::gather::ServersOverlay;
use crate::carriers::images;
use crate::carriers::images::ImageChoice;
use crate::carriers::images::ImageError;
use crate::carriers::images::ImageSources;
use crate::runner::run::Planner;
use agentsadm_api::Apis;
use agentsadm_api::ImgapiClient;
use agentsadm_plan::ComponentSelection;
use agentsadm_plan::Plan;
use agentsadm_plan::PlanError;
use agentsadm_plan::PlanOptions;
use agentsadm_plan::PlanningInput;
use agentsadm_plan::Request;
use agentsadm_plan::ResolvedImages;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_plan::timing::Durations;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;

/// A run failed before or while starting; what failed says whether
/// anything was changed (only [`SessionError::Exec`] can come after
/// imports).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Gather(#[from] GatherError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// What planning produced, with the inputs it saw.
#[derive(Clone, Debug)]
pub struct Planned {
    pub plan: Plan,
    pub intent: Intent,
    pub reality: Reality,
    pub images: ResolvedImages,
}

/// A datacenter to orchestrate.
#[derive(Clone, Copy, Debug)]
pub struct Session<'a> {
    pub apis: &'a Apis,
    pub catalog: &'a Catalog,
    /// The updates server (with its channel), for `--latest`/`--image`
    /// from outside the datacenter.
    pub updates: Option<&'a ImgapiClient>,
}

impl Session<'_> {
    /// The components whose images a request needs resolved.
    pub fn components_in_play(&self, intent: &Intent, request: &Request) -> Vec<&Component> {
        match &request.components {
            ComponentSelection::All => self
                .catalog
                .iter()
                .filter(|c| c.bulk_update && intent.is_managed(&c.name))
                .collect(),
            ComponentSelection::Named(names) => {
                names.iter().filter_map(|n| self.catalog.get(n)).collect()
            }
        }
    }

    /// Gather intent and reality, resolve images, plan. Changes nothing.
    /// `options`: the transport mode (waves with the library's neutral
    /// rollout), or [`PlanOptions`] with the operator's rollout.
    pub async fn plan(
        &self,
        request: &Request,
        choice: ImageChoice,
        options: impl Into<PlanOptions>,
    ) -> Result<Planned, SessionError> {
        self.plan_with(request, choice, options, None).await
    }

    /// [`Session::plan`] with what servers took before (the run history,
    /// read before planning): the waves start the longest expected first
    /// and the plan shows the expected finish.
    pub async fn plan_with(
        &self,
        request: &Request,
        choice: ImageChoice,
        options: impl Into<PlanOptions>,
        durations: Option<&Durations>,
    ) -> Result<Planned, SessionError> {
        self.plan_over(request, choice, options, durations, None)
            .await
    }

    /// [`Session::plan_with`], reality read through `overlay` (what a
    /// headnode's disk says of sdcadm and gz-tools over CNAPI's stale
    /// registration): the plan moves what is there, not what CNAPI
    /// remembers.
    pub async fn plan_over(
        &self,
        request: &Request,
        choice: ImageChoice,
        options: impl Into<PlanOptions>,
        durations: Option<&Durations>,
        overlay: Option<&dyn ServersOverlay>,
    ) -> Result<Planned, SessionError> {
        let (intent, reality) = gather::gather_over(self.apis, self.catalog, overlay).await?;
        let components = self.components_in_play(&intent, request);
        let images = images::resolve(
            self.catalog,
            &components,
            choice,
            ImageSources {
                dc: &self.apis.imgapi,
                updates: self.updates,
            },
            &intent,
        )
        .await?;
        let plan = agentsadm_plan::plan(&PlanningInput {
            catalog: self.catalog,
            intent: &intent,
            reality: &reality,
            request,
            options: options.into(),
            images: &images,
            durations,
        })?;
        Ok(Planned {
            plan,
            intent,
            reality,
            images,
        })
    }
}

/// `update`, `install` or `remove` as a [`Planner`] for
/// [`crate::run::Run`]: each call gathers, resolves images and plans anew.
pub struct RequestPlanner<'a> {
    pub session: Session<'a>,
    pub request: Request,
    pub choice: ImageChoice,
    pub options: PlanOptions,
    /// What servers took before (read once, before the first plan, so
    /// that every plan of the run is made from the same history).
    pub durations: Option<Durations>,
    /// Read at each plan, over CNAPI's registrations (the command line
    /// gives this headnode's disk: sdcadm and gz-tools as sdcadm left
    /// them).
    pub overlay: Option<&'a dyn ServersOverlay>,
}

impl Planner for RequestPlanner<'_> {
    type Planned = Plan;
    type Error = SessionError;

    async fn plan(&self) -> Result<Plan, SessionError> {
        Ok(self
            .session
            .plan_over(
                &self.request,
                self.choice,
                self.options,
                self.durations.as_ref(),
                self.overlay,
            )
            .await?
            .plan)
    }
}
