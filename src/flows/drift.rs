//! The drift finder: a pure function of (catalog, SAPI services and
//! instances, CNAPI servers, optional live reports, images known to the
//! datacenter IMGAPI) that lists every mismatch between intent and reality,
//! each with the fix it proposes.
//!
//! - Reality is CNAPI `server.agents`; with `--live` the servers' own
//!   reports replace it where they could be read, and every difference
//!   between the two is a `stale-cnapi-report` finding.
//! - Intent is indexed by the orchestrator's own code
//!   ([`Intent::build`]), so check and update agree on what an instance
//!   means (legacy instances are tied to servers through the UUIDs servers
//!   report).
//! - A finding has a stable [`FindingKind`] (`--json` field `kind`), the
//!   server and component it is about, a sentence of details, and a [`Fix`].
//!   Fixes that change a server (install, upgrade) become orchestrator steps;
//!   the others are SAPI or CNAPI writes (see [`super::repair`]).
//! - No I/O, no clock, `BTreeMap`s only: the same input gives the same
//!   findings in the same order (datacenter-wide first, then by hostname,
//!   server UUID, component, kind).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::api::cnapi::Server;
use crate::api::sapi::{Instance, Service};
use crate::catalog::Catalog;
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid, ServiceUuid};
use crate::orchestrate::intent::{InstanceLink, Intent};
use crate::orchestrate::plan::{ImageRef, TransportKind, TransportMode};
use crate::orchestrate::reality::{Installed, Reality, ServerState};
use crate::remote::AgentsReport;

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
}

impl FindingKind {
    /// Every kind, in report order.
    pub const ALL: [FindingKind; 11] = [
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
        }
    }

    /// Informational kinds never make `check` exit 2.
    pub fn is_informational(&self) -> bool {
        *self == FindingKind::UnmanagedComponent
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
            Fix::DeleteInstance { instance } => {
                format!("delete SAPI instance {}", short(instance))
            }
            Fix::SetServiceDefault { image, .. } => {
                format!("set the service default image to {}", image_label(image))
            }
            Fix::PostLiveReport => {
                "post the server's own report to CNAPI as server.agents".to_string()
            }
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

/// Everything the finder reads. `live` is empty without `--live`;
/// `selection` limits server findings to some servers (and leaves out the
/// datacenter-wide ones).
#[derive(Clone, Copy, Debug)]
pub struct DriftInput<'a> {
    pub catalog: &'a Catalog,
    /// CNAPI ServerList with `extras=agents`.
    pub servers: &'a [Server],
    /// SAPI `type=agent` services.
    pub services: &'a [Service],
    /// SAPI `type=agent` instances.
    pub instances: &'a [Instance],
    /// `agentsadm gz report` of the servers that could be asked.
    pub live: &'a BTreeMap<ServerUuid, AgentsReport>,
    /// Images the datacenter IMGAPI has, by UUID.
    pub images: &'a BTreeMap<ImageUuid, ImageRef>,
    pub selection: Option<&'a BTreeSet<ServerUuid>>,
}

/// Intent and reality as the finder saw them (for repair planning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survey {
    /// What CNAPI says.
    pub cnapi: Reality,
    /// What is installed: CNAPI, replaced by live reports where read.
    pub reality: Reality,
    /// SAPI, indexed against `reality`.
    pub intent: Intent,
}

impl Survey {
    /// Index the answers. Live reports replace CNAPI's view of a server.
    pub fn build(input: &DriftInput) -> Survey {
        let cnapi = Reality::from_servers(input.catalog, input.servers);
        let effective: Vec<Server> = input
            .servers
            .iter()
            .map(|s| match input.live.get(&s.uuid) {
                Some(report) => Server {
                    agents: Some(report.agents.clone()),
                    sysinfo: None,
                    ..s.clone()
                },
                None => s.clone(),
            })
            .collect();
        let reality = Reality::from_servers(input.catalog, &effective);
        let intent = Intent::build(input.catalog, input.services, input.instances, &reality);
        Survey {
            cnapi,
            reality,
            intent,
        }
    }
}

/// Find every mismatch. Pure.
pub fn find(input: &DriftInput) -> (Survey, Vec<Finding>) {
    let survey = Survey::build(input);
    let mut out = Vec::new();
    let selected = |s: &ServerUuid| input.selection.is_none_or(|set| set.contains(s));
    let setting_up: BTreeSet<ServerUuid> = input
        .servers
        .iter()
        .filter(|s| s.setting_up == Some(true))
        .map(|s| s.uuid)
        .collect();

    for state in survey.reality.servers.values() {
        if !selected(&state.uuid) {
            continue;
        }
        if input.live.contains_key(&state.uuid)
            && let Some(cn) = survey.cnapi.get(&state.uuid)
        {
            stale_report(cn, state, &mut out);
        }
        if state.setup {
            server_findings(input, &survey, state, &mut out);
        } else if !setting_up.contains(&state.uuid) {
            // A server being set up gets its instances before CNAPI marks
            // it set up: they are not leftovers.
            unsetup_findings(&survey, state, &mut out);
        }
    }

    if input.selection.is_none() {
        // A legacy instance (no params) is only known to be an orphan when
        // every set-up server reports its instance UUIDs: one that reports
        // none (CNAPI's list cleared at setup, or only sysinfo's) may be
        // its owner.
        let silent: Vec<&str> = survey
            .reality
            .servers
            .values()
            .filter(|s| {
                s.setup
                    && (s.components.is_empty()
                        || s.components.values().any(|i| i.instance.is_none()))
            })
            .map(|s| s.hostname.as_str())
            .collect();
        for u in &survey.intent.unlinked {
            let details = match u.server {
                Some(s) => format!(
                    "SAPI instance {} names server {s} (params.server_uuid), which CNAPI does not know (deleted?)",
                    u.uuid
                ),
                None => format!(
                    "SAPI instance {} has no params.server_uuid and no server reports it",
                    u.uuid
                ),
            };
            out.push(Finding {
                kind: FindingKind::InstanceForMissingServer,
                server: u.server,
                hostname: None,
                component: Some(u.component.clone()),
                instance: Some(u.uuid),
                details,
                fix: if u.server.is_none() && !silent.is_empty() {
                    let mut names: Vec<&str> = silent.iter().copied().take(5).collect();
                    if silent.len() > 5 {
                        names.push("...");
                    }
                    Fix::Manual {
                        hint: format!(
                            "not deleted automatically: {} report no instance UUIDs ({}), so one of them may own it; run 'agentsadm check --live'",
                            if silent.len() == 1 { "a server does" } else { "some servers do" },
                            names.join(", ")
                        ),
                    }
                } else {
                    Fix::DeleteInstance { instance: u.uuid }
                },
                informational: false,
            });
        }
        service_findings(input, &survey, &mut out);
    }

    sort_findings(&survey, &mut out);
    (survey, out)
}

/// Datacenter-wide first, then by hostname, server, component, kind.
fn sort_findings(survey: &Survey, findings: &mut [Finding]) {
    let key = |f: &Finding| {
        let host = f
            .server
            .and_then(|s| survey.reality.get(&s))
            .map(|s| s.hostname.clone());
        (
            f.server.is_some(),
            // Known servers before servers CNAPI does not know.
            host.is_none(),
            host,
            f.server,
            f.component.clone(),
            f.kind,
            f.instance,
        )
    };
    findings.sort_by_key(key);
}

fn finding(
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

/// What a server that is not set up should not have: SAPI instances.
fn unsetup_findings(survey: &Survey, state: &ServerState, out: &mut Vec<Finding>) {
    let mut instances: Vec<(&str, InstanceUuid)> = survey
        .intent
        .instances
        .get(&state.uuid)
        .map(|per| per.iter().map(|(c, i)| (c.as_str(), i.uuid)).collect())
        .unwrap_or_default();
    instances.extend(
        survey
            .intent
            .duplicates
            .iter()
            .filter(|d| d.server == state.uuid)
            .map(|d| (d.component.as_str(), d.uuid)),
    );
    for (component, uuid) in instances {
        out.push(finding(
            FindingKind::InstanceForUnsetupServer,
            state,
            component,
            Some(uuid),
            format!(
                "SAPI instance {uuid} belongs to a server that is not set up (factory reset or never set up); setting it up creates new instances"
            ),
            Fix::DeleteInstance { instance: uuid },
        ));
    }
}

fn server_findings(
    input: &DriftInput,
    survey: &Survey,
    state: &ServerState,
    out: &mut Vec<Finding>,
) {
    let intent = &survey.intent;
    let per_server = intent.instances.get(&state.uuid);
    let mut names: BTreeSet<&str> = state.components.keys().map(String::as_str).collect();
    if let Some(per) = per_server {
        names.extend(per.keys().map(String::as_str));
    }
    for name in names {
        let installed = state.components.get(name);
        let instance = intent.instance(&state.uuid, name);
        let Some(service) = intent.services.get(name) else {
            if let Some(i) = installed {
                out.push(finding(
                    FindingKind::UnmanagedComponent,
                    state,
                    name,
                    None,
                    format!(
                        "{} is installed but has no SAPI agent service, so agentsadm leaves it alone ('agentsadm adopt' creates the service)",
                        version_label(i)
                    ),
                    Fix::None,
                ));
            }
            continue;
        };
        match (installed, instance) {
            (None, None) => {}
            (None, Some(inst)) => {
                let target = inst.image.or(service.default_image);
                let details = format!(
                    "SAPI instance {} says the server has it{}, but the server does not report it",
                    inst.uuid,
                    target
                        .map(|t| format!(" ({})", image_of(input, t)))
                        .unwrap_or_default()
                );
                let fix = match target {
                    None => Fix::Manual {
                        hint: format!(
                            "neither the instance nor the service names an image: delete the instance or run 'agentsadm install {name} -s {} --image UUID'",
                            state.hostname
                        ),
                    },
                    Some(t) => match step_fix(input, state, name, t) {
                        Ok((image, transport)) => Fix::Install {
                            image,
                            transport,
                            replaces: Some(inst.uuid),
                        },
                        Err(hint) => Fix::Manual { hint },
                    },
                };
                out.push(finding(
                    FindingKind::MissingInstall,
                    state,
                    name,
                    Some(inst.uuid),
                    details,
                    fix,
                ));
            }
            (Some(i), None) => {
                let image = i.image.or(service.default_image);
                let (details, fix) = match (i.instance, image) {
                    (Some(reported), Some(image)) => (
                        format!(
                            "{} runs with instance {reported}, which SAPI does not have",
                            version_label(i)
                        ),
                        Fix::AdoptInstance {
                            instance: reported,
                            service: service.uuid,
                            image,
                            replaces: None,
                        },
                    ),
                    (None, _) => (
                        format!(
                            "{} runs without an instance UUID, and SAPI has no instance for it",
                            version_label(i)
                        ),
                        Fix::Manual {
                            hint: format!(
                                "reinstall it so that it gets an instance UUID: 'agentsadm update {name} -s {} --image UUID'",
                                state.hostname
                            ),
                        },
                    ),
                    (Some(reported), None) => (
                        format!(
                            "{} runs with instance {reported}, which SAPI does not have",
                            version_label(i)
                        ),
                        Fix::Manual {
                            hint: format!(
                                "neither the server nor the service names an image: set the service default ('agentsadm update {name} --image UUID')"
                            ),
                        },
                    ),
                };
                out.push(finding(
                    FindingKind::InstalledWithoutInstance,
                    state,
                    name,
                    i.instance,
                    details,
                    fix,
                ));
            }
            (Some(i), Some(inst)) => {
                if let Some(reported) = i.instance
                    && reported != inst.uuid
                {
                    // The server keeps another UUID (a reinstall made a new
                    // one): config-agent asks SAPI for the server's UUID, so
                    // the instance SAPI has is of no use to it.
                    let image = inst.image.or(i.image).or(service.default_image);
                    let fix = match image {
                        Some(image) => Fix::AdoptInstance {
                            instance: reported,
                            service: service.uuid,
                            image,
                            replaces: Some(inst.uuid),
                        },
                        None => Fix::Manual {
                            hint: format!(
                                "no image is known for it: set the service default ('agentsadm update {name} --image UUID')"
                            ),
                        },
                    };
                    out.push(finding(
                        FindingKind::InstalledWithoutInstance,
                        state,
                        name,
                        Some(reported),
                        format!(
                            "{} runs with instance {reported}, but SAPI has instance {} for it",
                            version_label(i),
                            inst.uuid
                        ),
                        fix,
                    ));
                    continue;
                }
                if !inst.has_params() {
                    let missing = match (inst.link, inst.image) {
                        (InstanceLink::Reported, None) => {
                            "params.server_uuid and params.image_uuid"
                        }
                        (InstanceLink::Reported, Some(_)) => "params.server_uuid",
                        (InstanceLink::Params, _) => "params.image_uuid",
                    };
                    let image = inst.image.or(i.image).or(service.default_image);
                    let fix = match image {
                        Some(image) => Fix::SetParams {
                            instance: inst.uuid,
                            service: service.uuid,
                            image,
                        },
                        None => Fix::Manual {
                            hint: format!(
                                "no image is known for it: set the service default ('agentsadm update {name} --image UUID')"
                            ),
                        },
                    };
                    out.push(finding(
                        FindingKind::InstanceWithoutParams,
                        state,
                        name,
                        Some(inst.uuid),
                        format!("SAPI instance {} has no {missing}", inst.uuid),
                        fix,
                    ));
                }
                if let Some(target) = inst.image
                    && i.image != Some(target)
                {
                    let fix = match step_fix(input, state, name, target) {
                        Ok((image, transport)) => Fix::Upgrade { image, transport },
                        Err(hint) => Fix::Manual { hint },
                    };
                    out.push(finding(
                        FindingKind::WrongImage,
                        state,
                        name,
                        Some(inst.uuid),
                        format!(
                            "runs {}, its SAPI instance names {}",
                            version_label(i),
                            image_of(input, target)
                        ),
                        fix,
                    ));
                }
            }
        }
    }
    for d in intent.duplicates.iter().filter(|d| d.server == state.uuid) {
        let kept = intent
            .instance(&state.uuid, &d.component)
            .map(|i| i.uuid.to_string())
            .unwrap_or_default();
        out.push(finding(
            FindingKind::DuplicateInstance,
            state,
            &d.component,
            Some(d.uuid),
            format!(
                "SAPI has a second instance {} for it (instance {kept} is kept)",
                d.uuid
            ),
            Fix::DeleteInstance { instance: d.uuid },
        ));
    }
    for f in &state.foreign {
        out.push(finding(
            FindingKind::UnmanagedComponent,
            state,
            &f.name,
            None,
            format!(
                "{} {} is installed but is not an agentsadm component",
                f.name, f.version
            ),
            Fix::None,
        ));
    }
}

/// An install or upgrade step of `component` to `image` on the server, or
/// why it cannot be done automatically.
fn step_fix(
    input: &DriftInput,
    state: &ServerState,
    component: &str,
    image: ImageUuid,
) -> Result<(ImageRef, TransportKind), String> {
    let Some(c) = input.catalog.get(component) else {
        return Err(format!("{component} is not a catalog component"));
    };
    let Some(image_ref) = input.images.get(&image) else {
        return Err(format!(
            "image {image} is not in the datacenter IMGAPI: import it, or point the instance at another image with 'agentsadm update {component} -s {} --image UUID'",
            state.hostname
        ));
    };
    if !c.bulk_update && state.components.contains_key(component) {
        return Err(format!(
            "restarting {component} aborts running work, so check never does it: run 'agentsadm update {component} -s {}' when convenient",
            state.hostname
        ));
    }
    if !state.is_running() {
        return Err(format!(
            "the server is not running (CNAPI status {:?}); re-run 'agentsadm check --fix' once it is back",
            state.status
        ));
    }
    let transport = TransportKind::choose(c.kind, TransportMode::Auto)
        .ok_or_else(|| format!("no transport can install {component}"))?;
    Ok((image_ref.clone(), transport))
}

/// CNAPI's view against the server's own report, component by component
/// (catalog components by component name, other packages by name).
fn stale_report(cnapi: &ServerState, live: &ServerState, out: &mut Vec<Finding>) {
    let mut diffs: BTreeMap<String, String> = BTreeMap::new();
    let names: BTreeSet<&String> = cnapi
        .components
        .keys()
        .chain(live.components.keys())
        .collect();
    for name in names {
        let detail = match (cnapi.components.get(name), live.components.get(name)) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) => format!(
                "CNAPI lists {} but the server reports {}",
                installed_label(a),
                installed_label(b)
            ),
            (Some(a), None) => format!(
                "CNAPI lists {} but the server does not have it",
                installed_label(a)
            ),
            (None, Some(b)) => format!(
                "the server reports {} but CNAPI does not list it",
                installed_label(b)
            ),
            (None, None) => continue,
        };
        diffs.insert(name.clone(), detail);
    }
    let index = |list: &[crate::api::cnapi::AgentEntry]| -> BTreeMap<String, String> {
        list.iter()
            .map(|a| (a.name.clone(), a.version.clone()))
            .collect()
    };
    let (cn_foreign, live_foreign) = (index(&cnapi.foreign), index(&live.foreign));
    for (name, version) in &cn_foreign {
        match live_foreign.get(name) {
            Some(v) if v == version => {}
            Some(v) => {
                diffs.insert(
                    name.clone(),
                    format!("CNAPI lists {version} but the server reports {v}"),
                );
            }
            None => {
                diffs.insert(
                    name.clone(),
                    format!("CNAPI lists {version} but the server does not have it"),
                );
            }
        }
    }
    for (name, version) in &live_foreign {
        if !cn_foreign.contains_key(name) {
            diffs.insert(
                name.clone(),
                format!("the server reports {version} but CNAPI does not list it"),
            );
        }
    }
    for (name, detail) in diffs {
        out.push(finding(
            FindingKind::StaleCnapiReport,
            live,
            &name,
            None,
            detail,
            Fix::PostLiveReport,
        ));
    }
}

/// Agent services without a usable default image.
fn service_findings(input: &DriftInput, survey: &Survey, out: &mut Vec<Finding>) {
    for (name, svc) in &survey.intent.services {
        let candidate = default_candidate(&survey.reality, name);
        let (kind, details) = match svc.default_image {
            None => (
                FindingKind::ServiceWithoutDefaultImage,
                "the SAPI service has no params.image_uuid, so new servers do not get it"
                    .to_string(),
            ),
            Some(d) if !input.images.contains_key(&d) => (
                FindingKind::DefaultImageNotInImgapi,
                format!(
                    "the SAPI service's params.image_uuid {d} is not in the datacenter IMGAPI, so setting up a server would fail"
                ),
            ),
            Some(_) => continue,
        };
        let fix = match candidate.and_then(|c| input.images.get(&c)) {
            Some(image) if Some(image.uuid) != svc.default_image => Fix::SetServiceDefault {
                service: svc.uuid,
                image: image.clone(),
            },
            _ => Fix::Manual {
                hint: match svc.default_image {
                    Some(d) => format!(
                        "import image {d} into the datacenter IMGAPI, or set another default with 'agentsadm update {name} --image UUID'"
                    ),
                    None => format!(
                        "no server runs an image of it that the datacenter IMGAPI has: 'agentsadm update {name} --latest' sets one"
                    ),
                },
            },
        };
        out.push(Finding {
            kind,
            server: None,
            hostname: None,
            component: Some(name.clone()),
            instance: None,
            details,
            fix,
            informational: false,
        });
    }
}

/// The image a service default should be: the headnode's, else the one
/// most set-up servers run (ties: the smallest UUID), like adoption.
pub fn default_candidate(reality: &Reality, component: &str) -> Option<ImageUuid> {
    let mut counts: BTreeMap<ImageUuid, usize> = BTreeMap::new();
    for s in reality.servers.values().filter(|s| s.setup) {
        if let Some(image) = s.components.get(component).and_then(|i| i.image) {
            if s.headnode {
                return Some(image);
            }
            *counts.entry(image).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|(i, _)| i)
}

fn short(u: &impl ToString) -> String {
    u.to_string().chars().take(8).collect()
}

fn image_label(i: &ImageRef) -> String {
    format!("{} ({})", i.version, short(&i.uuid))
}

fn image_of(input: &DriftInput, uuid: ImageUuid) -> String {
    match input.images.get(&uuid) {
        Some(r) => image_label(r),
        None => format!("image {} (not in IMGAPI)", short(&uuid)),
    }
}

fn version_label(i: &Installed) -> String {
    match i.image {
        Some(img) => format!("{} ({})", i.version, short(&img)),
        None => i.version.clone(),
    }
}

fn installed_label(i: &Installed) -> String {
    let mut s = version_label(i);
    if let Some(inst) = i.instance {
        let _ = write!(s, " instance {}", short(&inst));
    }
    s
}

/// Counts by kind, for summaries.
pub fn counts(findings: &[Finding]) -> BTreeMap<FindingKind, usize> {
    let mut out = BTreeMap::new();
    for f in findings {
        *out.entry(f.kind).or_default() += 1;
    }
    out
}

/// Whether any finding is drift (not informational).
pub fn has_drift(findings: &[Finding]) -> bool {
    findings.iter().any(|f| !f.informational)
}

/// The findings as operators read them: grouped by server, one line per
/// finding and one for its fix, then a summary line.
pub fn render(findings: &[Finding], servers_checked: usize) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        let _ = writeln!(
            out,
            "No drift found ({} checked).",
            plural(servers_checked, "server", "servers")
        );
        return out;
    }
    let mut current: Option<Option<ServerUuid>> = None;
    for f in findings {
        if current != Some(f.server) {
            current = Some(f.server);
            if !out.is_empty() {
                out.push('\n');
            }
            match (f.server, &f.hostname) {
                (None, _) => out.push_str("Datacenter:\n"),
                (Some(s), Some(h)) => {
                    let _ = writeln!(out, "{h} ({s}):");
                }
                (Some(s), None) => {
                    let _ = writeln!(out, "server {s} (not in CNAPI):");
                }
            }
        }
        let mark = if f.informational { "i" } else { "!" };
        let component = f
            .component
            .as_deref()
            .map(|c| format!(" {c}:"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {mark} {}{component} {}", f.kind, f.details);
        let _ = writeln!(out, "      fix: {}", f.fix.describe());
    }
    let drift = findings.iter().filter(|f| !f.informational).count();
    let info = findings.len() - drift;
    let fixable = findings.iter().filter(|f| f.fix.is_automatic()).count();
    let by_kind: Vec<String> = counts(findings)
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(
        out,
        "\n{} ({} informational) on {} checked: {}; {fixable} fixable with --fix.",
        plural(drift + info, "finding", "findings"),
        info,
        plural(servers_checked, "server", "servers"),
        by_kind.join(", ")
    );
    out
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
