//! Skips: what the request selected but the plan leaves alone, with the
//! reason and whether it leaves the datacenter short of what was asked
//! (`blocking`, exit status 2); and the builders the planners use.

use serde::Serialize;

use super::request::PlanningInput;
use crate::marks::HoldScope;
use crate::reality::ServerState;
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

/// Why something selected is left alone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum SkipReason {
    /// Excluded with `-x`.
    Excluded,
    /// CNAPI `setup: false`.
    NotSetup,
    /// CNAPI `status` is not `running`, and the server has changes pending.
    NotRunning { status: String },
    /// `update` of a component the server does not have.
    ComponentAbsent,
    /// The component has no SAPI service.
    Unmanaged,
    /// Not updated by `--all` (marlin-agent); name it to update it.
    NotBulk,
    /// `--latest` found no image for the component.
    NoImageAvailable { looked_in: String },
    /// Neither the request nor SAPI names an image for this server.
    NoTargetImage,
    /// SAPI intends an image that is not in the datacenter IMGAPI.
    ImageNotInDc { image: ImageUuid },
    /// `install` of a component the server already has.
    AlreadyInstalled { version: String },
    /// `remove` of a component the server does not have.
    NotInstalled,
    /// `--transport install-agent` cannot carry this component kind.
    TransportUnsupported { kind: String },
    /// The component needs CNAPI execute (`agentsadm gz` on the server),
    /// which a mockcloud CN does not have.
    NoExecute,
    /// `--latest` found an older version than the server runs.
    NewerInstalled { version: String, latest: String },
    /// The component is held here (`agentsadm hold`). `named`: the
    /// operator named the server, and the hold refuses it (blocking)
    /// unless `--ignore-holds`.
    Held {
        scope: HoldScope,
        /// Who held it, when and why.
        hold: Box<crate::marks::Mark>,
        named: bool,
    },
    /// `revert`: no longer what the reverted run left (`now`), changed
    /// since `by` a later run (or outside agentsadm).
    /// (`by` boxed: keeps [`Skip`] small enough to return by value.)
    ChangedSince { now: String, by: Box<str> },
    /// `revert`: the server is no longer in CNAPI.
    ServerGone,
    /// `revert`: the run's record does not say enough to put `component`
    /// back (boxed strings: a skip stays small).
    NotRecorded { component: Box<str>, why: Box<str> },
    /// The server's `server.agents` cannot be used (a malformed entry, a
    /// component listed twice): set aside, every other server goes on.
    Quarantined { problem: String },
    /// The server's agentsadm cannot parse the step, and there is no
    /// agentsadm image new enough to give it first (boxed: a skip stays
    /// small).
    AgentsadmTooOld(Box<AgentsadmShort>),
}

/// What a server's agentsadm is, and what a step needs of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct AgentsadmShort {
    /// A version, `version unknown` or `none`.
    pub have: String,
    /// The oldest version that parses the step.
    pub need: String,
}

impl SkipReason {
    /// One phrase saying why, and what to do about it.
    pub fn describe(&self) -> String {
        match self {
            SkipReason::Excluded => "excluded with -x".to_string(),
            SkipReason::NotSetup => "server is not set up".to_string(),
            SkipReason::NotRunning { status } => format!(
                "server is not running (CNAPI status {status:?}); re-run once it is back"
            ),
            SkipReason::ComponentAbsent => {
                "component is not installed (use 'agentsadm install' to add it)".to_string()
            }
            SkipReason::Unmanaged => {
                "component has no SAPI service, so it is unmanaged (run 'agentsadm adopt')"
                    .to_string()
            }
            SkipReason::NotBulk => {
                "never updated in bulk (restarting it aborts running Manta jobs); name it to update it"
                    .to_string()
            }
            SkipReason::NoImageAvailable { looked_in } => {
                format!("no image found in {looked_in}")
            }
            SkipReason::NoTargetImage => {
                "SAPI names no image for it (pass --image or --latest)".to_string()
            }
            SkipReason::ImageNotInDc { image } => format!(
                "intended image {image} is not in the datacenter IMGAPI (pass --image or --latest to import one)"
            ),
            SkipReason::AlreadyInstalled { version } => {
                format!("already installed ({version}); use 'agentsadm update' to change it")
            }
            SkipReason::NotInstalled => "not installed and no SAPI instance".to_string(),
            SkipReason::Quarantined { problem } => format!(
                "set aside: what CNAPI lists for it cannot be used ({problem}); 'agentsadm check' says what to do"
            ),
            SkipReason::NewerInstalled { version, latest } => format!(
                "runs {version}, newer than the latest image found ({latest}); pass --image to downgrade"
            ),
            SkipReason::NoExecute => {
                "needs CNAPI execute, which mockcloud servers do not have; skipped".to_string()
            }
            SkipReason::Held { scope, hold, named } => {
                let what = if *named {
                    "pass --ignore-holds -y to change it anyway"
                } else {
                    "'agentsadm release' lets it move"
                };
                format!("held {} {}; {what}", scope.as_str(), hold.describe())
            }
            SkipReason::AgentsadmTooOld(short) => format!(
                "its agentsadm ({}) cannot run this step, which needs {} or later, and the datacenter IMGAPI has no agentsadm image that new: run 'agentsadm self-update' on the headnode, then plan again",
                short.have, short.need
            ),
            SkipReason::ChangedSince { now, by } => {
                format!("changed since by {by}: {now}; left as it is")
            }
            SkipReason::ServerGone => "server is no longer in CNAPI".to_string(),
            SkipReason::NotRecorded { component, why } => {
                format!("{component} not put back: {why}")
            }
            SkipReason::TransportUnsupported { kind } => format!(
                "cn-agent's install-agent task cannot install {kind} components (use --transport auto)"
            ),
        }
    }
}

/// A server and/or component left alone, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Skip {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentName>,
    #[serde(flatten)]
    pub reason: SkipReason,
    /// Whether this leaves the request unfulfilled (exit status 2).
    pub blocking: bool,
}

/// A skip of a whole server.
pub(super) fn server_skip(
    input: &PlanningInput,
    server: ServerUuid,
    reason: SkipReason,
    blocking: bool,
) -> Skip {
    Skip {
        server: Some(server),
        hostname: input.reality.get(&server).map(|s| s.hostname.clone()),
        component: None,
        reason,
        blocking,
    }
}

/// A skip of a component on every server.
pub(super) fn component_skip(
    component: &ComponentName,
    reason: SkipReason,
    blocking: bool,
) -> Skip {
    Skip {
        server: None,
        hostname: None,
        component: Some(component.clone()),
        reason,
        blocking,
    }
}

/// A skip of one component on one server.
pub(super) fn server_component_skip(
    input: &PlanningInput,
    server: ServerUuid,
    component: &ComponentName,
    reason: SkipReason,
    blocking: bool,
) -> Skip {
    Skip {
        component: Some(component.clone()),
        ..server_skip(input, server, reason, blocking)
    }
}

/// A blocking skip for a server that is not running, so nothing can run on
/// it; `None` when it is running.
pub(super) fn not_running_skip(
    input: &PlanningInput,
    server: ServerUuid,
    state: &ServerState,
) -> Option<Skip> {
    (!state.is_running()).then(|| {
        server_skip(
            input,
            server,
            SkipReason::NotRunning {
                status: state.status.clone(),
            },
            true,
        )
    })
}
