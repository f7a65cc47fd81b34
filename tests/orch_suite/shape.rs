//! The services of agentsadm, dockerlogger, gz-tools and sdcadm live in agentsadm's own
//! SAPI application, never in `sdc` (sdcadm 1.39.0 takes every agent
//! service there for its own: docs/triton/sdcadm.md §10). Records an
//! earlier version wrote in `sdc` move with their instance UUIDs, params
//! and metadata, and a move killed after any SAPI write is finished by
//! the next run (issue 29).

use std::collections::BTreeMap;

use serde_json::Value;

use agentsadm_api::SapiClient;
use agentsadm_api::sapi::{
    CreateInstance, CreateService, OWN_APPLICATION, OWN_SERVICES, ServiceType,
};
use agentsadm_orchestrate::shape::{MOVING_KEY, MoveOptions, ShapeError, move_out_of_sdc};
use agentsadm_sim::{SimConfig, SimDc};

/// Per own service: its params (journal aside) and its instances (UUID to
/// params and metadata); and the application each service is in.
type Snapshot = BTreeMap<String, (Value, BTreeMap<String, Value>, String)>;

async fn snapshot(sapi: &SapiClient) -> Snapshot {
    let sdc = sapi.sdc_application().await.unwrap().unwrap();
    let mut out = Snapshot::new();
    for s in sapi.list_agent_services().await.unwrap() {
        if !OWN_SERVICES.contains(&s.name.as_str()) {
            continue;
        }
        let app = if s.application_uuid == sdc.uuid {
            "sdc".to_string()
        } else {
            let a = sapi.get_application(s.application_uuid).await.unwrap();
            a.name
        };
        let insts = sapi
            .list_service_instances(s.uuid)
            .await
            .unwrap()
            .into_iter()
            .map(|i| {
                (
                    i.uuid.to_string(),
                    serde_json::json!({"params": i.params.unwrap_or_default(),
                                       "metadata": i.metadata.unwrap_or_default()}),
                )
            })
            .collect();
        let mut params = s.params.unwrap_or_default();
        params.remove(MOVING_KEY);
        let prev = out.insert(s.name.clone(), (Value::Object(params), insts, app));
        assert!(prev.is_none(), "two services named {}", s.name);
    }
    out
}

/// Put the own services back in `sdc`, as agentsadm before issue 29 wrote
/// them (the same UUIDs for their instances), and drop agentsadm's
/// application.
async fn old_shape(sapi: &SapiClient) {
    let sdc = sapi.sdc_application().await.unwrap().unwrap();
    for s in sapi.list_agent_services().await.unwrap() {
        if !OWN_SERVICES.contains(&s.name.as_str()) || s.application_uuid == sdc.uuid {
            continue;
        }
        let mut params = s.params.clone().unwrap_or_default();
        params.remove(MOVING_KEY);
        let old = sapi
            .create_service(&CreateService {
                name: s.name.clone(),
                application_uuid: sdc.uuid,
                service_type: Some(ServiceType::Agent),
                params: Some(params),
                metadata: s.metadata.clone(),
                manifests: s.manifests.clone(),
                uuid: None,
            })
            .await
            .unwrap();
        for i in sapi.list_service_instances(s.uuid).await.unwrap() {
            sapi.delete_instance(i.uuid).await.unwrap();
            sapi.create_instance(&CreateInstance {
                uuid: Some(i.uuid),
                service_uuid: Some(old.uuid),
                params: i.params.clone(),
                metadata: i.metadata.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        sapi.delete_service(s.uuid).await.unwrap();
    }
    if let Some(own) = sapi.own_application().await.unwrap() {
        sapi.delete_application(own.uuid).await.unwrap();
    }
}

fn in_app(snap: &Snapshot, app: &str) -> Snapshot {
    snap.iter()
        .map(|(k, (p, i, _))| (k.clone(), (p.clone(), i.clone(), app.to_string())))
        .collect()
}

async fn sim() -> SimDc {
    sim_of(3).await
}

async fn sim_of(servers: usize) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(servers)
            .populate(Default::default()),
    )
    .await
    .expect("simulator starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_datacenter_keeps_its_own_services_out_of_sdc() {
    let dc = sim().await;
    let snap = snapshot(&dc.apis().sapi).await;
    assert_eq!(
        snap.keys().map(String::as_str).collect::<Vec<_>>(),
        ["agentsadm", "dockerlogger", "gz-tools", "sdcadm"]
    );
    for (name, (_, insts, app)) in &snap {
        assert_eq!(app, OWN_APPLICATION, "{name} is in {app}");
        // dockerlogger is opt-in, sdcadm on the headnode only.
        let optional = ["dockerlogger", "sdcadm"].contains(&name.as_str());
        assert!(optional || !insts.is_empty(), "{name} has no instances");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_the_earlier_version_move_with_their_uuids() {
    let dc = sim().await;
    let sapi = &dc.apis().sapi;
    let want = snapshot(sapi).await;
    old_shape(sapi).await;
    assert_eq!(snapshot(sapi).await, in_app(&want, "sdc"));
    let report = move_out_of_sdc(sapi, MoveOptions::default()).await.unwrap();
    assert_eq!(
        report.services,
        ["agentsadm", "dockerlogger", "gz-tools", "sdcadm"]
    );
    let moved: usize = want.values().map(|(_, i, _)| i.len()).sum();
    assert_eq!(report.instances, moved);
    assert_eq!(snapshot(sapi).await, want);
    // Again: nothing to do.
    let again = move_out_of_sdc(sapi, MoveOptions::default()).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(snapshot(sapi).await, want);
}

/// Stopped after each SAPI write in turn (batches of 2 instances, so that
/// journals are written, used and cleared several times), then run again
/// in full: the records end as a move never interrupted leaves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_killed_after_any_write_is_finished_by_the_next_run() {
    // A headnode and one compute node: 5 instances to move, in batches of
    // 2, after each of the writes in turn: 29 stops, 3,342 SAPI requests
    // (1,440 writes) one after another, so without the real SAPI's latency
    // model (21 ms a write: 30 s of waiting), which the records moved do
    // not depend on.
    let dc = crate::sim_common::records_dc(1, Default::default()).await;
    let sapi = &dc.apis().sapi;
    let want = snapshot(sapi).await;
    let mut stops = 0;
    for limit in 0.. {
        old_shape(sapi).await;
        let partial = move_out_of_sdc(
            sapi,
            MoveOptions {
                batch: 2,
                stop_after_writes: Some(limit),
            },
        )
        .await;
        match partial {
            Err(ShapeError::Stopped { .. }) => stops += 1,
            Ok(_) => break,
            Err(e) => panic!("stopped after {limit} writes: {e}"),
        }
        // What a kill leaves: no instance is lost to sdcadm's eyes or ours.
        let mut seen = own_instance_ids(sapi).await;
        seen.extend(journaled(sapi).await);
        seen.sort();
        seen.dedup();
        let mut all: Vec<String> = want
            .values()
            .flat_map(|(_, i, _)| i.keys().cloned())
            .collect();
        all.sort();
        assert_eq!(seen, all, "after {limit} writes");
        let finished = move_out_of_sdc(
            sapi,
            MoveOptions {
                batch: 2,
                stop_after_writes: None,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("re-run after {limit} writes: {e}"));
        let _ = finished;
        assert_eq!(snapshot(sapi).await, want, "re-run after {limit} writes");
    }
    eprintln!("stopped at {stops} points");
    assert!(stops > 10, "only {stops} stop points");
}

/// The instances of every service named as an own one, wherever it is.
async fn own_instance_ids(sapi: &SapiClient) -> Vec<String> {
    let mut out = Vec::new();
    for s in sapi.list_agent_services().await.unwrap() {
        if OWN_SERVICES.contains(&s.name.as_str()) {
            for i in sapi.list_service_instances(s.uuid).await.unwrap() {
                out.push(i.uuid.to_string());
            }
        }
    }
    out
}

/// The UUIDs in every twin's journal.
async fn journaled(sapi: &SapiClient) -> Vec<String> {
    sapi.list_agent_services()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|s| s.params?.get(MOVING_KEY)?.as_object().cloned())
        .flat_map(|m| m.keys().cloned().collect::<Vec<_>>())
        .collect()
}

/// A changing run moves them, even one with nothing else to change (here
/// `adopt -y` on a datacenter with nothing to adopt), and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_changing_run_moves_them_even_with_nothing_to_do() {
    use agentsadm_orchestrate::adopt::{AdoptPlan, AdoptPlanner};
    use agentsadm_orchestrate::run::{RunOutcome, RunSettings};
    // Every instance with its params: nothing to adopt.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(agentsadm_sim::SeedSpec {
                agents_without_params: Vec::new(),
                ..Default::default()
            }),
    )
    .await
    .expect("simulator starts");
    let apis = dc.apis();
    let want = snapshot(&apis.sapi).await;
    old_shape(&apis.sapi).await;
    let planner = AdoptPlanner {
        apis: &apis,
        catalog: dc.catalog(),
        servers: Vec::new(),
    };
    let yes = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let operator = crate::flows_common::Script::new(&[], false, |_: &AdoptPlan| Vec::new());
    let outcome = crate::flows_common::sim_run(&apis, dc.catalog(), &yes, "adopt")
        .go(&planner, &operator, std::future::pending())
        .await
        .unwrap();
    assert!(matches!(outcome, RunOutcome::Empty(_)), "{outcome:?}");
    assert_eq!(snapshot(&apis.sapi).await, want);
}

/// The run history goes into the `agentsadm` application the services
/// use: of two (a failed service creation right after the application's
/// can leave one), the one with the smallest UUID, whatever order SAPI
/// lists them in (the simulator lists them as created).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_is_kept_in_the_application_the_services_use() {
    use agentsadm_orchestrate::history::{HistoryEntry, SapiHistory};
    use agentsadm_types::ids::RunId;
    let dc = sim_of(1).await;
    let sapi = dc.apis().sapi;
    let first = sapi.own_application().await.unwrap().unwrap();
    let sdc = sapi.sdc_application().await.unwrap().unwrap();
    let second = "00000000-0000-4000-8000-000000000001";
    let made = crate::sim_common::raw(
        reqwest::Method::POST,
        &format!("{}/applications", dc.urls().sapi),
        &[],
        Some(serde_json::json!({
            "name": OWN_APPLICATION, "owner_uuid": sdc.owner_uuid, "uuid": second
        })),
    )
    .await
    .unwrap();
    assert_eq!(made.status, 200, "{}", made.text);
    let listed: Vec<String> = sapi
        .list_applications(Some(OWN_APPLICATION))
        .await
        .unwrap()
        .iter()
        .map(|a| a.uuid.to_string())
        .collect();
    assert_eq!(listed, [first.uuid.to_string(), second.to_string()]);
    let own = sapi.own_application().await.unwrap().unwrap();
    assert_eq!(own.uuid.to_string(), second);

    let history = SapiHistory::new(sapi.clone());
    let id = RunId::from_u128(29);
    let entry = HistoryEntry {
        id: Some(id),
        operation: "update vm-agent".to_string(),
        started: "2026-12-02T01:00:00Z".to_string(),
        ..Default::default()
    };
    history.put(&entry).await.unwrap();
    let key = format!("run-{id}");
    let holds = |uuid| {
        let sapi = sapi.clone();
        let key = key.clone();
        async move {
            sapi.get_application(uuid)
                .await
                .unwrap()
                .metadata
                .contains_key(&key)
        }
    };
    assert!(holds(own.uuid).await, "not in the services' application");
    assert!(!holds(first.uuid).await, "in the first one listed");
    let read: Vec<_> = history.list().await.unwrap();
    assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), [Some(id)]);
    dc.shutdown().await;
}
