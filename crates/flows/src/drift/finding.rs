//! What the finder reports: a [`Finding`] of a stable [`FindingKind`],
//! with the [`Fix`] it proposes; and the labels its sentences use.

use std::fmt::Write as _;

use serde::Serialize;

use agentsadm_types::ids::ImageUuid;

use agentsadm_types::ids::InstanceUuid;

use agentsadm_types::ids::ServerUuid;

use agentsadm_plan::ImageRef;
use agentsadm_plan::TransportKind;
use agentsadm_plan::reality::Installed;
use agentsadm_plan::reality::ServerState;
use agentsadm_types::ids::ServiceUuid;

use super::DriftInput;
use agentsadm_types::output::short;

/// What kind of drift a finding is. The kebab-case names are the stable
/// `kind` field of `agentsadm check --json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A SAPI instance says the server has the component; the server does
    /// not report it.
    MissingInstall,
    /// The server runs another image than its instance's `params.image_uuid`.
    WrongImage,
    /// The server runs the component but SAPI has no instance for it (or
    /// one with another UUID than the server keeps).
    InstalledWithoutInstance,
    /// An instance whose server CNAPI does not know (deleted), or that no
    /// server can be found for.
    InstanceForMissingServer,
    /// An instance of a server that is not set up (factory reset, never
    /// set up).
    InstanceForUnsetupServer,
    /// An instance without `params.server_uuid` / `params.image_uuid`.
    InstanceWithoutParams,
    /// A second instance for one (server, component).
    DuplicateInstance,
    /// CNAPI `server.agents` differs from what the server itself reports.
    StaleCnapiReport,
    /// An agent service without `params.image_uuid`: new servers get nothing.
    ServiceWithoutDefaultImage,
    /// An agent service whose `params.image_uuid` is not in the datacenter
    /// IMGAPI: setting up a new server would fail.
    DefaultImageNotInImgapi,
    /// Installed but agentsadm does not manage it (no SAPI service, or not
    /// a catalog component). Informational.
    UnmanagedComponent,
    /// SAPI says disabled here (`agentsadm disable`); the server's report
    /// (`--live`) has a service of it not disabled.
    RunningWhereDisabled,
    /// Every service of it is disabled on the server, but SAPI does not
    /// say so: the next upgrade's postinstall would turn it back on.
    DisabledWithoutIntent,
    /// An instance this server reports whose `params.server_uuid` names
    /// another server: its params are corrected, never the instance
    /// deleted.
    InstanceNamesOtherServer,
    /// What CNAPI lists for the server cannot be used (a malformed entry,
    /// a component listed twice): the server is set aside.
    UnusableServerAgents,
    /// The instance lost what agentsadm recorded on it: it was re-adopted
    /// bare outside any agentsadm run (an agent's postinstall, CNAPI's
    /// install-agent path, another tool), so it no longer says which
    /// image the server runs, or a mark the service's ledger keeps is
    /// gone from it.
    InstanceParamsErased,
    /// A per-server mark (hold, disabled) only the instance keeps: its
    /// second copy on the service is missing (written by an agentsadm
    /// before it kept two), so a bare re-adoption would erase it.
    /// Informational: the copy is a migration agentsadm owes itself, which
    /// the next changing run makes under the lock (`crate::drift` says why
    /// in [`FindingKind::is_informational`]).
    MarkKeptOnce,
}

impl FindingKind {
    /// Every kind, in report order.
    pub const ALL: [FindingKind; 17] = [
        FindingKind::MissingInstall,
        FindingKind::WrongImage,
        FindingKind::InstalledWithoutInstance,
        FindingKind::InstanceForMissingServer,
        FindingKind::InstanceForUnsetupServer,
        FindingKind::InstanceWithoutParams,
        FindingKind::DuplicateInstance,
        FindingKind::StaleCnapiReport,
        FindingKind::ServiceWithoutDefaultImage,
        FindingKind::DefaultImageNotInImgapi,
        FindingKind::UnmanagedComponent,
        FindingKind::RunningWhereDisabled,
        FindingKind::DisabledWithoutIntent,
        FindingKind::InstanceNamesOtherServer,
        FindingKind::UnusableServerAgents,
        FindingKind::InstanceParamsErased,
        FindingKind::MarkKeptOnce,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            FindingKind::MissingInstall => "missing-install",
            FindingKind::WrongImage => "wrong-image",
            FindingKind::InstalledWithoutInstance => "installed-without-instance",
            FindingKind::InstanceForMissingServer => "instance-for-missing-server",
            FindingKind::InstanceForUnsetupServer => "instance-for-unsetup-server",
            FindingKind::InstanceWithoutParams => "instance-without-params",
            FindingKind::DuplicateInstance => "duplicate-instance",
            FindingKind::StaleCnapiReport => "stale-cnapi-report",
            FindingKind::ServiceWithoutDefaultImage => "service-without-default-image",
            FindingKind::DefaultImageNotInImgapi => "default-image-not-in-imgapi",
            FindingKind::UnmanagedComponent => "unmanaged-component",
            FindingKind::RunningWhereDisabled => "running-where-disabled",
            FindingKind::DisabledWithoutIntent => "disabled-without-intent",
            FindingKind::InstanceNamesOtherServer => "instance-names-other-server",
            FindingKind::UnusableServerAgents => "unusable-server-agents",
            FindingKind::InstanceParamsErased => "instance-params-erased",
            FindingKind::MarkKeptOnce => "mark-kept-once",
        }
    }

    /// Informational kinds never make `check` exit 2.
    ///
    /// A mark kept once is one of them: the mark holds (plans read it from
    /// the instance) and nothing is wrong with the datacenter; only its
    /// spare copy is missing, because an earlier agentsadm did not keep
    /// one. Every run that changes anything copies such marks under the
    /// lock before its plan is made again (the orchestrator's
    /// `runner::ledger`), and `check --fix` copies them now. Making it
    /// drift would turn `check` red on every datacenter with marks the
    /// day agentsadm is upgraded, for a migration agentsadm owes itself.
    pub fn is_informational(&self) -> bool {
        matches!(
            self,
            FindingKind::UnmanagedComponent | FindingKind::MarkKeptOnce
        )
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The repair a finding proposes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Fix {
    /// Install the component on the server (an orchestrator step). The
    /// stale instance, if any, is replaced by the one the install creates.
    Install {
        image: ImageRef,
        transport: TransportKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        replaces: Option<InstanceUuid>,
    },
    /// Upgrade (or downgrade) to the intended image (an orchestrator step).
    Upgrade {
        image: ImageRef,
        transport: TransportKind,
    },
    /// Create the SAPI instance the server keeps, with params; delete the
    /// instance it replaces.
    AdoptInstance {
        instance: InstanceUuid,
        service: ServiceUuid,
        image: ImageUuid,
        #[serde(skip_serializing_if = "Option::is_none")]
        replaces: Option<InstanceUuid>,
    },
    /// Set `params.server_uuid` and `params.image_uuid` on the instance.
    SetParams {
        instance: InstanceUuid,
        service: ServiceUuid,
        image: ImageUuid,
    },
    /// Write the instance whole, in one write: `params.server_uuid`,
    /// `params.image_uuid` and the marks agentsadm keeps for it.
    Restore {
        instance: InstanceUuid,
        service: ServiceUuid,
        image: ImageUuid,
        #[serde(skip_serializing_if = "Option::is_none")]
        hold: Option<agentsadm_plan::Mark>,
        #[serde(skip_serializing_if = "Option::is_none")]
        disabled: Option<agentsadm_plan::Mark>,
    },
    /// Write the mark's second copy on the service (and the instance's
    /// again: the same value).
    KeepMark {
        instance: InstanceUuid,
        service: ServiceUuid,
        key: agentsadm_plan::MarkKey,
        mark: agentsadm_plan::Mark,
    },
    /// Delete the SAPI instance (only the record: SAPI never touches a
    /// server for agent instances).
    DeleteInstance { instance: InstanceUuid },
    /// Set the service's `params.image_uuid`.
    SetServiceDefault {
        service: ServiceUuid,
        image: ImageRef,
    },
    /// Post the server's own report to CNAPI as `server.agents`.
    PostLiveReport,
    /// Disable the component's services again (`gz disable`, an
    /// orchestrator step), as SAPI's mark says.
    Disable { mark: agentsadm_plan::Mark },
    /// Nothing automatic: what the operator can do.
    Manual { hint: String },
    /// Informational; nothing to fix.
    None,
}

impl Fix {
    /// Whether `check --fix` can carry it out.
    pub fn is_automatic(&self) -> bool {
        !matches!(self, Fix::Manual { .. } | Fix::None)
    }

    /// One phrase for humans.
    pub fn describe(&self) -> String {
        match self {
            Fix::Install {
                image,
                transport,
                replaces,
            } => {
                let mut s = format!("install {} [{}]", image_label(image), transport.as_str());
                if let Some(old) = replaces {
                    let _ = write!(
                        s,
                        ", then delete SAPI instance {} (replaced by the instance the install creates)",
                        short(old)
                    );
                }
                s
            }
            Fix::Upgrade { image, transport } => {
                format!("update to {} [{}]", image_label(image), transport.as_str())
            }
            Fix::AdoptInstance {
                instance,
                image,
                replaces,
                ..
            } => {
                let mut s = format!(
                    "create SAPI instance {} with params (image_uuid {})",
                    short(instance),
                    short(image)
                );
                if let Some(old) = replaces {
                    let _ = write!(s, " and delete SAPI instance {}", short(old));
                }
                s
            }
            Fix::SetParams {
                instance, image, ..
            } => format!(
                "set params.server_uuid and params.image_uuid {} on SAPI instance {}",
                short(image),
                short(instance)
            ),
            Fix::Restore {
                instance,
                image,
                hold,
                disabled,
                ..
            } => {
                let mut s = format!(
                    "write SAPI instance {} whole in one write: params.server_uuid, params.image_uuid {}",
                    short(instance),
                    short(image)
                );
                if hold.is_some() {
                    s.push_str(", the hold");
                }
                if disabled.is_some() {
                    s.push_str(", the disabled mark");
                }
                s
            }
            Fix::KeepMark { key, .. } => format!(
                "copy params.{} to the service (params.{}:SERVER), where no re-adoption erases it",
                key.param(),
                key.param()
            ),
            Fix::DeleteInstance { instance } => {
                format!("delete SAPI instance {}", short(instance))
            }
            Fix::SetServiceDefault { image, .. } => {
                format!("set the service default image to {}", image_label(image))
            }
            Fix::PostLiveReport => {
                "post the server's own report to CNAPI as server.agents".to_string()
            }
            Fix::Disable { mark } => format!(
                "disable its services again (gz disable through execute), as SAPI says ({})",
                mark.describe()
            ),
            Fix::Manual { hint } => format!("manual: {hint}"),
            Fix::None => "none (informational)".to_string(),
        }
    }
}

/// One mismatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The server it is about (for `instance-for-missing-server`, the one
    /// `params.server_uuid` names, which CNAPI does not know).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The SAPI instance concerned, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceUuid>,
    pub details: String,
    pub fix: Fix,
    /// Informational findings do not count as drift (exit status 0).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub informational: bool,
}

/// A finding about one component on one server.
pub(super) fn finding(
    kind: FindingKind,
    state: &ServerState,
    component: &str,
    instance: Option<InstanceUuid>,
    details: String,
    fix: Fix,
) -> Finding {
    Finding {
        kind,
        server: Some(state.uuid),
        hostname: Some(state.hostname.clone()),
        component: Some(component.to_string()),
        instance,
        details,
        fix,
        informational: kind.is_informational(),
    }
}

pub(super) fn image_label(i: &ImageRef) -> String {
    format!("{} ({})", i.version, short(&i.uuid))
}

pub(super) fn image_of(input: &DriftInput, uuid: ImageUuid) -> String {
    match input.images.get(&uuid) {
        Some(r) => image_label(r),
        None => format!("image {} (not in IMGAPI)", short(&uuid)),
    }
}

pub(super) fn version_label(i: &Installed) -> String {
    match i.image {
        Some(img) => format!("{} ({})", i.version, short(&img)),
        None => i.version.to_string(),
    }
}

pub(super) fn installed_label(i: &Installed) -> String {
    let mut s = version_label(i);
    if let Some(inst) = i.instance {
        let _ = write!(s, " instance {}", short(&inst));
    }
    s
}
