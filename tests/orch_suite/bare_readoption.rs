//! A bare re-adoption outside any agentsadm run: an agent's postinstall
//! run by another tool (sdcadm, cn-agent's own install task, CNAPI's
//! install-agent path) posts its instance again with nothing but its UUID,
//! and SAPI replaces the whole record. The harness's `bare-adoption` check
//! found that `check` then said "No drift found" and the marks were lost
//! for good. Now:
//!
//! - the marks survive: each per-server mark has a second copy on the
//!   component's service (the ledger), which plans and `check` read;
//! - `check` reports the instance (text and --json) when agentsadm had
//!   recorded more for it (its history shows it wrote the instance there,
//!   or the ledger keeps a mark), and only then: a bare instance agentsadm
//!   never wrote (an agentsshar-era server's) is not drift;
//! - `check --fix` writes the instance back whole (server, the image the
//!   server runs, the marks).

use std::path::Path;

use serde_json::{Map, Value};

use agentsadm_api::sapi::CreateInstance;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::InstanceUuid;

use crate::records_kept::sim;

/// The instance `host` reports for `component`, and the image it runs.
fn reported(dc: &SimDc, host: &str, component: &str) -> (InstanceUuid, String) {
    let cn = dc.server(host).unwrap();
    let agent = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == component)
        .unwrap_or_else(|| panic!("{host} reports no {component}"));
    (
        agent.uuid.expect("an instance uuid"),
        agent.image_uuid.map(|u| u.to_string()).unwrap_or_default(),
    )
}

async fn params(dc: &SimDc, instance: InstanceUuid) -> Map<String, Value> {
    let got = dc.apis().sapi.get_instance(instance).await.unwrap();
    got.params.unwrap_or_default()
}

/// Post the instance again with only its UUID, as a postinstall does.
async fn readopt_bare(dc: &SimDc, host: &str, component: &str) -> InstanceUuid {
    let (instance, _) = reported(dc, host, component);
    let sapi = &dc.apis().sapi;
    let service = sapi.get_instance(instance).await.unwrap().service_uuid;
    sapi.create_instance(&CreateInstance {
        uuid: Some(instance),
        service_uuid: Some(service),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        params(dc, instance).await.is_empty(),
        "{host} {component}: the re-adoption replaced the whole record"
    );
    instance
}

/// The binary on `dc` with its own state, run by operator alice (the
/// marks name who made them).
fn cli(dc: &SimDc, state: &Path) -> crate::cli_common::Agentsadm {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .env("SUDO_USER", "alice")
}

async fn ok(dc: &SimDc, state: &Path, args: &[&str]) -> String {
    let (code, out, err) = cli(dc, state).run(args).await;
    assert_eq!(code, 0, "agentsadm {}: {out}{err}", args.join(" "));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_readoption_is_drift_and_check_fix_writes_the_record_back_whole() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (_, before) = reported(&dc, "cn0001", "vm-agent");
    ok(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    ok(
        &dc,
        s,
        &[
            "hold", "vm-agent", "-s", "cn0001", "--reason", "case 7", "-y",
        ],
    )
    .await;
    ok(
        &dc,
        s,
        &[
            "disable", "vm-agent", "-s", "cn0001", "--reason", "RFD 58", "-y",
        ],
    )
    .await;
    ok(&dc, s, &["check"]).await;

    // Outside any run: cn0001's vm-agent, which agentsadm wrote, and
    // cn0002's net-agent, which it never did (as every agentsshar-era
    // instance is).
    let vm = readopt_bare(&dc, "cn0001", "vm-agent").await;
    readopt_bare(&dc, "cn0002", "net-agent").await;

    let cli = cli(&dc, s);
    crate::snapshot::command_snapshot!(cli, "bare_readoption_check", &["check"], 2);
    crate::snapshot::command_snapshot!(cli, "bare_readoption_check_json", &["check", "--json"], 2);

    // The hold still holds: a bulk plan leaves cn0001 where it is.
    let out = ok(&dc, s, &["plan", "update", "vm-agent", "--image", &before]).await;
    assert!(out.contains("held on this server by"), "{out}");

    ok(&dc, s, &["check", "--fix", "-y"]).await;
    let (_, runs) = reported(&dc, "cn0001", "vm-agent");
    let p = params(&dc, vm).await;
    let cn1 = dc.server("cn0001").unwrap().uuid.to_string();
    assert_eq!(p.get("server_uuid").and_then(Value::as_str), Some(&*cn1));
    assert_eq!(p.get("image_uuid").and_then(Value::as_str), Some(&*runs));
    for mark in ["agentsadm_hold", "agentsadm_disabled"] {
        let by = p.get(mark).and_then(|m| m.get("reason"));
        assert!(by.is_some(), "{mark} written back: {p:?}");
    }
    ok(&dc, s, &["check"]).await;

    // Released and enabled: both copies of each mark are gone.
    ok(&dc, s, &["release", "vm-agent", "-s", "cn0001", "-y"]).await;
    ok(&dc, s, &["enable", "vm-agent", "-s", "cn0001", "-y"]).await;
    let service = dc.apis().sapi.get_instance(vm).await.unwrap().service_uuid;
    let svc = dc.apis().sapi.get_service(service).await.unwrap();
    let ledger: Vec<&String> = svc
        .params
        .iter()
        .flat_map(|p| p.keys())
        .filter(|k| k.contains(&cn1))
        .collect();
    assert!(ledger.is_empty(), "ledger keys left: {ledger:?}");
    let p = params(&dc, vm).await;
    assert!(
        !p.contains_key("agentsadm_hold") && !p.contains_key("agentsadm_disabled"),
        "{p:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_lost_to_a_bare_readoption_still_holds_and_is_written_back() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    // No agentsadm run has written cn0001's net-agent: only the marks.
    ok(
        &dc,
        s,
        &[
            "hold",
            "net-agent",
            "-s",
            "cn0001",
            "--reason",
            "case 9",
            "-y",
        ],
    )
    .await;
    let net = readopt_bare(&dc, "cn0001", "net-agent").await;
    let (code, out, err) = cli(&dc, s).run(&["check"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("instance-params-erased") && out.contains("the hold (by "),
        "{out}"
    );
    let out = ok(&dc, s, &["plan", "update", "net-agent", "--latest"]).await;
    assert!(out.contains("held on this server by"), "{out}");
    ok(&dc, s, &["check", "--fix", "-y"]).await;
    let p = params(&dc, net).await;
    assert!(p.contains_key("agentsadm_hold"), "{p:?}");
    assert!(p.contains_key("image_uuid"), "{p:?}");
    ok(&dc, s, &["check"]).await;
}

/// Every service param key that names `server` (the ledger's copies).
async fn ledger_keys_naming(dc: &SimDc, server: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for svc in dc.apis().sapi.list_agent_services().await.unwrap() {
        keys.extend(
            svc.params
                .iter()
                .flat_map(|p| p.keys())
                .filter(|k| k.contains(server))
                .map(|k| format!("{}: {k}", svc.name)),
        );
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_delete_takes_the_services_copies_of_its_marks_with_it() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    ok(&dc, s, &["hold", "vm-agent", "-s", "cn0001", "-y"]).await;
    ok(&dc, s, &["disable", "net-agent", "-s", "cn0001", "-y"]).await;
    ok(&dc, s, &["hold", "vm-agent", "-s", "cn0002", "-y"]).await;
    let cn1 = dc.server("cn0001").unwrap().uuid.to_string();
    let cn2 = dc.server("cn0002").unwrap().uuid.to_string();
    assert_eq!(ledger_keys_naming(&dc, &cn1).await.len(), 2);

    let out = ok(&dc, s, &["server", "delete", "cn0001", "-n"]).await;
    assert!(
        out.contains("the copy of params.agentsadm_hold kept on SAPI service vm-agent")
            && out.contains("the copy of params.agentsadm_disabled kept on SAPI service net-agent"),
        "{out}"
    );
    ok(&dc, s, &["server", "delete", "cn0001", "-y"]).await;
    // Nothing names the deleted server; the other server's hold is kept.
    assert_eq!(ledger_keys_naming(&dc, &cn1).await, Vec::<String>::new());
    assert_eq!(ledger_keys_naming(&dc, &cn2).await.len(), 1);
}

/// What an agentsadm from before the ledger left: marks on the instance
/// only (its params written whole, as that version wrote them).
async fn mark_the_old_way(dc: &SimDc, host: &str, component: &str, reason: &str) -> InstanceUuid {
    let (instance, image) = reported(dc, host, component);
    let server = dc.server(host).unwrap().uuid.to_string();
    let mark = serde_json::json!({"by": "bob", "at": "2026-11-20T10:00:00Z", "reason": reason});
    let update = agentsadm_api::sapi::Update::params(agentsadm_api::sapi::object([
        ("server_uuid", Value::String(server)),
        ("image_uuid", Value::String(image)),
        ("agentsadm_hold", mark.clone()),
        ("agentsadm_disabled", mark),
    ]));
    dc.apis()
        .sapi
        .update_instance(instance, &update)
        .await
        .unwrap();
    forget_the_migration(dc).await;
    instance
}

/// A datacenter an earlier agentsadm ran has no record that the marks
/// were copied: take it away where a run of this one wrote it.
async fn forget_the_migration(dc: &SimDc) {
    let sapi = &dc.apis().sapi;
    let Some(own) = sapi.own_application().await.unwrap() else {
        return;
    };
    let mut update = agentsadm_api::sapi::Update::params(agentsadm_api::sapi::object([(
        agentsadm_orchestrate::ledger::COPIED,
        Value::Null,
    )]));
    update.action = Some(agentsadm_api::sapi::UpdateAction::Delete);
    sapi.update_application(own.uuid, &update).await.unwrap();
}

/// SAPI's ListInstances requests clients made so far.
fn instance_lists(dc: &SimDc) -> u64 {
    dc.client_routes(agentsadm_sim::SimApi::Sapi)
        .get("GET /instances")
        .copied()
        .unwrap_or(0)
}

/// The migration is owed once: the run that copies the marks writes that
/// down on agentsadm's own application, and the runs after it read that
/// one application instead of every agent instance (main: every run read
/// all instances for it, 0.26-0.37 s of SAPI's time per 12,000 instances).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marks_are_copied_once_and_later_runs_read_no_instances_for_it() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    mark_the_old_way(&dc, "cn0001", "vm-agent", "case 7").await;
    let cn1 = dc.server("cn0001").unwrap().uuid.to_string();
    let (code, out, err) = cli(&dc, s).run(&["adopt", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ledger_keys_naming(&dc, &cn1).await.len(), 2);
    let own = dc.apis().sapi.own_application().await.unwrap().unwrap();
    assert!(
        own.params
            .contains_key(agentsadm_orchestrate::ledger::COPIED),
        "{:?}",
        own.params
    );

    // The same idle run with the migration written down, and without.
    let done = {
        let before = instance_lists(&dc);
        let (code, out, err) = cli(&dc, s).run(&["adopt", "-y"]).await;
        assert_eq!(code, 0, "{out}{err}");
        instance_lists(&dc) - before
    };
    forget_the_migration(&dc).await;
    let owed = {
        let before = instance_lists(&dc);
        let (code, out, err) = cli(&dc, s).run(&["adopt", "-y"]).await;
        assert_eq!(code, 0, "{out}{err}");
        instance_lists(&dc) - before
    };
    assert_eq!(
        done + 1,
        owed,
        "a run reads every instance {done} times once the copies are written down, {owed} times before"
    );
}

/// After an upgrade of agentsadm, marks its earlier version kept once do
/// not turn `check` red (main: exit 2, mark-kept-once, until one `check
/// --fix`): check says they are copied by the next changing run, which
/// copies them under the lock; then a bare re-adoption cannot lose them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_an_earlier_agentsadm_kept_once_are_copied_by_the_next_changing_run() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    mark_the_old_way(&dc, "cn0001", "vm-agent", "case 3").await;
    let cn1 = dc.server("cn0001").unwrap().uuid.to_string();
    assert_eq!(ledger_keys_naming(&dc, &cn1).await, Vec::<String>::new());

    let out = ok(&dc, s, &["check"]).await;
    assert!(
        out.contains("i mark-kept-once vm-agent: the hold (by bob")
            && out.contains("the next changing run does it under the lock"),
        "{out}"
    );

    // Any changing run (here of another component) makes the copies.
    let (code, out, err) = cli(&dc, s)
        .run(&["update", "net-agent", "--latest", "-y"])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("copied 2 per-server marks kept only on SAPI instances"),
        "{out}{err}"
    );
    let mut keys = ledger_keys_naming(&dc, &cn1).await;
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("vm-agent: agentsadm_disabled:{cn1}"),
            format!("vm-agent: agentsadm_hold:{cn1}"),
        ]
    );
    let out = ok(&dc, s, &["check"]).await;
    assert!(!out.contains("mark-kept-once"), "{out}");

    // Now a bare re-adoption loses nothing for good.
    let vm = readopt_bare(&dc, "cn0001", "vm-agent").await;
    ok(&dc, s, &["check", "--fix", "-y"]).await;
    let p = params(&dc, vm).await;
    let reason = |m: &str| p.get(m).and_then(|v| v.get("reason")).cloned();
    assert_eq!(
        reason("agentsadm_hold"),
        Some(Value::from("case 3")),
        "{p:?}"
    );
    assert_eq!(
        reason("agentsadm_disabled"),
        Some(Value::from("case 3")),
        "{p:?}"
    );
}

/// An instance that reached SAPI by `adopt` (not by a step) is in the run
/// history too (main: it was not, so its bare re-adoption was flagged only
/// when it carried a mark): after the adoption, a bare re-adoption is
/// drift; before it, the same bare instance is how agents adopt
/// themselves, and is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_adopt_wrote_is_drift_when_re_adopted_bare() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let vm = readopt_bare(&dc, "cn0001", "vm-agent").await;
    ok(&dc, s, &["check"]).await;

    ok(&dc, s, &["adopt", "-y"]).await;
    let p = params(&dc, vm).await;
    assert!(p.contains_key("image_uuid"), "adopt completed it: {p:?}");
    ok(&dc, s, &["check"]).await;

    readopt_bare(&dc, "cn0001", "vm-agent").await;
    let (code, out, err) = cli(&dc, s).run(&["check"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("instance-params-erased vm-agent"), "{out}");
    ok(&dc, s, &["check", "--fix", "-y"]).await;
    assert!(params(&dc, vm).await.contains_key("image_uuid"));
}

/// An update through `agentsadm gz` (execute) of an instance that lost
/// its marks to a bare re-adoption writes them back in the step's one
/// write (main: server and image only; the next check --fix restored
/// them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_update_writes_back_the_marks_the_instance_lost() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    ok(
        &dc,
        s,
        &[
            "disable", "vm-agent", "-s", "cn0001", "--reason", "RFD 58", "-y",
        ],
    )
    .await;
    let vm = readopt_bare(&dc, "cn0001", "vm-agent").await;
    ok(
        &dc,
        s,
        &[
            "update",
            "vm-agent",
            "--latest",
            "--transport",
            "execute",
            "-y",
        ],
    )
    .await;
    let p = params(&dc, vm).await;
    let reason = p.get("agentsadm_disabled").and_then(|m| m.get("reason"));
    assert_eq!(reason, Some(&Value::from("RFD 58")), "{p:?}");
    assert!(p.contains_key("image_uuid"), "{p:?}");
    ok(&dc, s, &["check"]).await;
}

/// A run with nothing to change copies them too (holding the lock, as it
/// moves records left in `sdc`), and so does `check --fix`, whose plan
/// made again under the lock then has nothing left to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_run_and_check_fix_copy_marks_kept_once() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let cn1 = dc.server("cn0001").unwrap().uuid.to_string();
    let cn2 = dc.server("cn0002").unwrap().uuid.to_string();
    mark_the_old_way(&dc, "cn0001", "vm-agent", "case 4").await;
    let (code, out, err) = cli(&dc, s).run(&["adopt", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("copied 2 per-server marks"),
        "{out}{err}"
    );
    assert_eq!(ledger_keys_naming(&dc, &cn1).await.len(), 2);

    mark_the_old_way(&dc, "cn0002", "net-agent", "case 5").await;
    ok(&dc, s, &["check", "--fix", "-y"]).await;
    assert_eq!(ledger_keys_naming(&dc, &cn2).await.len(), 2);
    let out = ok(&dc, s, &["check"]).await;
    assert!(!out.contains("mark-kept-once"), "{out}");
}

/// A mark on an instance whose server CNAPI no longer knows (deleted
/// behind agentsadm) is not copied: the copy would outlive the orphan
/// instance, which `check --fix` deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_of_a_server_cnapi_no_longer_knows_is_not_copied() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let instance = mark_the_old_way(&dc, "cn0001", "vm-agent", "case 6").await;
    let gone = "930896af-bf8c-48d4-885c-6573a94b1853";
    let update = agentsadm_api::sapi::Update::params(agentsadm_api::sapi::object([(
        "server_uuid",
        Value::from(gone),
    )]));
    dc.apis()
        .sapi
        .update_instance(instance, &update)
        .await
        .unwrap();
    mark_the_old_way(&dc, "cn0002", "net-agent", "case 6").await;
    let cn2 = dc.server("cn0002").unwrap().uuid.to_string();
    let (code, out, err) = cli(&dc, s).run(&["adopt", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ledger_keys_naming(&dc, gone).await, Vec::<String>::new());
    assert_eq!(ledger_keys_naming(&dc, &cn2).await.len(), 2);
}
