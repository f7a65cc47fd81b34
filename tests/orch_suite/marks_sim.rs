//! Issue 25 end to end, through the binary against the simulated
//! datacenter: net-agent disabled on a server stays disabled (in the
//! server's SMF state) across `update --all --latest -y`, which still
//! upgrades it there, with `check` clean; vm-agent held on two servers is
//! skipped by `update --all`, with the hold's reason in the plan and the
//! run log; release lets it move.

use std::path::Path;

use agentsadm_sim::{SeedSpec, SimConfig, SimDc};

async fn cli(dc: &SimDc, state: &Path, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .run(args)
        .await
}

/// Whether the SMF `fmri` (`svc:/smartdc/agent/net-agent:default`) is an
/// instance of `component`'s service.
fn of_component(fmri: &str, component: &str) -> bool {
    fmri.rsplit('/')
        .next()
        .and_then(|last| last.split(':').next())
        .is_some_and(|service| service == component)
}

/// The states of the server's instances of `component`.
fn smf(dc: &SimDc, host: &str, component: &str) -> Vec<String> {
    let cn = dc.server(host).unwrap();
    let text = std::fs::read_to_string(cn.root.join("var/svc/smf-state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let states: Vec<String> = v["services"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(fmri, _)| of_component(fmri, component))
        .map(|(_, s)| s["state"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !states.is_empty(),
        "{component} has no SMF instance on {host}"
    );
    states
}

/// Set the state of the server's instances of `component` behind
/// agentsadm's back (as `svcadm` would).
fn set_smf(dc: &SimDc, host: &str, component: &str, state: &str) {
    let cn = dc.server(host).unwrap();
    let path = cn.root.join("var/svc/smf-state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (fmri, s) in v["services"].as_object_mut().unwrap().iter_mut() {
        if of_component(fmri, component) {
            s["state"] = state.into();
        }
    }
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Run `args` against `dc` (run logs in `state`), expect exit status
/// `code`, and snapshot what it printed (masked) under `name`; returns
/// stdout for the test's own checks.
async fn snap(dc: &SimDc, state: &Path, name: &str, args: &[&str], code: i32) -> String {
    let ran = cli(dc, state, args).await;
    let out = ran.1.clone();
    let text = crate::snapshot::command_text(ran, args, code);
    crate::snapshot::masked_snapshot!(name, text);
    out
}

fn version(dc: &SimDc, host: &str, component: &str) -> String {
    let cn = dc.server(host).unwrap();
    dc.server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == component)
        .map(|a| a.version.to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_net_agent_and_held_vm_agent_through_update_all_latest() {
    // Thirteen commands one after another, checked on the records and the
    // SMF states they leave: without SAPI's latency model (21 ms a write).
    let dc = crate::sim_common::records_dc(3, SeedSpec::with_newer()).await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    // Mock servers are written on first use: make them all now.
    for cn in dc.servers() {
        dc.gz_report(cn.uuid).await.unwrap();
    }

    snap(
        &dc,
        s,
        "marks_disable_net_agent",
        &[
            "disable",
            "net-agent",
            "-s",
            "cn0001",
            "--reason",
            "RFD 58 migration",
            "-y",
        ],
        0,
    )
    .await;
    assert!(
        smf(&dc, "cn0001", "net-agent")
            .iter()
            .all(|s| s == "disabled")
    );
    assert!(
        smf(&dc, "cn0002", "net-agent")
            .iter()
            .all(|s| s == "online")
    );
    // Recorded in SAPI on the instance, with who, when and why.
    let instances = dc.apis().sapi.list_agent_instances().await.unwrap();
    let marked: Vec<_> = instances
        .iter()
        .filter_map(|i| i.params.as_ref()?.get("agentsadm_disabled"))
        .collect();
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert_eq!(marked[0]["reason"], "RFD 58 migration");
    // Converged: disabling again plans nothing.
    snap(
        &dc,
        s,
        "marks_disable_again",
        &["disable", "net-agent", "-s", "cn0001", "-y"],
        0,
    )
    .await;

    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "hold",
            "vm-agent",
            "-s",
            "cn0001,cn0002",
            "--reason",
            "support case 4711",
            "-y",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    // `list` shows both marks.
    snap(
        &dc,
        s,
        "marks_list_disabled_and_held",
        &["list", "-s", "cn0001", "net-agent", "vm-agent"],
        0,
    )
    .await;
    let vm_before = version(&dc, "cn0001", "vm-agent");
    let net_before = version(&dc, "cn0001", "net-agent");

    let log = s.join("update.log");
    snap(
        &dc,
        s,
        "marks_update_all_latest",
        &[
            "update",
            "--all",
            "--latest",
            "-y",
            "--log-file",
            log.to_str().unwrap(),
        ],
        0,
    )
    .await;
    // net-agent upgraded on cn0001, and still disabled there.
    assert_ne!(version(&dc, "cn0001", "net-agent"), net_before);
    assert!(
        smf(&dc, "cn0001", "net-agent")
            .iter()
            .all(|s| s == "disabled"),
        "{:?}",
        smf(&dc, "cn0001", "net-agent")
    );
    assert!(
        smf(&dc, "cn0002", "net-agent")
            .iter()
            .all(|s| s == "online")
    );
    // vm-agent left where it was on the held servers, moved elsewhere.
    assert_eq!(version(&dc, "cn0001", "vm-agent"), vm_before);
    assert_eq!(version(&dc, "cn0002", "vm-agent"), vm_before);
    assert_ne!(version(&dc, "cn0003", "vm-agent"), vm_before);
    // The run log's records come in the order servers finish: the hold
    // is looked for among them (partial matching is the point).
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("held on this server by") && text.contains("support case 4711"),
        "the hold in the run log"
    );

    let (code, out, err) = cli(&dc, s, &["check"]).await;
    assert_eq!(code, 0, "check is clean: {out}\n{err}");
    let (code, out, err) = cli(&dc, s, &["check", "--live"]).await;
    assert_eq!(code, 0, "check --live is clean: {out}\n{err}");

    // Turned on behind agentsadm's back on cn0001 (svcadm enable), off on
    // cn0002: check --live says both, --fix disables cn0001's again and
    // leaves cn0002's to the operator.
    set_smf(&dc, "cn0001", "net-agent", "online");
    set_smf(&dc, "cn0002", "net-agent", "disabled");
    snap(
        &dc,
        s,
        "marks_check_live_smf_changed",
        &["check", "--live"],
        2,
    )
    .await;
    let (code, out, err) = cli(&dc, s, &["check", "--live", "--fix", "-y"]).await;
    assert!(code == 0 || code == 2, "{out}\n{err}");
    assert!(
        smf(&dc, "cn0001", "net-agent")
            .iter()
            .all(|s| s == "disabled"),
        "{out}"
    );
    assert!(
        smf(&dc, "cn0002", "net-agent")
            .iter()
            .all(|s| s == "disabled")
    );
    set_smf(&dc, "cn0002", "net-agent", "online");

    // --ignore-holds without -y is refused with the hold as the reason
    // (it once gave marlin-agent's), and changes nothing.
    snap(
        &dc,
        s,
        "marks_ignore_holds_needs_yes",
        &[
            "update",
            "vm-agent",
            "--latest",
            "-s",
            "cn0001",
            "--ignore-holds",
        ],
        1,
    )
    .await;
    assert_eq!(version(&dc, "cn0001", "vm-agent"), vm_before);

    // Released, the next bulk update moves them.
    let (code, _, err) = cli(
        &dc,
        s,
        &["release", "vm-agent", "-s", "cn0001,cn0002", "-y"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&dc, s, &["update", "--all", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_ne!(version(&dc, "cn0001", "vm-agent"), vm_before);
    assert!(
        smf(&dc, "cn0001", "net-agent")
            .iter()
            .all(|s| s == "disabled")
    );
}

/// A hold is planned and run like every change (issue 31): it takes the
/// datacenter lock, so a hold while another run holds it is refused and
/// changes nothing; without the run it is recorded, and a script needs -y.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_while_a_run_holds_the_lock_is_refused_and_changes_nothing() {
    use agentsadm_orchestrate::lock::{self, LockOptions, SapiLockStore};
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    for cn in dc.servers() {
        dc.gz_report(cn.uuid).await.unwrap();
    }
    let holds = || async {
        let instances = dc.apis().sapi.list_agent_instances().await.unwrap();
        instances
            .iter()
            .filter(|i| {
                i.params
                    .as_ref()
                    .is_some_and(|p| p.get("agentsadm_hold").is_some())
            })
            .count()
    };
    // In a script, a hold needs -y, as every change does.
    snap(
        &dc,
        s,
        "marks_hold_needs_yes",
        &["hold", "vm-agent", "-s", "cn0001"],
        1,
    )
    .await;
    assert_eq!(holds().await, 0);

    let store = SapiLockStore::new(dc.apis().sapi.clone()).await.unwrap();
    let held = lock::acquire(
        &store,
        "root@hn:4242",
        "update --all",
        &LockOptions::default(),
    )
    .await
    .unwrap();
    // Names the holder.
    snap(
        &dc,
        s,
        "marks_hold_lock_held",
        &["hold", "vm-agent", "-s", "cn0002", "-y"],
        1,
    )
    .await;
    assert_eq!(holds().await, 0, "nothing was written");
    held.release().await.unwrap();

    // Recorded as a run: a history entry.
    snap(
        &dc,
        s,
        "marks_hold_recorded",
        &["hold", "vm-agent", "-s", "cn0002", "-y"],
        0,
    )
    .await;
    assert_eq!(holds().await, 1);
    dc.shutdown().await;
}
