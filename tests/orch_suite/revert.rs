//! `agentsadm revert RUN` through the binary against the simulator: a
//! revert of a rollout returns the datacenter to the images it had before
//! (servers, SAPI service default and instances; `check` finds no drift),
//! is itself recorded and can be reverted; a server changed since by
//! another run is skipped, naming that run.

use std::collections::BTreeMap;

use serde_json::Value;

use super::history::{cli, runs, sim};
use agentsadm_sim::SimDc;

/// What a revert must put back: every server's vm-agent image, the
/// service default, and the image every vm-agent instance intends (its
/// params.image_uuid, or the service default for an instance without one,
/// as the seeded instances are: the revert writes the image explicitly,
/// which intends the same).
async fn images(dc: &SimDc) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for s in dc.servers() {
        let image = dc
            .server_agents(s.uuid)
            .into_iter()
            .find(|a| a.name == "vm-agent")
            .and_then(|a| a.image_uuid)
            .map(|i| i.to_string())
            .unwrap_or_default();
        out.insert(format!("server {}", s.hostname), image);
    }
    let apis = dc.apis();
    let services = apis.sapi.list_agent_services().await.unwrap();
    let svc = services.iter().find(|s| s.name == "vm-agent").unwrap();
    out.insert(
        "service default".into(),
        svc.image_uuid().map(|i| i.to_string()).unwrap_or_default(),
    );
    for i in apis.sapi.list_agent_instances().await.unwrap() {
        if i.service_uuid == svc.uuid {
            out.insert(
                format!("instance {}", i.uuid),
                i.image_uuid()
                    .or(svc.image_uuid())
                    .map(|i| i.to_string())
                    .unwrap_or_default(),
            );
        }
    }
    out
}

fn newest_id(runs: &[Value]) -> String {
    runs[0]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_returns_the_datacenter_to_the_images_it_had_before() {
    let dc = sim(3, 0).await;
    let state = tempfile::tempdir().unwrap();
    let before = images(&dc).await;
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let after = images(&dc).await;
    assert_ne!(before, after);
    let rollout = newest_id(&runs(&dc, state.path()).await);

    // The plan says what it reverts, per server, with the service default.
    let (code, plan, err) = cli(&dc, state.path(), &["revert", &rollout[..8], "-n"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        plan.contains(&format!("Reverts run {rollout} (update vm-agent")),
        "{plan}"
    );
    assert!(
        plan.contains("Plan: revert vm-agent (4 servers selected)"),
        "{plan}"
    );
    // Earlier images put back, not "upgrades".
    assert!(
        plan.contains("4 servers to change: 4 images put back, 0 installs"),
        "{plan}"
    );
    assert_eq!(images(&dc).await, after, "-n changed nothing");

    let (code, out, err) = cli(&dc, state.path(), &["revert", &rollout[..8], "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Reverted 4 of 4 servers"), "{out}");
    assert_eq!(images(&dc).await, before);
    let (code, out, err) = cli(&dc, state.path(), &["check"]).await;
    assert_eq!(code, 0, "check after the revert:\n{out}{err}");

    // The revert is in the history as reverting the rollout...
    let listed = runs(&dc, state.path()).await;
    assert_eq!(listed[0]["reverts"], rollout.as_str());
    assert_eq!(listed[0]["status"], "succeeded");
    // ... and can itself be reverted: back to the rollout's images.
    let revert = newest_id(&listed);
    let (code, out, err) = cli(&dc, state.path(), &["revert", &revert, "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(images(&dc).await, after);
    let (code, out, err) = cli(&dc, state.path(), &["check"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_changed_since_by_another_run_are_skipped_with_the_reason() {
    let dc = sim(3, 0).await;
    let state = tempfile::tempdir().unwrap();
    let before = images(&dc).await;
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let listed = runs(&dc, state.path()).await;
    let rollout = newest_id(&listed);
    let old = listed[0]["servers"][0]["steps"][0]["from"]
        .as_str()
        .unwrap()
        .to_string();
    // Another run puts cn0001 back by hand.
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &["update", &format!("vm-agent@{old}"), "-s", "cn0001", "-y"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let by_hand = newest_id(&runs(&dc, state.path()).await);

    let (code, out, err) = cli(&dc, state.path(), &["revert", &rollout, "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "changed since by run {} (update vm-agent@",
            &by_hand[..8]
        )) || out.contains(&format!(
            "changed since by run {} (update vm-agent",
            &by_hand[..8]
        )),
        "{out}"
    );
    assert!(out.contains("Reverted 3 of 3 servers"), "{out}");
    // Everything is as before: cn0001 by the other run, the rest by the
    // revert.
    let now = images(&dc).await;
    for (k, v) in &before {
        if k.starts_with("server ") || k == "service default" {
            assert_eq!(now.get(k), Some(v), "{k}");
        }
    }
    // Nothing left to put back.
    let (code, out, _) = cli(&dc, state.path(), &["revert", &rollout, "-y"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Nothing to put back."), "{out}");
}

/// A step whose install stood but whose health gate could not run is a
/// change the revert puts back (before, it counted as failed with nothing
/// changed, and the revert left that server on the new build).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_puts_back_an_install_whose_gate_could_not_run() {
    let dc = sim(2, 0).await;
    let state = tempfile::tempdir().unwrap();
    let before = images(&dc).await;
    let cn1 = dc.server("cn0001").unwrap().uuid;
    // Every command on cn0001 exits 1 without a result: its gate cannot run.
    dc.faults()
        .command_fault_on(cn1, agentsadm_sim::CommandFault::Exit(1));
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("the install itself finished"), "{out}");
    let listed = runs(&dc, state.path()).await;
    let step = listed[0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["hostname"] == "cn0001")
        .map(|s| s["steps"][0].clone())
        .unwrap();
    assert_eq!(step["status"], "installed-unchecked", "{step}");
    dc.faults().clear_command_fault(cn1);

    let (code, out, err) = cli(&dc, state.path(), &["revert", &newest_id(&listed), "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("cn0001"), "{out}");
    assert_eq!(images(&dc).await, before);
    let (code, out, err) = cli(&dc, state.path(), &["check"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

/// A server left running at an interrupt (SIGTERM mid-rollout) whose
/// install then finished on the server is put back by the revert, and
/// named (before, the history had its step "not-run" and the revert left
/// it on the new build without a word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_puts_back_a_server_left_running_at_an_interrupt() {
    use crate::one_at_a_time::{publish, records};
    let dc = crate::one_at_a_time::sim(3).await;
    dc.faults()
        .set_install_latency(agentsadm_sim::LatencySpec::fixed(1500));
    let before = records(&dc).await;
    let image = publish(&dc, "1.1.0");
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("run.log");
    let run = crate::outage::spawn_update(&dc, &log, image);
    let pid = run.id().expect("a pid");
    let (code, out, err) = crate::outage::after_first_server(run, || async {
        // The second server's task is under way (1.5 s an install).
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        crate::outage::send("TERM", pid).await;
    })
    .await;
    assert_eq!(code, 2, "{out}{err}");
    // The server in flight finishes on its own.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let listed = runs(&dc, state.path()).await;
    let left: Vec<String> = listed[0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"] == "interrupted")
        .map(|s| s["hostname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left.len(), 1, "{}", listed[0]);
    let now = records(&dc).await;
    assert_eq!(now[&left[0]].1, Some(image), "its install finished");

    let (code, out, err) = cli(&dc, state.path(), &["revert", &newest_id(&listed), "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&left[0]), "{out}");
    let after = records(&dc).await;
    for (host, was) in &before {
        assert_eq!(after[host].1, was.1, "{host} is back on its image: {out}");
    }
}
