//! Records (issue 22), against the simulated datacenter:
//!
//! - `check --fix` never deletes an instance UUID a server reports: one
//!   whose `params.server_uuid` names another server gets its params
//!   corrected (the old repair deleted it as that server's duplicate);
//!   one that two servers report is left as a manual finding with the
//!   command to run.
//! - One server whose `server.agents` is malformed (a bad UUID, a 10 MB
//!   name) or lists an agent twice is set aside with a finding naming the
//!   field; `list`, `check`, `update` and `check --fix` go on for every
//!   other server, every echoed value bounded, and `list` and `check` give
//!   one answer for the duplicate.
//!
//! Each checks the SAPI instances and CNAPI `server.agents` before and
//! after.

use std::collections::BTreeMap;
use std::process::Command;

use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::object;
use agentsadm_flows::drift::{FindingKind, Fix};
use agentsadm_sim::{BuildOptions, PublishTarget, SeedSpec, SimConfig, SimDc};
use agentsadm_types::ids::{InstanceUuid, ServerUuid};

use crate::flows_common::{assert_clean, check, fix, instance_of, server};

const COMPONENT: &str = "cmon-agent";

async fn sim(cns: usize) -> SimDc {
    SimDc::start(SimConfig::default().servers(cns).populate(SeedSpec {
        agents_without_params: Vec::new(),
        ..SeedSpec::default()
    }))
    .await
    .expect("simulator starts")
}

/// Every agent instance in SAPI (UUID -> params), and every server's
/// `server.agents` as CNAPI serves it.
async fn snapshot(
    dc: &SimDc,
) -> (
    BTreeMap<InstanceUuid, serde_json::Value>,
    BTreeMap<ServerUuid, serde_json::Value>,
) {
    let sapi = dc
        .apis()
        .sapi
        .list_agent_instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| (i.uuid, serde_json::to_value(&i.params).unwrap()))
        .collect();
    let mut cnapi = BTreeMap::new();
    for s in dc.servers() {
        let url = format!("{}/servers?uuids={}&extras=agents", dc.urls().cnapi, s.uuid);
        let list = crate::sim_common::get(&url).await.json();
        cnapi.insert(s.uuid, list[0]["agents"].clone());
    }
    (sapi, cnapi)
}

async fn set_server_uuid(dc: &SimDc, instance: InstanceUuid, server: ServerUuid) {
    dc.apis()
        .sapi
        .update_instance(
            instance,
            &Update::params(object([("server_uuid", server.to_string())])),
        )
        .await
        .unwrap();
}

/// cn0001 reports its cmon-agent instance X, whose `params.server_uuid`
/// names cn0002 (which has its own). `check` finds X filed under the wrong
/// server and proposes to correct its params; `check --fix` does, deletes
/// nothing, and the next `check` is clean: X still exists, now naming
/// cn0001, and CNAPI is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_corrects_an_instance_filed_under_another_server_never_deletes_it() {
    let dc = sim(2).await;
    let (cn1, cn2) = (server(&dc, "cn0001"), server(&dc, "cn0002"));
    let x = instance_of(&dc, cn1, COMPONENT).await.unwrap().uuid;
    let y = instance_of(&dc, cn2, COMPONENT).await.unwrap().uuid;
    set_server_uuid(&dc, x, cn2).await;
    let (sapi_before, cnapi_before) = snapshot(&dc).await;

    let run = check(&dc, false).await;
    let about_x: Vec<_> = run
        .findings
        .iter()
        .filter(|f| f.instance == Some(x))
        .collect();
    assert_eq!(about_x.len(), 1, "{}", run.render());
    assert_eq!(about_x[0].kind, FindingKind::InstanceNamesOtherServer);
    assert_eq!(about_x[0].server, Some(cn1));
    assert!(matches!(about_x[0].fix, Fix::SetParams { instance, .. } if instance == x));
    assert!(
        !run.findings
            .iter()
            .any(|f| matches!(f.fix, Fix::DeleteInstance { .. })),
        "{}",
        run.render()
    );

    let outcome = fix(&dc, &run).await;
    assert_clean(&outcome.after);
    let (sapi_after, cnapi_after) = snapshot(&dc).await;
    assert_eq!(sapi_after.len(), sapi_before.len(), "nothing deleted");
    assert_eq!(sapi_after[&x]["server_uuid"], cn1.to_string());
    assert_eq!(
        sapi_after[&y], sapi_before[&y],
        "cn0002's own instance untouched"
    );
    for (i, params) in &sapi_before {
        if *i != x {
            assert_eq!(&sapi_after[i], params);
        }
    }
    assert_eq!(cnapi_after, cnapi_before);
    assert_clean(&check(&dc, false).await);
    dc.shutdown().await;
}

/// cn0002's `server.agents` claims cn0001's instance X too (a cloned
/// server): neither the instance cn0002 has in SAPI nor X is deleted or
/// moved; the finding is manual, with the command to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_two_servers_report_is_left_to_the_operator() {
    let dc = sim(2).await;
    let (cn1, cn2) = (server(&dc, "cn0001"), server(&dc, "cn0002"));
    let x = instance_of(&dc, cn1, COMPONENT).await.unwrap().uuid;
    let mut agents = dc.server_agents(cn2);
    for a in agents.iter_mut().filter(|a| a.name == COMPONENT) {
        a.uuid = Some(x);
    }
    dc.apis()
        .cnapi
        .update_server_agents(cn2, &agents)
        .await
        .unwrap();
    let (sapi_before, cnapi_before) = snapshot(&dc).await;

    let run = check(&dc, false).await;
    let text = run.render();
    let about_x: Vec<_> = run
        .findings
        .iter()
        .filter(|f| f.instance == Some(x) || f.server == Some(cn2))
        .filter(|f| f.component.as_deref() == Some(COMPONENT))
        .collect();
    assert!(!about_x.is_empty(), "{text}");
    for f in &about_x {
        match &f.fix {
            Fix::Manual { hint } => assert!(
                hint.contains("sdc-sapi /instances/") || hint.contains("report"),
                "{hint}"
            ),
            Fix::AdoptInstance { replaces, .. } => assert!(replaces.is_none(), "{f:?}"),
            other => panic!("not left alone: {other:?}\n{text}"),
        }
    }
    // Whatever --fix does, no instance is deleted and X stays cn0001's.
    fix(&dc, &run).await;
    let (sapi_after, cnapi_after) = snapshot(&dc).await;
    for i in sapi_before.keys() {
        assert!(sapi_after.contains_key(i), "{i} deleted");
    }
    assert_eq!(sapi_after[&x]["server_uuid"], cn1.to_string());
    assert_eq!(cnapi_after, cnapi_before);
    dc.shutdown().await;
}

fn cli(dc: &SimDc, args: &[&str]) -> (i32, String, String) {
    let urls = dc.urls();
    let state = tempfile::tempdir().expect("state dir");
    let out = Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(args)
        .env("XDG_STATE_HOME", state.path())
        .env("SAPI_URL", &urls.sapi)
        .env("CNAPI_URL", &urls.cnapi)
        .env("IMGAPI_URL", &urls.imgapi)
        .env("UPDATES_URL", &urls.updates)
        .env("AGENTSADM_NO_PROGRESS", "1")
        .output()
        .expect("agentsadm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Post `agents` as `server`'s `server.agents`, as anything with CNAPI's
/// URL can (CNAPI only checks that it is an array).
async fn post_agents(dc: &SimDc, server: ServerUuid, agents: serde_json::Value) {
    let url = format!("{}/servers/{server}", dc.urls().cnapi);
    let r = crate::sim_common::raw(
        reqwest::Method::POST,
        &url,
        &[],
        Some(serde_json::json!({ "agents": agents })),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 204, "{}", r.text);
}

/// cn0001 reports a bad instance UUID, cn0002 a 10 MB agent name, cn0003
/// its cmon-agent twice (two versions). Each is set aside with one finding
/// naming the field; `list`, `check`, `update` and `check --fix` go on for
/// the headnode, cn0004 and cn0005, nothing they print is large, and the
/// set-aside servers' records stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_server_agents_sets_one_server_aside_not_the_datacenter() {
    let dc = sim(5).await;
    let image = dc
        .publish_component(COMPONENT, &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let [cn1, cn2, cn3] = ["cn0001", "cn0002", "cn0003"].map(|h| server(&dc, h));
    let with = |s: ServerUuid, extra: serde_json::Value| {
        let mut v = serde_json::to_value(dc.server_agents(s)).unwrap();
        v.as_array_mut().unwrap().push(extra);
        v
    };
    let cmon = dc
        .server_agents(cn3)
        .into_iter()
        .find(|a| a.name == COMPONENT)
        .unwrap();
    post_agents(
        &dc,
        cn1,
        with(
            cn1,
            serde_json::json!({"name": "smartlogin", "version": "1.0.0", "uuid": "not-a-uuid"}),
        ),
    )
    .await;
    post_agents(
        &dc,
        cn2,
        with(
            cn2,
            serde_json::json!({"name": "x".repeat(10 << 20), "version": "1.0.0"}),
        ),
    )
    .await;
    post_agents(
        &dc,
        cn3,
        with(
            cn3,
            serde_json::json!({"name": COMPONENT, "version": "0.9.0",
        "image_uuid": cmon.image_uuid, "uuid": cmon.uuid}),
        ),
    )
    .await;
    let aside = [cn1, cn2, cn3];
    let (sapi_before, cnapi_before) = snapshot(&dc).await;

    // list: every server, the set-aside ones as quarantined.
    let (code, out, err) = tokio::task::block_in_place(|| cli(&dc, &["list", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.len() < 200_000, "bounded: {} bytes", out.len());
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    for s in aside {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r["server"] == s.to_string())
            .collect();
        assert!(
            !mine.is_empty() && mine.iter().all(|r| r["state"] == "quarantined"),
            "{mine:?}"
        );
    }
    let cn3_cmon: Vec<_> = rows
        .iter()
        .filter(|r| r["server"] == cn3.to_string() && r["component"] == COMPONENT)
        .collect();
    assert_eq!(cn3_cmon.len(), 1, "one answer for the duplicate");
    assert_eq!(
        cn3_cmon[0]["version"],
        cmon.version.as_str(),
        "the first entry"
    );
    assert!(
        rows.iter()
            .any(|r| r["hostname"] == "cn0004" && r["state"] == "ok")
    );

    // check: one finding per set-aside server, naming the field.
    let (code, out, err) = tokio::task::block_in_place(|| cli(&dc, &["check", "--json"]));
    assert_eq!(code, 2, "{err}");
    assert!(out.len() < 200_000, "bounded: {} bytes", out.len());
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = doc["findings"].as_array().expect("findings");
    for s in aside {
        let mine: Vec<_> = findings
            .iter()
            .filter(|f| f["server"] == s.to_string())
            .collect();
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert_eq!(mine[0]["kind"], "unusable-server-agents");
        let details = mine[0]["details"].as_str().unwrap();
        assert!(details.contains("server.agents"), "{details}");
    }
    let details_of = |s: ServerUuid| {
        findings
            .iter()
            .find(|f| f["server"] == s.to_string())
            .map(|f| f["details"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert!(
        details_of(cn1).contains("uuid \"not-a-uuid\" is not a UUID"),
        "{}",
        details_of(cn1)
    );
    assert!(
        details_of(cn2).contains("name \"xxx"),
        "{}",
        details_of(cn2)
    );
    assert!(
        details_of(cn3).contains("lists cmon-agent twice"),
        "{}",
        details_of(cn3)
    );

    // update: the others are updated; the set-aside ones are skipped
    // (blocking: exit 2), untouched.
    let image_arg = image.to_string();
    let (code, out, err) = tokio::task::block_in_place(|| {
        cli(
            &dc,
            &["update", COMPONENT, "--image", &image_arg, "-y", "--json"],
        )
    });
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.len() < 500_000, "bounded: {} bytes", out.len());
    for h in ["cn0004", "cn0005"] {
        let s = server(&dc, h);
        let a = dc
            .server_agents(s)
            .into_iter()
            .find(|a| a.name == COMPONENT)
            .unwrap();
        assert_eq!(a.image_uuid, Some(image), "{h} updated");
    }
    // check --fix: runs for the others; the set-aside ones stay manual.
    let (code, out, err) =
        tokio::task::block_in_place(|| cli(&dc, &["check", "--fix", "-y", "--json"]));
    assert_eq!(code, 2, "{out}\n{err}");
    let (sapi_after, cnapi_after) = snapshot(&dc).await;
    for s in aside {
        assert_eq!(
            cnapi_after[&s], cnapi_before[&s],
            "CNAPI record of {s} untouched"
        );
        for (i, params) in &sapi_before {
            if params["server_uuid"] == s.to_string() {
                assert_eq!(&sapi_after[i], params, "SAPI instance {i} of {s} untouched");
            }
        }
    }
    dc.shutdown().await;
}
