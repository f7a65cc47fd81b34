//! Shared helpers of the reliability and command-line tests: run the real
//! `agentsadm` binary (with a hang guard), and capture what a simulated
//! datacenter holds, to prove that a refused command changed nothing.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use agentsadm_sim::SimDc;

/// Longest any single command of these tests may take before the test
/// calls it hung: only a hang bound. `bench all` took 117 s at load 20 on
/// 2 cores (mostly waiting for a core), and a CI machine can be slower.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// What one run of the binary did.
#[derive(Clone, Debug)]
pub struct Run {
    /// `None` when it died by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The non-empty lines of stderr.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }
}

/// Environment for a run against `dc` (API URLs, no progress bars).
pub fn dc_env(dc: &SimDc) -> Vec<(String, String)> {
    let urls = dc.urls();
    vec![
        ("SAPI_URL".into(), urls.sapi.clone()),
        ("CNAPI_URL".into(), urls.cnapi.clone()),
        ("IMGAPI_URL".into(), urls.imgapi.clone()),
        ("UPDATES_URL".into(), urls.updates.clone()),
        ("AGENTSADM_NO_PROGRESS".into(), "1".into()),
    ]
}

/// Run `agentsadm <args>` with exactly the given API environment: the
/// caller's `SAPI_URL` and friends never leak in.
pub async fn agentsadm(args: &[&str], env: &[(String, String)]) -> Run {
    // Run logs go to a directory of the test's own, never the developer's
    // home (a caller's XDG_STATE_HOME in `env` wins).
    let state = tempfile::tempdir().expect("state dir");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"));
    cmd.env("XDG_STATE_HOME", state.path());
    cmd.args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .env("AGENTSADM_NO_PROGRESS", "1");
    for var in [
        "SAPI_URL",
        "CNAPI_URL",
        "IMGAPI_URL",
        "UPDATES_URL",
        "AGENTSADM_LOG",
        "AGENTSADM_TEST_CRASH_AT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("agentsadm {args:?} hung"))
        .expect("agentsadm runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Everything in a simulated datacenter a command could change: SAPI
/// services, instances and the `sdc` application's metadata, and every
/// server's CNAPI `server.agents`.
pub async fn dc_state(dc: &SimDc) -> BTreeMap<String, serde_json::Value> {
    let apis = dc.apis();
    let mut out = BTreeMap::new();
    let mut services = apis
        .sapi
        .list_agent_services()
        .await
        .expect("list services");
    services.sort_by_key(|s| s.uuid);
    out.insert(
        "services".to_string(),
        serde_json::to_value(&services).unwrap(),
    );
    let mut instances = apis
        .sapi
        .list_agent_instances()
        .await
        .expect("list instances");
    instances.sort_by_key(|i| i.uuid);
    out.insert(
        "instances".to_string(),
        serde_json::to_value(&instances).unwrap(),
    );
    let app = apis.sapi.sdc_application().await.expect("sdc application");
    out.insert(
        "sdc metadata".to_string(),
        serde_json::to_value(app.map(|a| a.metadata)).unwrap(),
    );
    for s in dc.servers() {
        out.insert(
            format!("server.agents {}", s.hostname),
            serde_json::to_value(dc.server_agents(s.uuid)).unwrap(),
        );
    }
    out
}

/// Panic with the differing keys when two states differ.
pub fn assert_same_state(
    before: &BTreeMap<String, serde_json::Value>,
    after: &BTreeMap<String, serde_json::Value>,
    what: &str,
) {
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "{what}: changed {changed:?}");
}
