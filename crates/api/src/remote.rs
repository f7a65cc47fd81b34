//! The contract between the headnode and the GZ installer on a server: how the
//! orchestrator runs `agentsadm gz ...` through CNAPI execute, and the JSON
//! documents those commands print with `--json`.
//!
//! Both sides (the orchestrator's execute transport, the simulator's execute
//! endpoint, and `agentsadm gz` itself) use these types, so a change to the
//! wire shape is a change in one place.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cnapi::AgentEntry;
use agentsadm_types::component::{ComponentName, ComponentVersion};

use crate::cnapi::ExecuteRequest;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// Where the agentsadm binary lives in a global zone (installed by
/// `installer/agentsetup.sh`, outside `/opt/smartdc/agents` so that it is not
/// mistaken for an agent and survives agent removal).
pub const GZ_BINARY: &str = "/opt/smartdc/agentsadm/bin/agentsadm";

/// The exit status Ur answers as 0 before rebooting the server
/// (ur-agent's "reboot after replying"). Nothing agentsadm runs through
/// execute may end with it: the script maps it, and `agentsadm gz` never
/// returns it.
pub const UR_REBOOT_EXIT_STATUS: i32 = 113;

/// The script sent with CNAPI execute. The arguments travel in the request's
/// `args` (never interpolated into the script), so no quoting can go wrong.
/// It runs agentsadm as a child rather than `exec`, so that its status can
/// be kept off [`UR_REBOOT_EXIT_STATUS`], and a signal death reads as bash's
/// `128 + signal` (Ur itself reports one as exit 1 with no stderr).
pub const EXEC_SCRIPT: &str = "#!/bin/bash\n/opt/smartdc/agentsadm/bin/agentsadm \"$@\"\nstatus=$?\nif [[ $status -eq 113 ]]; then\n    echo \"agentsadm: exit status 113 reported as 1 (Ur reboots the server on 113)\" >&2\n    status=1\nfi\nexit $status\n";

/// What [`EXEC_SCRIPT`] exits with when agentsadm exited with `status`.
pub fn exec_script_status(status: i32) -> i32 {
    if status == UR_REBOOT_EXIT_STATUS {
        1
    } else {
        status
    }
}

/// The environment every execute carries. Through Ur (and cn-agent's
/// `command_execute`) the script gets exactly the request's `env`, nothing
/// inherited: without these `agentsadm gz` and the package hooks it runs
/// would have no PATH, HOME, TZ or LANG. (The global zone root's own PATH.)
pub const GZ_EXECUTE_ENV: [(&str, &str); 4] = [
    (
        "PATH",
        "/usr/bin:/usr/sbin:/sbin:/smartdc/bin:/opt/smartdc/bin:/opt/local/bin:/opt/local/sbin:/opt/smartdc/agents/bin",
    ),
    ("HOME", "/root"),
    ("TZ", "UTC"),
    ("LANG", "C"),
];

/// The environment of every execute request: [`GZ_EXECUTE_ENV`] (Ur
/// gives a script none) with `env` on top.
pub fn execute_env(env: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut full: BTreeMap<String, String> = GZ_EXECUTE_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    full.extend(env);
    full
}

/// Build the CNAPI execute request that runs `agentsadm <args...>` on a
/// server: [`GZ_EXECUTE_ENV`] with `env` on top (the API URLs when the
/// server cannot read them from its own SDC config, as in the simulator).
/// It carries no `timeout`: only [`crate::cnapi::CnapiClient::execute_as`]
/// adds one, for servers that execute through cn-agent.
pub fn gz_execute_request(args: &[String], env: BTreeMap<String, String>) -> ExecuteRequest {
    ExecuteRequest {
        script: EXEC_SCRIPT.to_string(),
        args: args.to_vec(),
        env: execute_env(env),
        json: true,
        timeout: None,
    }
}

/// The `agentsadm` arguments of a request built by [`gz_execute_request`],
/// or `None` for any other script.
pub fn parse_gz_execute(request: &ExecuteRequest) -> Option<&[String]> {
    (request.script == EXEC_SCRIPT).then_some(request.args.as_slice())
}

/// The script of the probe sent before a long execute that may go through
/// Ur: it needs nothing on the server (no agentsadm; `echo` is a bash
/// builtin, and Ur gives the script no PATH) and answers at once, so a
/// probe that gets no answer within a short bound means the server's
/// ur-agent does not answer (through Ur nothing else ends the wait), and
/// its answer's shape shows which path the running CNAPI takes.
pub const PROBE_SCRIPT: &str = "#!/bin/bash\necho agentsadm-probe\n";

/// What [`PROBE_SCRIPT`] prints.
pub const PROBE_OUTPUT: &str = "agentsadm-probe";

/// The probe request ([`PROBE_SCRIPT`]), without `timeout` like every
/// request built here.
pub fn probe_request() -> ExecuteRequest {
    ExecuteRequest {
        script: PROBE_SCRIPT.to_string(),
        args: Vec::new(),
        env: execute_env(BTreeMap::new()),
        json: true,
        timeout: None,
    }
}

/// Whether `request` is the probe of [`probe_request`].
pub fn is_probe(request: &ExecuteRequest) -> bool {
    request.script == PROBE_SCRIPT && request.args.is_empty()
}

/// What `agentsadm gz report --json` prints: the `server.agents` list (the
/// shape CNAPI stores) and the components whose metadata could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsReport {
    pub server_uuid: ServerUuid,
    pub agents: Vec<AgentEntry>,
    #[serde(default)]
    pub errors: Vec<ReportError>,
    /// Installed components whose SMF instances are all disabled (for
    /// `check`: a component running where SAPI says disabled, or the
    /// reverse). Absent from older installers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services_off: Vec<ComponentName>,
}

/// A component that is present but unreadable (missing `image_uuid`,
/// garbage `package.json`, ...). It never makes the whole report fail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportError {
    pub name: String,
    pub message: String,
}

/// What happened to one component in a `gz install|remove|rollback` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentAction {
    Installed,
    Upgraded,
    /// The requested image was already installed and complete.
    Unchanged,
    Removed,
    /// `gz remove` of something that was not installed.
    Absent,
    RolledBack,
}

/// One component's outcome in a [`GzResult`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentResult {
    pub name: ComponentName,
    pub action: ComponentAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_image: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<ComponentVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uuid: Option<InstanceUuid>,
    pub elapsed_ms: u64,
}

/// Why a `gz` run failed: the component, the step (`resolve`, `download`,
/// `verify`, `unpack`, `hook:postinstall`, `swap`, `smf`, `sapi`, `cnapi`,
/// `lock`, ...) and the message, which already says what to do next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GzFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentName>,
    pub step: FailureStep,
    pub message: String,
}

/// The step a `gz` run or a component failed at, as both sides name it:
/// the installer sets it, the orchestrator decides on it (an unhealthy
/// build is reverted, a changed server is skipped), and the names on the
/// wire are spelled here only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureStep {
    /// The server could not be identified (sysinfo, `--server-uuid`).
    Sysinfo,
    /// The server lock.
    Lock,
    /// Recovery of an interrupted transaction.
    Recover,
    /// API URLs and clients.
    Config,
    /// Which image or component: names, manifests, the catalog, placement.
    Resolve,
    /// Downloading the image file.
    Download,
    /// The file's size and digests against its manifest.
    Verify,
    /// Unpacking the image.
    Unpack,
    /// The staged package does not look like the image it claims to be.
    Validate,
    /// The instance UUID file.
    Instance,
    /// The transaction journal.
    Journal,
    /// Moving files, trees and links in or out.
    Swap,
    /// A lifecycle hook.
    Hook(HookPhase),
    /// SMF manifests and services.
    Smf,
    /// SAPI adoption or instance removal.
    Sapi,
    /// Handing cn-agent's own replacement to agentsadm-install.
    Handoff,
    /// `gz rollback` found nothing to restore, or could not stage it.
    Rollback,
    /// The health gate: a service of the new version did not come up (or
    /// stay up); the transaction rolled back.
    Unhealthy,
    /// `--expect-current`: the server's installed image is not the one the
    /// plan expected (changed since the plan).
    ExpectCurrent,
    /// A name this side does not know (a newer or older agentsadm on the
    /// other side): kept as sent, and shown as it is.
    Other(String),
}

/// The lifecycle hook a [`FailureStep::Hook`] failed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookPhase {
    Preinstall,
    Postinstall,
    Preuninstall,
    Postuninstall,
}

impl FailureStep {
    const NAMED: [FailureStep; 22] = [
        FailureStep::Sysinfo,
        FailureStep::Lock,
        FailureStep::Recover,
        FailureStep::Config,
        FailureStep::Resolve,
        FailureStep::Download,
        FailureStep::Verify,
        FailureStep::Unpack,
        FailureStep::Validate,
        FailureStep::Instance,
        FailureStep::Journal,
        FailureStep::Swap,
        FailureStep::Hook(HookPhase::Preinstall),
        FailureStep::Hook(HookPhase::Postinstall),
        FailureStep::Hook(HookPhase::Preuninstall),
        FailureStep::Hook(HookPhase::Postuninstall),
        FailureStep::Smf,
        FailureStep::Sapi,
        FailureStep::Handoff,
        FailureStep::Rollback,
        FailureStep::Unhealthy,
        FailureStep::ExpectCurrent,
    ];

    /// The name in results and logs.
    pub fn as_str(&self) -> &str {
        match self {
            FailureStep::Sysinfo => "sysinfo",
            FailureStep::Lock => "lock",
            FailureStep::Recover => "recover",
            FailureStep::Config => "config",
            FailureStep::Resolve => "resolve",
            FailureStep::Download => "download",
            FailureStep::Verify => "verify",
            FailureStep::Unpack => "unpack",
            FailureStep::Validate => "validate",
            FailureStep::Instance => "instance",
            FailureStep::Journal => "journal",
            FailureStep::Swap => "swap",
            FailureStep::Hook(HookPhase::Preinstall) => "hook:preinstall",
            FailureStep::Hook(HookPhase::Postinstall) => "hook:postinstall",
            FailureStep::Hook(HookPhase::Preuninstall) => "hook:preuninstall",
            FailureStep::Hook(HookPhase::Postuninstall) => "hook:postuninstall",
            FailureStep::Smf => "smf",
            FailureStep::Sapi => "sapi",
            FailureStep::Handoff => "handoff",
            FailureStep::Rollback => "rollback",
            FailureStep::Unhealthy => "unhealthy",
            FailureStep::ExpectCurrent => "expect-current",
            FailureStep::Other(name) => name,
        }
    }

    /// The step a name stands for; an unknown name is kept as [`FailureStep::Other`].
    pub fn parse(name: &str) -> FailureStep {
        Self::NAMED
            .iter()
            .find(|s| s.as_str() == name)
            .cloned()
            .unwrap_or_else(|| FailureStep::Other(name.to_string()))
    }
}

impl std::fmt::Display for FailureStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FailureStep {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureStep {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FailureStep, D::Error> {
        // A bounded name: whatever the other side sends is echoed in
        // summaries and logs.
        let name = String::deserialize(d)?;
        let name: String = name.chars().take(64).collect();
        Ok(FailureStep::parse(&name))
    }
}

/// What `agentsadm gz install|remove|rollback|setup --json` prints. On
/// failure `error` is set and `components` lists what did complete before it
/// (each failed component itself was rolled back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GzResult {
    pub server_uuid: ServerUuid,
    pub components: Vec<ComponentResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<GzFailure>,
    /// Things the operator should know that did not fail the run: adoption
    /// skipped (no SAPI service), CNAPI report not posted, transactions of an
    /// earlier interrupted run recovered, the job handed to the SMF service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl GzFailure {
    /// How a run that installs several components together says that one
    /// more failed besides its `error` (one of [`GzResult::warnings`]): the
    /// orchestrator, which sent them in one run, reads each component's
    /// failure back from it ([`GzFailure::from_also_failed`]).
    pub fn also_failed(&self) -> String {
        format!(
            "{} also failed at {}: {}",
            self.component.as_deref().unwrap_or("?"),
            self.step,
            self.message
        )
    }

    /// The failure a warning made by [`GzFailure::also_failed`] states, if
    /// it is one (any other warning: `None`).
    pub fn from_also_failed(warning: &str) -> Option<GzFailure> {
        let (name, rest) = warning.split_once(" also failed at ")?;
        let (step, message) = rest.split_once(": ")?;
        Some(GzFailure {
            component: Some(ComponentName::new(name).ok()?),
            step: FailureStep::parse(step),
            message: message.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_failure_of_a_run_reads_back_from_its_warning() {
        let f = GzFailure {
            component: Some(ComponentName::from_static("dockerlogger")),
            step: FailureStep::Unhealthy,
            message: "svc:/smartdc/dockerlogger:default is maintenance: rolled back".into(),
        };
        assert_eq!(GzFailure::from_also_failed(&f.also_failed()), Some(f));
        assert_eq!(GzFailure::from_also_failed("journal recovered"), None);
        assert_eq!(
            GzFailure::from_also_failed("../x also failed at swap: no"),
            None
        );
    }

    #[test]
    fn a_remote_report_or_result_with_a_hostile_name_is_refused_at_decode() {
        let server = "44454c4c-4800-1034-804a-b2c04f354d31";
        let report = |name: &str| {
            serde_json::json!({"server_uuid": server,
                "agents": [{"name": name, "version": "1.0.0"}]})
        };
        assert!(serde_json::from_value::<AgentsReport>(report("vm-agent")).is_ok());
        let good = serde_json::json!({"server_uuid": server, "components": [
            {"name": "vm-agent", "action": "installed", "elapsed_ms": 1}]});
        assert!(serde_json::from_value::<GzResult>(good).is_ok());
        for bad in ["../x", "A B", "", "..", "a/b"] {
            let err = serde_json::from_value::<AgentsReport>(report(bad)).unwrap_err();
            assert!(
                err.to_string().contains("not a component name"),
                "{bad}: {err}"
            );
            let result = serde_json::json!({"server_uuid": server, "components": [
                {"name": bad, "action": "installed", "elapsed_ms": 1}]});
            assert!(serde_json::from_value::<GzResult>(result).is_err(), "{bad}");
            let off = serde_json::json!({"server_uuid": server, "agents": [],
                "services_off": [bad]});
            assert!(
                serde_json::from_value::<AgentsReport>(off).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn failure_steps_keep_their_wire_names_and_unknown_ones_survive() {
        for step in FailureStep::NAMED {
            let wire = serde_json::to_string(&step).unwrap();
            assert_eq!(serde_json::from_str::<FailureStep>(&wire).unwrap(), step);
        }
        assert_eq!(
            serde_json::from_str::<FailureStep>("\"hook:postinstall\"").unwrap(),
            FailureStep::Hook(HookPhase::Postinstall)
        );
        let newer: FailureStep = serde_json::from_str("\"contract\"").unwrap();
        assert_eq!(newer, FailureStep::Other("contract".into()));
        assert_eq!(newer.to_string(), "contract");
    }

    #[test]
    fn execute_request_round_trips() {
        let args = vec!["gz".to_string(), "install".to_string(), "x".to_string()];
        let req = gz_execute_request(&args, BTreeMap::from([("HOME".into(), "/x".into())]));
        assert_eq!(parse_gz_execute(&req), Some(args.as_slice()));
        assert_eq!(req.timeout, None);
        assert_eq!(req.env["HOME"], "/x");
        for (k, _) in GZ_EXECUTE_ENV {
            assert!(req.env.contains_key(k), "{k}");
        }
        let other = ExecuteRequest {
            script: "rm -rf /".into(),
            ..Default::default()
        };
        assert_eq!(parse_gz_execute(&other), None);
    }

    /// The script, run by the real bash with a stand-in agentsadm: 113
    /// never comes out, other statuses and signal deaths do.
    #[test]
    fn exec_script_keeps_113_from_ur() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("agentsadm");
        std::fs::write(
            &fake,
            "#!/bin/bash\ncase \"$1\" in\n  kill) kill -9 $$ ;;\n  *) echo \"args:$*\"; exit \"$1\" ;;\nesac\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = dir.path().join("script");
        std::fs::write(
            &script,
            EXEC_SCRIPT.replace(GZ_BINARY, fake.to_str().unwrap()),
        )
        .unwrap();
        let run = |arg: &str| {
            std::process::Command::new("bash")
                .arg(&script)
                .args([arg, "two words"])
                .env_clear()
                .output()
                .expect("bash runs (it is needed for this test)")
        };
        for (arg, status) in [("0", 0), ("3", 3), ("113", 1), ("kill", 137)] {
            let out = run(arg);
            assert_eq!(out.status.code(), Some(status), "{arg}: {out:?}");
            assert_eq!(exec_script_status(arg.parse().unwrap_or(137)), status);
        }
        assert_eq!(
            String::from_utf8_lossy(&run("0").stdout),
            "args:0 two words\n"
        );
    }
}
