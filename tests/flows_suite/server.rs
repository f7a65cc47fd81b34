//! `agentsadm server delete|factory-reset` against the simulated
//! datacenter: no `type=agent` instance of the server is left (found by
//! params and by `server.agents`), other servers are untouched, a factory
//! reset that CNAPI would refuse deletes nothing, a run that failed half
//! way finishes when run again, and a re-run after the CNAPI record is gone
//! still cleans SAPI.

use std::collections::BTreeMap;
use std::time::Duration;

use agentsadm_api::sapi::Instance;
use agentsadm_flows::cleanup;
use agentsadm_flows::cleanup::CleanupError;
use agentsadm_flows::cleanup::CnapiOutcome;
use agentsadm_flows::cleanup::InstanceStatus;
use agentsadm_flows::cleanup::ServerAction;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

use crate::flows_common::*;
use crate::snapshot::{command_snapshot, masked_snapshot};

async fn dc_with_vms() -> SimDc {
    SimDc::start(SimConfig::default().servers(3).with_vms("cn0003", 2))
        .await
        .expect("simulator starts")
}

/// Every agent instance, keyed by the server its params name (legacy ones
/// under the nil UUID).
async fn instances_by_server(dc: &SimDc) -> BTreeMap<ServerUuid, Vec<Instance>> {
    let mut out: BTreeMap<ServerUuid, Vec<Instance>> = BTreeMap::new();
    for i in dc.apis().sapi.list_agent_instances().await.unwrap() {
        out.entry(i.server_uuid().unwrap_or(ServerUuid::from_u128(0)))
            .or_default()
            .push(i);
    }
    for v in out.values_mut() {
        v.sort_by_key(|i| i.uuid);
    }
    out
}

/// Make one of the server's instances legacy (no params), as the agents'
/// postinstall scripts create them; return its UUID.
async fn make_legacy(dc: &SimDc, server: ServerUuid, component: &str) -> InstanceUuid {
    let inst = instance_of(dc, server, component).await.unwrap().uuid;
    dc.apis().sapi.delete_instance(inst).await.unwrap();
    put_instance(dc, inst, component, None).await;
    inst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_every_instance_of_the_server_only() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let legacy = make_legacy(&dc, cn, "vm-agent").await;
    let before = instances_by_server(&dc).await;
    let own = before[&cn].len();
    assert!(own > 5);

    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, "cn0001")
        .await
        .unwrap();
    assert_eq!(plan.server, cn);
    // Params-linked plus the legacy ones found through server.agents (the
    // one made here, and vm-agent's and net-agent's, seeded without params
    // as real postinstalls leave them).
    let reported: Vec<InstanceUuid> = dc
        .server_agents(cn)
        .into_iter()
        .filter_map(|a| a.uuid)
        .collect();
    let legacy_of_cn: Vec<InstanceUuid> = before
        .get(&ServerUuid::from_u128(0))
        .into_iter()
        .flatten()
        .map(|i| i.uuid)
        .filter(|u| reported.contains(u))
        .collect();
    assert!(legacy_of_cn.contains(&legacy) && legacy_of_cn.len() > 1);
    assert_eq!(plan.instances.len(), own + legacy_of_cn.len());
    for uuid in &legacy_of_cn {
        let l = plan.instances.iter().find(|i| i.uuid == *uuid).unwrap();
        assert_eq!(l.via, vec!["server.agents"]);
    }

    let report = cleanup_yes(&dc, ServerAction::Delete, "cn0001", &|| nothing()).await;
    assert_eq!(report.exit_status(), 0, "{report:?}");
    assert_eq!(report.cnapi, CnapiOutcome::Deleted);
    assert!(dc.record(cn).is_none());

    let after = instances_by_server(&dc).await;
    assert!(!after.contains_key(&cn));
    assert!(dc.apis().sapi.get_instance(legacy).await.is_err());
    // Nobody else lost anything.
    let mut others = before.clone();
    others.remove(&cn);
    let legacy_bucket = ServerUuid::from_u128(0);
    if let Some(v) = others.get_mut(&legacy_bucket) {
        v.retain(|i| !legacy_of_cn.contains(&i.uuid));
        if v.is_empty() {
            others.remove(&legacy_bucket);
        }
    }
    assert_eq!(after, others);
    // And a drift check finds nothing left behind.
    assert_clean(&check(&dc, false).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_failure_finishes_on_the_next_run() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0002");
    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, &cn.to_string())
        .await
        .unwrap();
    let n = plan.instances.len();
    // An earlier run got through a few before failing.
    for i in plan.instances.iter().take(3) {
        dc.apis().sapi.delete_instance(i.uuid).await.unwrap();
    }
    // SAPI fails every instance delete now (more than the client
    // retries); the run's lock and history still work.
    dc.faults().fail_sapi_deletes(10_000);
    let report = cleanup_yes(&dc, ServerAction::Delete, &cn.to_string(), &|| nothing()).await;
    assert_eq!(report.exit_status(), 2);
    assert!(matches!(report.cnapi, CnapiOutcome::NotRun { .. }));
    assert!(
        dc.record(cn).is_some(),
        "CNAPI is not called before SAPI is clean"
    );
    assert!(
        report
            .instances
            .iter()
            .any(|i| i.status == InstanceStatus::Failed)
    );
    dc.faults().clear();

    // Re-run: the rest goes, then CNAPI.
    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, "cn0002")
        .await
        .unwrap();
    assert_eq!(plan.instances.len(), n - 3);
    let report = cleanup_yes(&dc, ServerAction::Delete, "cn0002", &|| nothing()).await;
    assert_eq!(report.exit_status(), 0, "{report:?}");
    assert!(dc.record(cn).is_none());
    assert!(!instances_by_server(&dc).await.contains_key(&cn));

    // Once more: nothing in CNAPI, nothing in SAPI: nothing left.
    let err = cleanup::prepare(&dc.apis(), ServerAction::Delete, &cn.to_string())
        .await
        .unwrap_err();
    assert!(matches!(err, CleanupError::NothingLeft { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_after_the_cnapi_record_is_gone_cleans_sapi() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let own = instances_by_server(&dc).await[&cn].len();
    // `sdc-server delete`: CNAPI only (TRITON-416).
    dc.apis().cnapi.delete_server(cn).await.unwrap();
    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, &cn.to_string())
        .await
        .unwrap();
    assert!(!plan.in_cnapi);
    assert_eq!(plan.instances.len(), own);
    let report = cleanup_yes(&dc, ServerAction::Delete, &cn.to_string(), &|| nothing()).await;
    assert_eq!(report.cnapi, CnapiOutcome::AlreadyGone);
    assert_eq!(report.exit_status(), 0);
    assert!(!instances_by_server(&dc).await.contains_key(&cn));
    // A hostname CNAPI no longer knows cannot be resolved.
    let err = cleanup::prepare(&dc.apis(), ServerAction::Delete, "cn0001")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown server cn0001"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_reset_cleans_up_and_resets() {
    let dc = dc_with_vms().await;
    let cn = server(&dc, "cn0001");
    let other = server(&dc, "cn0002");
    let legacy = make_legacy(&dc, cn, "smartlogin").await;
    let before = instances_by_server(&dc).await;
    let report = cleanup_yes(&dc, ServerAction::FactoryReset, "cn0001", &|| nothing()).await;
    assert_eq!(report.exit_status(), 0, "{report:?}");
    assert!(matches!(
        report.cnapi,
        CnapiOutcome::ResetStarted {
            agents_cleared: true,
            ..
        }
    ));
    let after = instances_by_server(&dc).await;
    assert!(!after.contains_key(&cn));
    assert!(dc.apis().sapi.get_instance(legacy).await.is_err());
    assert_eq!(after.get(&other), before.get(&other));
    assert!(dc.server_agents(cn).is_empty());
    // The reset job finishes: the record stays, not set up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while dc.record(cn).is_some_and(|r| r.setup) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reset never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dc.record(cn).is_some());
    assert_clean(&check(&dc, false).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_reset_with_vms_is_refused_without_deleting_anything() {
    let dc = dc_with_vms().await;
    let cn = server(&dc, "cn0003");
    let before = dc.mutation_count();
    let err = cleanup::prepare(&dc.apis(), ServerAction::FactoryReset, "cn0003")
        .await
        .unwrap_err();
    assert!(matches!(err, CleanupError::HasVms { vms: 2, .. }), "{err}");
    assert!(err.to_string().contains("nothing was changed"));
    assert_eq!(dc.mutation_count(), before);
    assert!(instances_by_server(&dc).await.contains_key(&cn));

    // VMs that appear between the plan and the reset (added once the run
    // made the plan it executes): CNAPI's 409 with a bare string body is
    // reported as CNAPI said it.
    let cn1 = server(&dc, "cn0001");
    let report = cleanup_yes(&dc, ServerAction::FactoryReset, "cn0001", &|| {
        dc.add_vms(cn1, 1);
        nothing()
    })
    .await;
    assert_eq!(report.exit_status(), 2);
    match &report.cnapi {
        CnapiOutcome::Failed { message } => {
            assert!(
                message.contains("may not be reset because it has 1 vms"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(dc.record(cn1).is_some_and(|r| r.setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_read_through_server_list_not_server_get() {
    // ServerGet waits on VMAPI (15 s a call while it is down): by UUID, by
    // hostname, and for a UUID CNAPI no longer has, the record (with the
    // VMs a factory reset checks) comes from ServerList.
    let mut config = SimConfig::default().servers(3).with_vms("cn0003", 2);
    config.vmapi_down_server_get_ms = 50;
    let dc = SimDc::start(config).await.expect("sim starts");
    dc.faults().set_vmapi_down(true);
    let cn1 = server(&dc, "cn0001");
    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, &cn1.to_string())
        .await
        .unwrap();
    assert_eq!((plan.server, plan.in_cnapi), (cn1, true));
    assert!(!plan.instances.is_empty());
    let err = cleanup::prepare(&dc.apis(), ServerAction::FactoryReset, "cn0003")
        .await
        .unwrap_err();
    assert!(matches!(err, CleanupError::HasVms { vms: 2, .. }), "{err}");
    let gone = server(&dc, "cn0002");
    dc.apis().cnapi.delete_server(gone).await.unwrap();
    let plan = cleanup::prepare(&dc.apis(), ServerAction::Delete, &gone.to_string())
        .await
        .unwrap();
    assert!(!plan.in_cnapi);
    assert_eq!(dc.server_gets(), 0, "no ServerGet: it waits for VMAPI");
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_for_the_headnode_and_servers_that_are_down() {
    let dc = small_dc().await;
    let err = cleanup::prepare(&dc.apis(), ServerAction::Delete, "headnode")
        .await
        .unwrap_err();
    assert!(matches!(err, CleanupError::Headnode { .. }), "{err}");
    let cn = server(&dc, "cn0002");
    dc.set_running(cn, false);
    let err = cleanup::prepare(&dc.apis(), ServerAction::FactoryReset, "cn0002")
        .await
        .unwrap_err();
    assert!(matches!(err, CleanupError::NotRunning { .. }), "{err}");
    // Deleting a server that is down is fine (its record goes).
    assert!(
        cleanup::prepare(&dc.apis(), ServerAction::Delete, "cn0002")
            .await
            .is_ok()
    );
}

fn cli(dc: &SimDc, args: &[&str]) -> std::process::Output {
    crate::cli_common::agentsadm(dc).output_blocking(args)
}

/// [`cli`] with run logs kept in `state` (one machine's runs, one after
/// the other).
fn cli_in(dc: &SimDc, state: &std::path::Path, args: &[&str]) -> std::process::Output {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .output_blocking(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line() {
    let dc = dc_with_vms().await;
    let cn = server(&dc, "cn0001");
    // Unknown server: 1, nothing changed.
    let agentsadm = crate::cli_common::agentsadm(&dc);
    let before = dc.mutation_count();
    command_snapshot!(
        agentsadm,
        "server_delete_unknown",
        &["server", "delete", "nosuchhost", "-y"],
        1
    );
    // VMs: refused, 1, nothing changed.
    command_snapshot!(
        agentsadm,
        "server_factory_reset_with_vms",
        &["server", "factory-reset", "cn0003", "-y"],
        1
    );
    // Without -y and no terminal: refused, the plan shown.
    command_snapshot!(
        agentsadm,
        "server_delete_without_yes",
        &["server", "delete", "cn0001"],
        1
    );
    assert_eq!(dc.mutation_count(), before);
    // Dry run, text and --json.
    command_snapshot!(
        agentsadm,
        "server_delete_dry_run",
        &["server", "delete", "cn0001", "-n"],
        0
    );
    command_snapshot!(
        agentsadm,
        "server_delete_dry_run_json",
        &["server", "delete", "cn0001", "-n", "--json"],
        0
    );
    assert_eq!(dc.mutation_count(), before);
    // Delete for real, by hostname, --json: the run log (its path in the
    // document) has every SAPI instance deleted and the CNAPI call.
    let state = tempfile::tempdir().unwrap();
    let out = tokio::task::block_in_place(|| {
        cli_in(
            &dc,
            state.path(),
            &["server", "delete", "cn0001", "-y", "--json"],
        )
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    masked_snapshot!("server_delete_json", String::from_utf8_lossy(&out.stdout));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["result"]["cnapi"]["status"], "deleted");
    let instances = doc["plan"]["instances"].as_array().unwrap();
    assert!(instances.len() > 5);
    assert!(dc.record(cn).is_none());
    let log = std::fs::read_to_string(doc["log"].as_str().expect("the log's path")).unwrap();
    assert!(doc["log"].as_str().unwrap().ends_with("-server-delete.log"));
    for i in instances {
        let call = format!(
            "SAPI DELETE /instances/{}: done",
            i["uuid"].as_str().unwrap()
        );
        assert!(log.contains(&call), "{call}");
    }
    assert!(
        log.contains(&format!("CNAPI DELETE /servers/{cn}: done")),
        "{log}"
    );
    assert!(log.contains("\"exit_status\":0"), "{log}");
    // The history counts the deleted server as changed (its records were:
    // no step ran on it), and the run says how many records it made.
    let out = tokio::task::block_in_place(|| {
        cli_in(
            &dc,
            state.path(),
            &["history", "-H", "-o", "changed,failed"],
        )
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let row = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(row, ["1", "0"], "{out:?}");
    let out = tokio::task::block_in_place(|| cli_in(&dc, state.path(), &["history", "--json"]));
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &runs["runs"][0];
    assert_eq!(run["records_made"], instances.len() + 1, "{run}");
    assert_eq!(run["record_servers"][0], cn.to_string(), "{run}");
    // Run again, by hostname: the earlier run's log says which server it
    // was; nothing is left: 0.
    let out = tokio::task::block_in_place(|| {
        cli_in(&dc, state.path(), &["server", "delete", "cn0001", "-y"])
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    masked_snapshot!("server_delete_again", String::from_utf8_lossy(&out.stdout));
    // And by UUID (from anywhere): 0, nothing left.
    let uuid = cn.to_string();
    command_snapshot!(
        agentsadm,
        "server_delete_again_by_uuid",
        &["server", "delete", &uuid, "-y"],
        0
    );
    // A leftover the CNAPI delete left behind is still cleaned by UUID.
    let image = dc.default_image("vm-agent").unwrap();
    put_instance(
        &dc,
        InstanceUuid::new_v4(),
        "vm-agent",
        Some(instance_params(cn, image)),
    )
    .await;
    let out =
        tokio::task::block_in_place(|| cli(&dc, &["server", "delete", &cn.to_string(), "-y"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    masked_snapshot!(
        "server_delete_leftover_by_uuid",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!instances_by_server(&dc).await.contains_key(&cn));
}
