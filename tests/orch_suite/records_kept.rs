//! After any step, the server's SAPI instance of the component carries
//! `server_uuid`, `image_uuid` and every mark it had (hold, disabled),
//! whatever the agent's postinstall did: the simulated vm-agent and
//! net-agent postinstalls re-adopt their instance bare, as the real ones
//! do, so each path is checked on them through the binary: an update, a
//! rerun whose intent already named the target, `check --fix`, `revert`,
//! and `--ignore-holds` (which overrides the hold for one run and leaves
//! it in place).

use std::path::Path;

use serde_json::{Map, Value};

use agentsadm_api::sapi::{Update, object};
use agentsadm_sim::{SeedSpec, SimDc};

async fn cli(dc: &SimDc, state: &Path, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .run(args)
        .await
}

/// Two servers with a newer image of each component, each server's
/// report in CNAPI (also bare_readoption's datacenter). What these tests
/// check is the records, one command after another, never how long SAPI
/// takes: without its latency model (21 ms a write), as shape's SAPI-heavy
/// loop.
pub(crate) async fn sim() -> SimDc {
    let dc = crate::sim_common::records_dc(2, SeedSpec::with_newer()).await;
    for cn in dc.servers() {
        dc.gz_report(cn.uuid).await.unwrap();
    }
    dc
}

/// The image `host` runs of `component`, and the SAPI params of the
/// instance it reports for it.
async fn record(dc: &SimDc, host: &str, component: &str) -> (String, Map<String, Value>) {
    let cn = dc.server(host).unwrap();
    let agent = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == component)
        .unwrap_or_else(|| panic!("{host} reports no {component}"));
    let instance = agent.uuid.expect("an instance uuid");
    let got = dc
        .apis()
        .sapi
        .get_instance(instance)
        .await
        .expect("the instance in SAPI");
    (
        agent.image_uuid.map(|u| u.to_string()).unwrap_or_default(),
        got.params.unwrap_or_default(),
    )
}

/// The instance names the server and the image it runs, and has `marks`.
async fn kept(dc: &SimDc, host: &str, component: &str, marks: &[&str]) -> String {
    let (image, params) = record(dc, host, component).await;
    let server = dc.server(host).unwrap().uuid.to_string();
    assert_eq!(
        params.get("server_uuid").and_then(Value::as_str),
        Some(server.as_str()),
        "{host} {component}: {params:?}"
    );
    assert_eq!(
        params.get("image_uuid").and_then(Value::as_str),
        Some(image.as_str()),
        "{host} {component}: {params:?}"
    );
    for m in marks {
        assert!(
            params.contains_key(*m),
            "{host} {component} lost {m}: {params:?}"
        );
    }
    image
}

/// `check` finds nothing (so it agrees with what the records say).
async fn clean(dc: &SimDc, state: &Path) {
    let (code, out, err) = cli(dc, state, &["check"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_and_ignore_holds_keep_the_record_and_the_hold_stays() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "hold", "vm-agent", "-s", "cn0001", "--reason", "case 7", "-y",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "disable",
            "net-agent",
            "-s",
            "cn0001",
            "--reason",
            "RFD 58",
            "-y",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (old, _) = record(&dc, "cn0001", "vm-agent").await;

    // An update of a disabled agent.
    let (code, out, err) = cli(&dc, s, &["update", "net-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    kept(&dc, "cn0001", "net-agent", &["agentsadm_disabled"]).await;
    kept(&dc, "cn0002", "net-agent", &[]).await;

    // The held server moved for this run only.
    let (code, out, err) = cli(
        &dc,
        s,
        &["update", "vm-agent", "--latest", "-y", "--ignore-holds"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let new = kept(&dc, "cn0001", "vm-agent", &["agentsadm_hold"]).await;
    assert_ne!(new, old);
    kept(&dc, "cn0002", "vm-agent", &[]).await;
    clean(&dc, s).await;
    // The hold still holds: the next plan leaves cn0001 where it is.
    let (code, out, err) = cli(&dc, s, &["plan", "update", "vm-agent", "--image", &old]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("held on this server by"), "{out}");
}

/// Where an interrupted run left intent at the target while the server
/// still runs the image before: SAPI says the target, the server does not.
async fn intent_ahead(dc: &SimDc, host: &str, component: &str, image: &str) {
    let cn = dc.server(host).unwrap();
    let instance = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == component)
        .and_then(|a| a.uuid)
        .unwrap();
    dc.apis()
        .sapi
        .update_instance(
            instance,
            &Update::params(object([
                ("server_uuid", Value::String(cn.uuid.to_string())),
                ("image_uuid", Value::String(image.to_string())),
            ])),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_and_check_fix_whose_intent_named_the_target_keep_the_record() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    // Where --latest goes, from the plan.
    let (code, out, err) = cli(
        &dc,
        s,
        &["plan", "update", "vm-agent", "--latest", "--json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let target = v["plan"]["servers"]
        .as_object()
        .unwrap()
        .values()
        .find_map(|sp| sp["steps"][0]["to"]["uuid"].as_str())
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();

    // A rerun: cn0001's intent already names the target.
    intent_ahead(&dc, "cn0001", "vm-agent", &target).await;
    let (code, out, err) = cli(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kept(&dc, "cn0001", "vm-agent", &[]).await, target);
    clean(&dc, s).await;

    // check --fix: cn0002's net-agent intent names a newer image than it
    // runs; the repair installs it and the record stays whole.
    let (code, out, err) = cli(
        &dc,
        s,
        &["plan", "update", "net-agent", "--latest", "--json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let net_target = v["plan"]["servers"]
        .as_object()
        .unwrap()
        .values()
        .find_map(|sp| sp["steps"][0]["to"]["uuid"].as_str())
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    intent_ahead(&dc, "cn0002", "net-agent", &net_target).await;
    let (code, out, _) = cli(&dc, s, &["check"]).await;
    assert_eq!(code, 2, "{out}");
    let (code, out, err) = cli(&dc, s, &["check", "--fix", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kept(&dc, "cn0002", "net-agent", &[]).await, net_target);
    clean(&dc, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_keeps_the_record_and_its_marks() {
    let dc = sim().await;
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "disable", "vm-agent", "-s", "cn0001", "--reason", "case 9", "-y",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (old, _) = record(&dc, "cn0001", "vm-agent").await;
    let (code, out, err) = cli(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    kept(&dc, "cn0001", "vm-agent", &["agentsadm_disabled"]).await;
    let (code, out, err) = cli(&dc, s, &["history", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let run = v["runs"][0]["id"].as_str().unwrap().to_string();
    // Held since; the revert overrides the hold for this run.
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "hold", "vm-agent", "-s", "cn0001", "--reason", "case 9", "-y",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&dc, s, &["revert", &run, "-y", "--ignore-holds"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        kept(
            &dc,
            "cn0001",
            "vm-agent",
            &["agentsadm_disabled", "agentsadm_hold"]
        )
        .await,
        old
    );
    kept(&dc, "cn0002", "vm-agent", &[]).await;
    clean(&dc, s).await;
}
