//! The health gate: after a component's new version is in place and its
//! SMF manifests imported, every instance it declares that should run must
//! be `online` and stay online for `--min-healthy`, within
//! `--health-timeout`. An instance that goes to `maintenance`, `offline`
//! or `disabled` instead, or never comes online in time, fails the
//! transaction (`unhealthy`), which then rolls back to the previous
//! version. The same check answers `agentsadm gz health NAME`, which the
//! orchestrator runs after cn-agent's install task (that task has no gate).
//!
//! The gate watches transitions, not just samples: once it has seen an
//! instance online, any exit fails it, even one its restarter undid before
//! the next look (SmartOS: a new contract or state time from `svcs -o
//! state,nstate,ctid,stime`; the rooted platform: a recorded state change).
//!
//! Which instances should run: every instance the component's manifests
//! define that was enabled before the change, or, for one the change
//! creates, that its manifest enables. An instance the operator disabled
//! stays out of the gate.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use agentsadm_platform as platform;

use agentsadm_platform::Platform;

use agentsadm_platform::PlatformError;

use agentsadm_platform::ServiceHealth;

use agentsadm_platform::ServiceState;

use agentsadm_platform::blocking;

/// `--min-healthy` on a real server: long enough for a service that
/// crashes right after starting to be seen in maintenance.
pub const DEFAULT_MIN_HEALTHY: Duration = Duration::from_secs(10);
/// `--health-timeout`: how long a service may take to come online.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(120);
/// Between two looks at the services.
const POLL: Duration = Duration::from_millis(500);

/// The gate's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthGate {
    /// Online this long, without interruption, counts as healthy (0: online
    /// once is enough).
    pub min_healthy: Duration,
    /// Give up (unhealthy) after this long.
    pub timeout: Duration,
    /// Between two looks.
    pub poll: Duration,
}

impl HealthGate {
    /// The defaults on `platform`: 10 s online on SmartOS, 0 on the
    /// rooted platform (tests and the simulator, whose services start at
    /// once).
    pub fn for_platform(platform: crate::session::PlatformKind) -> HealthGate {
        HealthGate {
            min_healthy: match platform {
                crate::session::PlatformKind::SmartOs => DEFAULT_MIN_HEALTHY,
                crate::session::PlatformKind::Rooted => Duration::ZERO,
            },
            timeout: DEFAULT_HEALTH_TIMEOUT,
            poll: POLL,
        }
    }
}

/// An instance that did not pass the gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{fmri} is {state}{}{}", .waited.map(|w| format!(" after {w:?}")).unwrap_or_default(), .explanation.as_deref().map(|e| format!(" ({})", one_line(e))).unwrap_or_default())]
pub struct Unhealthy {
    pub fmri: String,
    /// `maintenance`, `offline`, `disabled`, ... or `absent`.
    pub state: String,
    /// `svcs -x` text, where available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// Set when the gate timed out waiting for it to come (or stay) online.
    #[serde(skip)]
    pub waited: Option<Duration>,
}

/// `svcs -x` prints several lines; a result message keeps one.
fn one_line(text: &str) -> String {
    let joined: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let s = joined.join(" | ");
    if s.chars().count() > 400 {
        format!("{}...", s.chars().take(400).collect::<String>())
    } else {
        s
    }
}

/// Why the gate could not look at a service.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Unhealthy(#[from] Unhealthy),
    #[error("cannot read the state of {fmri}")]
    Platform {
        fmri: String,
        #[source]
        err: Box<PlatformError>,
    },
}

/// The instances of the manifests `files` that should run: `before` holds
/// each instance's state before the change (`None`: it did not exist).
/// Blocking (reads the manifests).
pub fn expected_instances(
    files: &[PathBuf],
    before: &BTreeMap<String, Option<ServiceState>>,
) -> Result<Vec<String>, PlatformError> {
    let mut out = Vec::new();
    for file in files {
        let instances = match platform::read_manifest_instances(file) {
            Ok(i) => i,
            Err(PlatformError::Read { err, .. }) if err.kind() == std::io::ErrorKind::NotFound => {
                continue;
            }
            Err(e) => return Err(e),
        };
        for i in instances {
            let runs = match before.get(&i.fmri) {
                Some(Some(state)) => state.is_enabled(),
                _ => i.enabled,
            };
            if runs && !out.contains(&i.fmri) {
                out.push(i.fmri);
            }
        }
    }
    Ok(out)
}

/// Wait until every instance of `fmris` is online and has stayed online
/// for `gate.min_healthy`. A state that will not turn online by itself
/// (maintenance, disabled, degraded, absent) fails at once; `offline`
/// (waiting for dependencies) and transitional states fail only when the
/// timeout runs out.
///
/// The gate watches transitions, not only samples: once it has seen an
/// instance online, any exit fails it, whether a look finds it not online
/// or online again in another run ([`ServiceHealth::run`]: on SmartOS a
/// new contract, in the rooted platform a recorded state change). A
/// service in maintenance for a fraction of every second, or one its
/// restarter keeps restarting, no longer passes between two looks.
pub async fn wait_healthy(
    platform: &dyn Platform,
    fmris: &[String],
    gate: &HealthGate,
) -> Result<(), GateError> {
    if fmris.is_empty() {
        return Ok(());
    }
    let started = tokio::time::Instant::now();
    let mut online_since: Option<tokio::time::Instant> = None;
    // Each instance's run when the gate first saw it online.
    let mut runs: BTreeMap<String, Option<String>> = BTreeMap::new();
    loop {
        let mut first_bad: Option<(String, Option<ServiceHealth>)> = None;
        for fmri in fmris {
            let health = platform
                .smf_health(fmri)
                .await
                .map_err(|err| GateError::Platform {
                    fmri: fmri.clone(),
                    err: Box::new(err),
                })?;
            let online = health
                .as_ref()
                .is_some_and(|h| h.state == ServiceState::Online && h.next_state.is_none());
            match runs.get(fmri) {
                Some(seen) => {
                    let run = health.as_ref().and_then(|h| h.run.clone());
                    if !online || (seen.is_some() && run != *seen) {
                        return Err(GateError::Unhealthy(exited(fmri, seen.as_deref(), health)));
                    }
                }
                None if online => {
                    runs.insert(fmri.clone(), health.as_ref().and_then(|h| h.run.clone()));
                }
                None => {}
            }
            if !online {
                first_bad = Some((fmri.clone(), health));
                break;
            }
        }
        let now = tokio::time::Instant::now();
        match first_bad {
            None => {
                let since = *online_since.get_or_insert(now);
                if now - since >= gate.min_healthy {
                    return Ok(());
                }
            }
            Some((fmri, health)) => {
                online_since = None;
                let state = health.as_ref().map(|h| h.state.clone());
                let hopeless = matches!(
                    state,
                    None | Some(ServiceState::Maintenance)
                        | Some(ServiceState::Disabled)
                        | Some(ServiceState::Degraded)
                );
                let timed_out = now - started >= gate.timeout;
                if hopeless || timed_out {
                    return Err(GateError::Unhealthy(Unhealthy {
                        fmri,
                        state: state
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "absent".to_string()),
                        explanation: health.and_then(|h| h.explanation),
                        waited: (timed_out && !hopeless).then_some(gate.timeout),
                    }));
                }
            }
        }
        let left_online = online_since
            .map(|s| gate.min_healthy.saturating_sub(now - s))
            .unwrap_or(gate.poll);
        tokio::time::sleep(gate.poll.min(left_online).max(Duration::from_millis(1))).await;
    }
}

/// An instance the gate had seen online left it (`seen`: its run then).
fn exited(fmri: &str, seen: Option<&str>, health: Option<ServiceHealth>) -> Unhealthy {
    let (state, run, why) = match health {
        Some(h) => (h.state.to_string(), h.run, h.explanation),
        None => ("absent".to_string(), None, None),
    };
    let runs = match (seen, run) {
        (Some(a), Some(b)) if a != b => format!(" (run {a}, now {b})"),
        _ => String::new(),
    };
    let mut explanation = if state == ServiceState::Online.as_str() {
        format!("it left online and was restarted while the health gate watched it{runs}")
    } else {
        format!("it left online while the health gate watched it{runs}")
    };
    if let Some(why) = why {
        explanation.push_str("; ");
        explanation.push_str(&why);
    }
    Unhealthy {
        fmri: fmri.to_string(),
        state,
        explanation: Some(explanation),
        waited: None,
    }
}

/// The gate for a component that is already installed (`gz health NAME`):
/// its manifests' instances that are enabled now or should be.
pub async fn check_installed(
    platform: &dyn Platform,
    manifests: Vec<PathBuf>,
    gate: &HealthGate,
) -> Result<Vec<String>, GateError> {
    let fmris = blocking(move || expected_instances(&manifests, &BTreeMap::new()))
        .await
        .map_err(|err| GateError::Platform {
            fmri: "(manifests)".to_string(),
            err: Box::new(err),
        })?;
    wait_healthy(platform, &fmris, gate).await?;
    Ok(fmris)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_platform::Rooted;
    use agentsadm_platform::rooted::{SMF_FAULTS_FILE, SmfFault, SmfFaults};

    const MANIFEST: &str = r#"<?xml version="1.0"?>
<service_bundle type="manifest" name="x">
    <service name="smartdc/agent/x" type="service" version="1.0">
        <create_default_instance enabled="true"/>
    </service>
    <service name="smartdc/agent/x-off" type="service" version="1.0">
        <create_default_instance enabled="false"/>
    </service>
</service_bundle>"#;

    #[tokio::test]
    async fn online_passes_and_a_fault_fails_naming_state_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("x.xml");
        std::fs::write(&m, MANIFEST).unwrap();
        let p = Rooted::new(dir.path());
        p.smf_import(&m).await.unwrap();
        let gate = HealthGate {
            min_healthy: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
            poll: Duration::from_millis(5),
        };
        let fmris = check_installed(&p, vec![m.clone()], &gate).await.unwrap();
        assert_eq!(fmris, vec!["svc:/smartdc/agent/x:default".to_string()]);

        let faults = SmfFaults {
            faults: vec![SmfFault {
                fmri: "svc:/smartdc/agent/x:default".into(),
                when_file: None,
                holds: None,
                state: ServiceState::Maintenance,
                reason: Some("Start method exited with $SMF_EXIT_ERR_FATAL.".into()),
            }],
            flaps: Vec::new(),
        };
        let path = dir.path().join(SMF_FAULTS_FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&faults).unwrap()).unwrap();
        p.smf_restart("svc:/smartdc/agent/x:default").await.unwrap();
        let err = check_installed(&p, vec![m], &gate).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("svc:/smartdc/agent/x:default is maintenance"),
            "{text}"
        );
        assert!(text.contains("SMF_EXIT_ERR_FATAL"), "{text}");
    }
}
