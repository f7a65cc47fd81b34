//! Findings about one server: what it runs against what SAPI intends for
//! it, its instances if it is not set up, and (with `--live`) CNAPI's view
//! against the server's own report.

use agentsadm_types::component::ComponentName;
use std::collections::{BTreeMap, BTreeSet};

use super::finding::Finding;

use super::finding::FindingKind;

use super::finding::Fix;

use super::finding::finding;

use super::finding::image_of;

use super::finding::installed_label;

use super::DriftInput;
use super::Survey;
use super::finding::version_label;
use agentsadm_plan::ImageRef;
use agentsadm_plan::TransportKind;
use agentsadm_plan::TransportMode;
use agentsadm_plan::intent::AgentService;
use agentsadm_plan::intent::InstanceIntent;
use agentsadm_plan::intent::InstanceLink;
use agentsadm_plan::reality::Installed;
use agentsadm_plan::reality::ServerState;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;

/// A server whose `server.agents` cannot be used: one finding naming the
/// field, and nothing else about it (no fix can be planned from what it
/// reports). Returns whether it was.
pub(super) fn quarantine_finding(state: &ServerState, out: &mut Vec<Finding>) -> bool {
    let Some(problem) = &state.quarantine else {
        return false;
    };
    out.push(Finding {
        kind: FindingKind::UnusableServerAgents,
        server: Some(state.uuid),
        hostname: Some(state.hostname.clone()),
        component: None,
        instance: None,
        details: format!(
            "what CNAPI lists for this server cannot be used ({problem}): it is left out of every plan and repair until that is fixed"
        ),
        fix: Fix::Manual {
            hint: format!(
                "restart cn-agent on the server ('svcs -x cn-agent'; it reports server.agents again), or post its own report with 'agentsadm check --live --fix -s {}'",
                state.uuid
            ),
        },
        informational: false,
    });
    true
}

/// What a server that is not set up should not have: SAPI instances.
pub(super) fn unsetup_findings(survey: &Survey, state: &ServerState, out: &mut Vec<Finding>) {
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

/// A set-up server's components, one by one, and its duplicate and
/// foreign entries.
pub(super) fn server_findings(
    input: &DriftInput,
    survey: &Survey,
    state: &ServerState,
    out: &mut Vec<Finding>,
) {
    let intent = &survey.intent;
    let per_server = intent.instances.get(&state.uuid);
    let mut names: BTreeSet<&str> = state.components.keys().map(ComponentName::as_str).collect();
    if let Some(per) = per_server {
        names.extend(per.keys().map(ComponentName::as_str));
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
        let c = ComponentOnServer {
            input,
            intent,
            state,
            name,
            service,
        };
        match (installed, instance) {
            (None, None) => {}
            (None, Some(inst)) => c.missing_install(inst, out),
            (Some(i), None) => c.installed_without_instance(i, out),
            (Some(i), Some(inst)) => c.installed_with_instance(i, inst, out),
        }
    }
    duplicate_and_foreign_findings(survey, state, out);
}

/// One catalog component of one set-up server, whose SAPI service exists.
#[derive(Clone, Copy)]
struct ComponentOnServer<'a> {
    input: &'a DriftInput<'a>,
    intent: &'a agentsadm_plan::intent::Intent,
    state: &'a ServerState,
    name: &'a str,
    service: &'a AgentService,
}

impl ComponentOnServer<'_> {
    /// The hold on the component here as SAPI has it: the instance's (or
    /// the ledger's copy of it), else the service's (datacenter-wide).
    fn hold(self) -> Option<agentsadm_plan::Mark> {
        self.intent
            .holds
            .get(&self.state.uuid, self.name)
            .map(|(_, m)| m.clone())
    }

    /// The instance lost what agentsadm recorded on it (see
    /// [`FindingKind::InstanceParamsErased`]): written back whole, with
    /// the image the instance named, else the one the server runs (what
    /// another tool put there is recorded, never reinstalled over), and
    /// the marks agentsadm keeps for it.
    fn erased(self, i: &Installed, inst: &InstanceIntent, out: &mut Vec<Finding>) {
        let ComponentOnServer {
            intent,
            state,
            name,
            service,
            ..
        } = self;
        let lost = intent.lost_marks(&state.uuid, name);
        let hold = intent
            .holds
            .servers
            .get(&state.uuid)
            .and_then(|h| h.get(name))
            .cloned();
        let disabled = intent.disabled(&state.uuid, name).cloned();
        let mut gone: Vec<String> = Vec::new();
        if inst.link == InstanceLink::Reported && inst.image.is_none() {
            gone.push(format!(
                "params.server_uuid and params.image_uuid (the server runs {})",
                version_label(i)
            ));
        }
        for key in lost {
            let (what, mark) = match key {
                agentsadm_plan::MarkKey::Hold => ("the hold", hold.as_ref()),
                agentsadm_plan::MarkKey::Disabled => ("the disabled mark", disabled.as_ref()),
            };
            gone.push(match mark {
                Some(m) => format!("{what} ({})", m.describe()),
                None => what.to_string(),
            });
        }
        let details = format!(
            "SAPI instance {} lost what agentsadm recorded on it: {}; it was re-adopted bare outside agentsadm (an agent's postinstall, CNAPI's install-agent or another tool replaces the whole record)",
            inst.uuid,
            gone.join(", ")
        );
        let fix = match inst.image.or(i.image).or(service.default_image) {
            Some(image) => Fix::Restore {
                instance: inst.uuid,
                service: service.uuid,
                image,
                hold,
                disabled,
            },
            None => Fix::Manual {
                hint: format!(
                    "neither the server nor SAPI names an image: record it with 'agentsadm update {name} -s {} --image UUID'",
                    state.hostname
                ),
            },
        };
        out.push(finding(
            FindingKind::InstanceParamsErased,
            state,
            name,
            Some(inst.uuid),
            details,
            fix,
        ));
    }

    /// Each mark only the instance keeps: copied to the service.
    fn kept_once(self, inst: &InstanceIntent, out: &mut Vec<Finding>) {
        let ComponentOnServer {
            intent,
            state,
            name,
            service,
            ..
        } = self;
        for key in intent.single_copy(&state.uuid, name) {
            let (what, mark) = match key {
                agentsadm_plan::MarkKey::Hold => (
                    "hold",
                    intent
                        .holds
                        .servers
                        .get(&state.uuid)
                        .and_then(|h| h.get(name)),
                ),
                agentsadm_plan::MarkKey::Disabled => {
                    ("disabled mark", intent.disabled(&state.uuid, name))
                }
            };
            let Some(mark) = mark else {
                continue;
            };
            out.push(finding(
                FindingKind::MarkKeptOnce,
                state,
                name,
                Some(inst.uuid),
                format!(
                    "the {what} ({}) is kept only on SAPI instance {} (an earlier agentsadm, or a hand edit, kept no copy on the service): check --fix copies it to the service, where a bare re-adoption (an agent's postinstall) cannot erase it; after an upgrade from an earlier agentsadm the next changing run does it under the lock",
                    mark.describe(),
                    inst.uuid
                ),
                Fix::KeepMark {
                    instance: inst.uuid,
                    service: service.uuid,
                    key: *key,
                    mark: mark.clone(),
                },
            ));
        }
    }

    /// An instance's params set right: the image it, the server or the
    /// service names, in that order; with none known, what to do by hand.
    fn set_params_fix(self, i: &Installed, inst: &InstanceIntent) -> Fix {
        match inst.image.or(i.image).or(self.service.default_image) {
            Some(image) => Fix::SetParams {
                instance: inst.uuid,
                service: self.service.uuid,
                image,
            },
            None => Fix::Manual {
                hint: format!(
                    "no image is known for it: set the service default ('agentsadm update {} --image UUID')",
                    self.name
                ),
            },
        }
    }

    /// The server reports `inst`, whose `params.server_uuid` names
    /// another server (`named`): its params are corrected, never the
    /// instance deleted as the other's duplicate.
    fn misfiled(
        self,
        i: &Installed,
        inst: &InstanceIntent,
        named: agentsadm_types::ids::ServerUuid,
        out: &mut Vec<Finding>,
    ) {
        let ComponentOnServer { state, name, .. } = self;
        let fix = self.set_params_fix(i, inst);
        out.push(finding(
            FindingKind::InstanceNamesOtherServer,
            state,
            name,
            Some(inst.uuid),
            format!(
                "SAPI instance {} names server {named} (params.server_uuid), but this server reports it and no other does",
                inst.uuid
            ),
            fix,
        ));
    }

    /// SAPI has an instance for it; the server does not report it.
    fn missing_install(self, inst: &InstanceIntent, out: &mut Vec<Finding>) {
        let ComponentOnServer {
            input,
            state,
            name,
            service,
            ..
        } = self;
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
                Err(blocked) => Fix::Manual {
                    hint: blocked.to_string(),
                },
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

    /// The server reports it; SAPI has no instance for it.
    fn installed_without_instance(self, i: &Installed, out: &mut Vec<Finding>) {
        let ComponentOnServer {
            state,
            name,
            service,
            ..
        } = self;
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

    /// Both the server and SAPI have it: the instance UUID, its params and
    /// its image must agree.
    fn installed_with_instance(self, i: &Installed, inst: &InstanceIntent, out: &mut Vec<Finding>) {
        let ComponentOnServer {
            state,
            name,
            service,
            ..
        } = self;
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
            return;
        }
        // An instance with no params at all that the server lists
        // in server.agents is how the vm-agent and net-agent
        // postinstalls adopt themselves in every real datacenter:
        // it is this server's instance, not drift (an update sets
        // its params) -- unless agentsadm recorded more for it: its
        // history shows it wrote the instance's params there, or the
        // service's ledger keeps a mark the instance lost.
        let bare_but_reported = inst.link == InstanceLink::Reported && inst.image.is_none();
        if let InstanceLink::Misfiled { named } = inst.link {
            self.misfiled(i, inst, named, out);
            return;
        }
        let written = self
            .input
            .written_by_agentsadm
            .get(&state.uuid)
            .is_some_and(|c| c.contains(name));
        if (bare_but_reported && written) || !self.intent.lost_marks(&state.uuid, name).is_empty() {
            self.erased(i, inst, out);
            self.kept_once(inst, out);
            if let Some(target) = inst.image
                && i.image != Some(target)
            {
                self.wrong_image(i, inst, target, out);
            }
            return;
        }
        self.kept_once(inst, out);
        if !inst.has_params() && !bare_but_reported {
            let missing = match (inst.link, inst.image) {
                (InstanceLink::Reported, None) => "params.server_uuid and params.image_uuid",
                (InstanceLink::Reported, Some(_)) => "params.server_uuid",
                (_, _) => "params.image_uuid",
            };
            let fix = self.set_params_fix(i, inst);
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
            self.wrong_image(i, inst, target, out);
        }
    }

    /// It runs another image than its instance names (`target`): held,
    /// something other than agentsadm changed it; put in place by sdcadm
    /// on this server, that is recorded; else the intended image goes
    /// back on.
    fn wrong_image(
        self,
        i: &Installed,
        inst: &InstanceIntent,
        target: ImageUuid,
        out: &mut Vec<Finding>,
    ) {
        let ComponentOnServer {
            input, state, name, ..
        } = self;
        let by_sdcadm = input
            .changed_by_sdcadm
            .get(&state.uuid)
            .is_some_and(|changed| changed.contains(name));
        let (details, fix) = if let Some(mark) = self.hold() {
            // agentsadm changes no held server, so something else did
            // (sdcadm ignores holds): said as such, left to the operator.
            (
                format!(
                    "held ({}), yet runs {} where its SAPI instance names {}: something other than agentsadm changed it (sdcadm ignores holds)",
                    mark.describe(),
                    version_label(i),
                    image_of(input, target)
                ),
                Fix::Manual {
                    hint: format!(
                        "keep what runs with 'agentsadm update {name} -s {h} --image UUID --ignore-holds -y', or put {} back the same way; 'agentsadm release {name} -s {h}' lets bulk changes move it again",
                        image_of(input, target),
                        h = state.hostname
                    ),
                },
            )
        } else if by_sdcadm {
            self.kept_from_sdcadm(i, inst, target)
        } else {
            let fix = match step_fix(input, state, name, target) {
                Ok((image, transport)) => Fix::Upgrade { image, transport },
                Err(blocked) => Fix::Manual {
                    hint: blocked.to_string(),
                },
            };
            (
                format!(
                    "runs {}, its SAPI instance names {}",
                    version_label(i),
                    image_of(input, target)
                ),
                fix,
            )
        };
        out.push(finding(
            FindingKind::WrongImage,
            state,
            name,
            Some(inst.uuid),
            details,
            fix,
        ));
    }

    /// What sdcadm put in place (`sdcadm self-update`, `sdcadm
    /// experimental update-gz-tools`) is the operator's choice, made with
    /// the tool they use for it, newer or older: the fix records it in
    /// SAPI, never reinstalls `target` over it, and the words say how to
    /// go back the way it was changed. (Read from the headnode's disk,
    /// it is sdcadm's doing even where CNAPI's registration agrees with
    /// the disk: after `--fix` recorded a newer image, a `sdcadm
    /// self-update` back to the registered one looks just so.)
    fn kept_from_sdcadm(
        self,
        i: &Installed,
        inst: &InstanceIntent,
        target: ImageUuid,
    ) -> (String, Fix) {
        let ComponentOnServer {
            input,
            state,
            name,
            service,
            ..
        } = self;
        let kind = input.catalog.get(name).map(|c| c.kind);
        let (how, back) = match kind {
            Some(ComponentKind::GzTools) => (
                "'sdcadm experimental update-gz-tools'",
                format!(
                    "sdcadm experimental update-gz-tools -s {} {target}",
                    state.hostname
                ),
            ),
            _ => (
                "'sdcadm self-update'",
                format!("sdcadm self-update {target}"),
            ),
        };
        let details = format!(
            "runs {}, its SAPI instance names {}: sdcadm changes it behind agentsadm ({how}), so --fix records what runs in SAPI and reinstalls nothing; to go back to {} the way it was changed, run '{back}'",
            version_label(i),
            image_of(input, target),
            image_of(input, target),
        );
        let fix = match i.image {
            Some(image) => Fix::SetParams {
                instance: inst.uuid,
                service: service.uuid,
                image,
            },
            None => Fix::Manual {
                hint: format!(
                    "the server does not say which image runs: run '{back}' to go back, or record what runs with 'agentsadm update {name} -s {} --image UUID'",
                    state.hostname
                ),
            },
        };
        (details, fix)
    }
}

/// SAPI's second instances of a component on this server, and what the
/// server runs that is not an agentsadm component.
fn duplicate_and_foreign_findings(survey: &Survey, state: &ServerState, out: &mut Vec<Finding>) {
    let intent = &survey.intent;
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

/// Why `check --fix` cannot install or upgrade a component itself; shown
/// as the hint of a manual fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepBlocked {
    #[error("{component} is not a catalog component")]
    NotInCatalog { component: String },
    #[error(
        "image {image} is not in the datacenter IMGAPI: import it, or point the instance at another image with 'agentsadm update {component} -s {hostname} --image UUID'"
    )]
    ImageNotInDc {
        image: ImageUuid,
        component: String,
        hostname: String,
    },
    #[error(
        "image {image} is {name}, not {component}: SAPI names another component's image for {component} on {hostname}; point the instance back at a {component} image with 'agentsadm update {component} -s {hostname} --image UUID'"
    )]
    WrongImage {
        image: ImageUuid,
        name: String,
        component: String,
        hostname: String,
    },
    #[error(
        "restarting {component} aborts running work, so check never does it: run 'agentsadm update {component} -s {hostname}' when convenient"
    )]
    NotBulk { component: String, hostname: String },
    #[error(
        "the server is not running (CNAPI status {status:?}); re-run 'agentsadm check --fix' once it is back"
    )]
    NotRunning { status: String },
    #[error("no transport can install {component}")]
    NoTransport { component: String },
    #[error(
        "{component} needs CNAPI execute, which mockcloud servers such as {hostname} do not have; nothing can install it there"
    )]
    NoExecute { component: String, hostname: String },
}

/// An install or upgrade step of `component` to `image` on the server, or
/// why it cannot be done automatically.
fn step_fix(
    input: &DriftInput,
    state: &ServerState,
    component: &str,
    image: ImageUuid,
) -> Result<(ImageRef, TransportKind), StepBlocked> {
    let Some(c) = input.catalog.get(component) else {
        return Err(StepBlocked::NotInCatalog {
            component: component.to_string(),
        });
    };
    let Some(image_ref) = input.images.get(&image) else {
        return Err(StepBlocked::ImageNotInDc {
            image,
            component: component.to_string(),
            hostname: state.hostname.clone(),
        });
    };
    // SAPI is not trusted to name an image of this component: installing
    // another component's image under this one's name would replace it.
    if !input.catalog.is_image_of(&image_ref.name, &c.name) {
        return Err(StepBlocked::WrongImage {
            image,
            name: image_ref.name.clone(),
            component: component.to_string(),
            hostname: state.hostname.clone(),
        });
    }
    if !c.bulk_update && state.components.contains_key(component) {
        return Err(StepBlocked::NotBulk {
            component: component.to_string(),
            hostname: state.hostname.clone(),
        });
    }
    if !state.is_running() {
        return Err(StepBlocked::NotRunning {
            status: state.status.clone(),
        });
    }
    let transport = TransportKind::choose(c.kind, TransportMode::Auto).ok_or_else(|| {
        StepBlocked::NoTransport {
            component: component.to_string(),
        }
    })?;
    if transport == TransportKind::Execute && !state.has_execute() {
        return Err(StepBlocked::NoExecute {
            component: component.to_string(),
            hostname: state.hostname.clone(),
        });
    }
    Ok((image_ref.clone(), transport))
}

/// CNAPI's view against the server's own report, component by component
/// (catalog components by component name, other packages by name).
pub(super) fn stale_report(cnapi: &ServerState, live: &ServerState, out: &mut Vec<Finding>) {
    let mut diffs: BTreeMap<String, String> = BTreeMap::new();
    if let Some(problem) = &cnapi.quarantine {
        // Unusable in CNAPI, whatever it lists: the server's own report
        // replaces it.
        diffs.insert(
            "server.agents".to_string(),
            format!("CNAPI's list cannot be used ({problem}); the server's own report can"),
        );
    }
    let names: BTreeSet<&ComponentName> = cnapi
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
        diffs.insert(name.to_string(), detail);
    }
    let index = |list: &[agentsadm_api::cnapi::AgentEntry]| -> BTreeMap<String, String> {
        list.iter()
            .map(|a| (a.name.to_string(), a.version.to_string()))
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

/// With the server's own report: a component running where SAPI says
/// disabled (fixed by disabling it again), and one whose services are all
/// disabled without SAPI saying so (an operator's `svcadm disable`: the
/// next upgrade would turn it back on; recording it or enabling it is the
/// operator's choice, never made by `check --fix`).
pub(super) fn switch_findings(
    survey: &Survey,
    state: &ServerState,
    report: &agentsadm_api::remote::AgentsReport,
    out: &mut Vec<Finding>,
) {
    for a in &report.agents {
        if !survey.intent.is_managed(&a.name) {
            continue;
        }
        let off = report.services_off.contains(&a.name);
        let instance = survey.intent.instance(&state.uuid, &a.name).map(|i| i.uuid);
        match survey.intent.disabled(&state.uuid, &a.name) {
            Some(mark) if !off => out.push(finding(
                FindingKind::RunningWhereDisabled,
                state,
                &a.name,
                instance,
                format!(
                    "SAPI says {} is disabled on this server ({}), but its services are not all disabled",
                    a.name,
                    mark.describe()
                ),
                Fix::Disable { mark: mark.clone() },
            )),
            None if off => out.push(finding(
                FindingKind::DisabledWithoutIntent,
                state,
                &a.name,
                instance,
                format!(
                    "every service of {} is disabled on this server, but SAPI does not say so: its next upgrade would enable it",
                    a.name
                ),
                Fix::Manual {
                    hint: format!(
                        "record it with 'agentsadm disable {c} -s {h} --reason ...' (kept off across upgrades), or enable its services on {h} (svcadm enable)",
                        c = a.name,
                        h = state.hostname
                    ),
                },
            )),
            _ => {}
        }
    }
}
