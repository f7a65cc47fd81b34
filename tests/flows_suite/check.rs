//! `agentsadm check` and `check --fix` against the simulated datacenter:
//! for each finding kind, make the drift through the APIs, find it, fix it,
//! and check again (nothing left). Plus the command line's exit statuses
//! and its `--json` document.

use std::process::Command;
use std::time::Duration;

use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::object;
use agentsadm_flows::drift::FindingKind;
use agentsadm_flows::drift::Fix;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

use crate::flows_common::*;
use crate::snapshot::{command_snapshot, command_text, masked_snapshot};

/// Find exactly `expected`, fix it, and find nothing after.
async fn find_fix_recheck(
    dc: &agentsadm_sim::SimDc,
    live: bool,
    expected: Vec<(String, String, FindingKind)>,
) -> agentsadm_flows::check::FixOutcome {
    let run = check(dc, live).await;
    assert_eq!(drift(&run), expected, "{}", run.render());
    assert_eq!(run.exit_status(), 2);
    let plan = run.repair_plan(dc.catalog());
    assert!(!plan.is_empty(), "{}", plan.render());
    assert_eq!(plan.manual, 0, "{}", plan.render());
    let outcome = fix(dc, &run).await;
    assert!(
        !outcome.repairs.failed(),
        "repairs failed: {:?}",
        outcome.repairs
    );
    assert_clean(&outcome.after);
    assert_eq!(outcome.exit_status(), 0);
    // A second, independent check agrees.
    assert_clean(&check(dc, live).await);
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_datacenter_is_clean_also_live() {
    let dc = small_dc().await;
    let run = check(&dc, false).await;
    assert_clean(&run);
    assert_eq!(run.servers_checked, 4);
    assert_eq!(run.exit_status(), 0);
    let live = check(&dc, true).await;
    assert_clean(&live);
    // The headnode and the two set-up compute nodes were asked.
    assert_eq!(live.live.len(), 3);
    assert!(live.repair_plan(dc.catalog()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_install() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let old = instance_of(&dc, cn, "cmon-agent").await.unwrap().uuid;
    // cn-agent's agents_uninstall task: the component goes, SAPI keeps the
    // instance (as the real one does).
    let apis = dc.apis();
    let task = apis
        .cnapi
        .uninstall_agents(cn, &["cmon-agent".to_string()])
        .await
        .unwrap();
    apis.cnapi
        .wait_task_done(task, Duration::from_secs(30))
        .await
        .unwrap();
    let outcome = find_fix_recheck(
        &dc,
        false,
        one("cn0001", "cmon-agent", FindingKind::MissingInstall),
    )
    .await;
    assert_eq!(outcome.repairs.replaced_deleted, 1);
    // Installed again, with one instance (the new one) in SAPI.
    let now = dc
        .server_agents(cn)
        .into_iter()
        .find(|a| a.name == "cmon-agent")
        .expect("cmon-agent reported again");
    let inst = instance_of(&dc, cn, "cmon-agent").await.unwrap();
    assert_eq!(now.uuid, Some(inst.uuid));
    assert_ne!(inst.uuid, old);
    assert!(apis.sapi.get_instance(old).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_image() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0002");
    let newer = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let inst = instance_of(&dc, cn, "vm-agent").await.unwrap().uuid;
    dc.apis()
        .sapi
        .update_instance(inst, &Update::params(instance_params(cn, newer)))
        .await
        .unwrap();
    let run = check(&dc, false).await;
    let f = run
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::WrongImage)
        .unwrap();
    assert!(matches!(&f.fix, Fix::Upgrade { image, .. } if image.uuid == newer));
    find_fix_recheck(
        &dc,
        false,
        one("cn0002", "vm-agent", FindingKind::WrongImage),
    )
    .await;
    let now = dc
        .server_agents(cn)
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap();
    assert_eq!(now.image_uuid, Some(newer));
    assert_eq!(now.uuid, Some(inst), "an upgrade keeps the instance");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_without_instance() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let inst = instance_of(&dc, cn, "smartlogin").await.unwrap().uuid;
    dc.apis().sapi.delete_instance(inst).await.unwrap();
    find_fix_recheck(
        &dc,
        false,
        one(
            "cn0001",
            "smartlogin",
            FindingKind::InstalledWithoutInstance,
        ),
    )
    .await;
    let back = instance_of(&dc, cn, "smartlogin").await.unwrap();
    assert_eq!(back.uuid, inst, "the UUID the server keeps is adopted");
    assert!(back.image_uuid().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_without_params() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0002");
    // Seeded as the agents' own postinstall scripts create them: no params
    // at all; server.agents names them. That is the server's instance,
    // not drift.
    let net = instance_of(&dc, cn, "net-agent").await.unwrap();
    assert!(net.params.is_none(), "{net:?}");
    assert_clean(&check(&dc, false).await);
    // Half its params (a server but no image) is drift, fixed in place.
    let inst = instance_of(&dc, cn, "cmon-agent").await.unwrap().uuid;
    dc.apis().sapi.delete_instance(inst).await.unwrap();
    put_instance(
        &dc,
        inst,
        "cmon-agent",
        Some(object([("server_uuid", serde_json::json!(cn))])),
    )
    .await;
    find_fix_recheck(
        &dc,
        false,
        one("cn0002", "cmon-agent", FindingKind::InstanceWithoutParams),
    )
    .await;
    let fixed = dc.apis().sapi.get_instance(inst).await.unwrap();
    assert_eq!(fixed.server_uuid(), Some(cn));
    assert!(fixed.image_uuid().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_instance() {
    let dc = small_dc().await;
    let hn = dc.headnode().uuid;
    let image = dc.default_image("vm-agent").unwrap();
    let extra = InstanceUuid::new_v4();
    put_instance(&dc, extra, "vm-agent", Some(instance_params(hn, image))).await;
    find_fix_recheck(
        &dc,
        false,
        one("headnode", "vm-agent", FindingKind::DuplicateInstance),
    )
    .await;
    assert!(dc.apis().sapi.get_instance(extra).await.is_err());
    assert!(instance_of(&dc, hn, "vm-agent").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_for_missing_and_unsetup_servers() {
    let dc = small_dc().await;
    let image = dc.default_image("firewaller").unwrap();
    let gone = ServerUuid::new_v4();
    let (a, b, c) = (
        InstanceUuid::new_v4(),
        InstanceUuid::new_v4(),
        InstanceUuid::new_v4(),
    );
    put_instance(&dc, a, "firewaller", Some(instance_params(gone, image))).await;
    // A legacy instance no server reports.
    put_instance(&dc, b, "amon-agent", None).await;
    // cn0003 was never set up.
    let cn3 = server(&dc, "cn0003");
    put_instance(&dc, c, "firewaller", Some(instance_params(cn3, image))).await;
    let run = check(&dc, false).await;
    let mut got = drift(&run);
    got.sort();
    let mut expected = vec![
        (
            "-".to_string(),
            "firewaller".to_string(),
            FindingKind::InstanceForMissingServer,
        ),
        (
            "-".to_string(),
            "amon-agent".to_string(),
            FindingKind::InstanceForMissingServer,
        ),
        (
            "cn0003".to_string(),
            "firewaller".to_string(),
            FindingKind::InstanceForUnsetupServer,
        ),
    ];
    expected.sort();
    assert_eq!(got, expected, "{}", run.render());
    let outcome = fix(&dc, &run).await;
    assert!(!outcome.repairs.failed(), "{:?}", outcome.repairs);
    assert_eq!(outcome.repairs.sapi_done, 3);
    assert_clean(&outcome.after);
    assert_clean(&check(&dc, false).await);
    for i in [a, b, c] {
        assert!(dc.apis().sapi.get_instance(i).await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cnapi_report() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let before = dc.server_agents(cn);
    // CNAPI loses one entry and has a wrong image for another.
    let mut stale: Vec<AgentEntry> = before
        .iter()
        .filter(|a| a.name != "hagfish-watcher")
        .cloned()
        .collect();
    for a in stale.iter_mut().filter(|a| a.name == "amon-relay") {
        a.image_uuid = Some(ImageUuid::new_v4());
        a.version = "0.9.0".parse().unwrap();
    }
    dc.apis()
        .cnapi
        .update_server_agents(cn, &stale)
        .await
        .unwrap();
    // Without --live, CNAPI is trusted: hagfish-watcher looks missing and
    // amon-relay looks wrong. With --live the server's own report wins and
    // only the stale report is drift.
    let plain = check(&dc, false).await;
    assert!(plain.has_drift());
    let mut expected = vec![
        (
            "cn0001".to_string(),
            "amon-relay".to_string(),
            FindingKind::StaleCnapiReport,
        ),
        (
            "cn0001".to_string(),
            "hagfish-watcher".to_string(),
            FindingKind::StaleCnapiReport,
        ),
    ];
    expected.sort();
    let outcome = find_fix_recheck(&dc, true, expected).await;
    assert_eq!(outcome.repairs.reports_posted, 1);
    let mut after = dc.server_agents(cn);
    let mut want = before.clone();
    after.sort();
    want.sort();
    assert_eq!(after, want);
    assert_clean(&check(&dc, false).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_defaults() {
    let dc = small_dc().await;
    let installed = dc.default_image("cmon-agent").unwrap();
    delete_service_param(&dc, "cmon-agent", "image_uuid").await;
    let svc = service(&dc, "net-agent").await;
    dc.apis()
        .sapi
        .update_service(
            svc,
            &Update::params(object([("image_uuid", ImageUuid::new_v4().to_string())])),
        )
        .await
        .unwrap();
    let mut expected = vec![
        (
            "-".to_string(),
            "cmon-agent".to_string(),
            FindingKind::ServiceWithoutDefaultImage,
        ),
        (
            "-".to_string(),
            "net-agent".to_string(),
            FindingKind::DefaultImageNotInImgapi,
        ),
    ];
    expected.sort();
    let run = check(&dc, false).await;
    let mut got = drift(&run);
    got.sort();
    assert_eq!(got, expected, "{}", run.render());
    let outcome = fix(&dc, &run).await;
    assert!(!outcome.repairs.failed(), "{:?}", outcome.repairs);
    assert_clean(&outcome.after);
    // The headnode's image became the default again.
    assert_eq!(dc.default_image("cmon-agent"), Some(installed));
    assert!(dc.default_image("net-agent").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmanaged_components_are_informational() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0002");
    let mut agents = dc.server_agents(cn);
    agents.push(AgentEntry {
        name: "cabase".parse().unwrap(),
        version: "1.0.3".parse().unwrap(),
        image_uuid: None,
        uuid: None,
    });
    dc.apis()
        .cnapi
        .update_server_agents(cn, &agents)
        .await
        .unwrap();
    let run = check(&dc, false).await;
    assert_eq!(drift(&run), vec![]);
    let f: Vec<_> = run
        .findings
        .iter()
        .map(|f| (f.kind, f.component.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        f,
        vec![(FindingKind::UnmanagedComponent, "cabase".to_string())]
    );
    assert_eq!(run.exit_status(), 0);
    assert!(run.repair_plan(dc.catalog()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_kinds_at_once_converge_in_one_fix() {
    let dc = small_dc().await;
    let (cn1, cn2) = (server(&dc, "cn0001"), server(&dc, "cn0002"));
    let apis = dc.apis();
    let task = apis
        .cnapi
        .uninstall_agents(cn2, &["firewaller".to_string()])
        .await
        .unwrap();
    apis.cnapi
        .wait_task_done(task, Duration::from_secs(30))
        .await
        .unwrap();
    let inst = instance_of(&dc, cn1, "vm-agent").await.unwrap().uuid;
    apis.sapi.delete_instance(inst).await.unwrap();
    put_instance(&dc, InstanceUuid::new_v4(), "cmon-agent", None).await;
    delete_service_param(&dc, "amon-agent", "image_uuid").await;
    let run = check(&dc, true).await;
    assert_eq!(drift(&run).len(), 4, "{}", run.render());
    let outcome = fix(&dc, &run).await;
    assert!(!outcome.repairs.failed(), "{:?}", outcome.repairs);
    assert_clean(&outcome.after);
    assert_clean(&check(&dc, true).await);
}

fn cli(dc: &agentsadm_sim::SimDc, args: &[&str]) -> std::process::Output {
    crate::cli_common::agentsadm(dc).output_blocking(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_exit_statuses_and_json() {
    let dc = small_dc().await;
    let agentsadm = crate::cli_common::agentsadm(&dc);
    // Clean: 0.
    command_snapshot!(agentsadm, "check_clean", &["check"], 0);

    // Drift: 2, with stable kinds in --json, and in text.
    let cn = server(&dc, "cn0001");
    let inst = instance_of(&dc, cn, "smartlogin").await.unwrap().uuid;
    dc.apis().sapi.delete_instance(inst).await.unwrap();
    command_snapshot!(agentsadm, "check_drift_json", &["check", "--json"], 2);
    command_snapshot!(agentsadm, "check_drift", &["check"], 2);

    // --fix without -y and without a terminal: refused, nothing changed.
    let before = dc.mutation_count();
    command_snapshot!(agentsadm, "check_fix_without_yes", &["check", "--fix"], 1);
    assert_eq!(dc.mutation_count(), before);
    // -n: the repair plan, nothing changed.
    command_snapshot!(agentsadm, "check_fix_dry_run", &["check", "--fix", "-n"], 2);
    assert_eq!(dc.mutation_count(), before);

    // Bad input: 1.
    command_snapshot!(
        agentsadm,
        "check_unknown_server",
        &["check", "-s", "nosuchhost"],
        1
    );

    // --fix -y: repaired, 0; a second check: 0.
    let out = tokio::task::block_in_place(|| cli(&dc, &["check", "--fix", "-y", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["executed"], true);
    assert_eq!(doc["after"]["findings"], serde_json::json!([]));
    crate::snapshot::masked_snapshot!("check_fix_yes_json", String::from_utf8_lossy(&out.stdout));
    let out = tokio::task::block_in_place(|| cli(&dc, &["check", "--live"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // APIs down: 1.
    let out = Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["check"])
        .env("SAPI_URL", "http://127.0.0.1:9")
        .env("CNAPI_URL", "http://127.0.0.1:9")
        .env("IMGAPI_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// SAPI naming an older image than a server runs: `--fix` would move it
/// back, so it says DOWNGRADE and needs -y; the closing line counts the
/// server step among the repairs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fix_that_downgrades_says_so_and_counts_every_repair() {
    let dc = small_dc().await;
    let cn = server(&dc, "cn0001");
    let apis = dc.apis();
    let older = dc
        .publish_component("vm-agent", &BuildOptions::new("0.9.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let inst = instance_of(&dc, cn, "vm-agent").await.unwrap().uuid;
    apis.sapi
        .update_instance(inst, &Update::params(instance_params(cn, older)))
        .await
        .unwrap();
    let agentsadm = crate::cli_common::agentsadm(&dc);
    // The image published above has a random UUID: its short forms (in
    // the version's git part and the short id) are masked.
    let short = older.to_string()[..8].to_string();
    let git = format!("g{}", &short[..7]);
    for (name, args, code) in [
        ("check_fix_downgrade_refused", &["check", "--fix"][..], 1),
        ("check_fix_downgrade_yes", &["check", "--fix", "-y"][..], 0),
    ] {
        let text = command_text(agentsadm.run(args).await, args, code)
            .replace(&short, "[OLDER]")
            .replace(&git, "g[OLDER]");
        masked_snapshot!(name, text);
    }
}

/// `check -x` leaves a server out of the check and of `--fix`: a hung
/// server need not hold the repair up to its task timeout (sdcadm's
/// habit). What it shows is neither reported nor repaired; the others are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_leaves_a_server_out_of_the_check_and_the_repair() {
    let dc = small_dc().await;
    let (cn1, cn2) = (server(&dc, "cn0001"), server(&dc, "cn0002"));
    for cn in [cn1, cn2] {
        let inst = instance_of(&dc, cn, "smartlogin").await.unwrap().uuid;
        dc.apis().sapi.delete_instance(inst).await.unwrap();
    }
    let out = tokio::task::block_in_place(|| cli(&dc, &["check", "-x", "cn0001", "--json"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hosts: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["hostname"].as_str())
        .collect();
    assert_eq!(hosts, ["cn0002"], "{doc}");
    let out = tokio::task::block_in_place(|| {
        cli(&dc, &["check", "--fix", "-y", "--exclude", "cn0001,cn0002"])
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(instance_of(&dc, cn1, "smartlogin").await.is_none());
    assert!(instance_of(&dc, cn2, "smartlogin").await.is_none());
    let out = tokio::task::block_in_place(|| cli(&dc, &["check", "--fix", "-y", "-x", "cn0001"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(instance_of(&dc, cn1, "smartlogin").await.is_none());
    assert!(instance_of(&dc, cn2, "smartlogin").await.is_some());
    // Without -x the rest is found: cn0001 was left alone, not lost.
    let out = tokio::task::block_in_place(|| cli(&dc, &["check"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("cn0001"));
}
