//! `list` and `check` never disagree about the same datacenter: after each
//! kind of run the simulator can produce (none yet, a service default
//! ahead of the fleet as a declined canary left it, a canary caught by its
//! health gate, a failure-budget halt, a completed update), on a
//! datacenter whose instances have no params (as agentsshar-era
//! postinstalls leave them), every component `list` does not call `ok` is
//! a finding of `check` of the same kind, and the other way round. The
//! same after Ctrl-C at the canary question, a declined canary (in tmux)
//! and SIGTERM mid-rollout; and the run that carries on a rollout split
//! by a declined canary is linked with it in `history`, both ways, in
//! text and JSON.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use agentsadm_api::sapi::{Update, object};
use agentsadm_sim::{BuildOptions, PublishTarget, SeedSpec, SimConfig, SimDc};

/// The kinds of drift `list` shows per component.
const KINDS: [&str; 4] = [
    "wrong-image",
    "instance-without-params",
    "installed-without-instance",
    "missing-install",
];

async fn cli(dc: &SimDc, state: &Path, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .run(args)
        .await
}

/// Every object in `v` with a `kind` (check's findings), recursively.
fn findings(v: &Value, out: &mut BTreeSet<(String, String, String)>) {
    match v {
        Value::Object(m) => {
            if let (Some(kind), Some(host), Some(c)) = (
                m.get("kind").and_then(Value::as_str),
                m.get("hostname").and_then(Value::as_str),
                m.get("component").and_then(Value::as_str),
            ) && KINDS.contains(&kind)
            {
                out.insert((host.into(), c.into(), kind.into()));
            }
            m.values().for_each(|x| findings(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| findings(x, out)),
        _ => {}
    }
}

/// `list` and `check` say the same of every component.
pub(crate) async fn agree(dc: &SimDc, state: &Path, after: &str) {
    let (code, out, err) = cli(dc, state, &["list", "--json"]).await;
    assert_eq!(code, 0, "{after}: {err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    let listed: BTreeSet<(String, String, String)> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let state = r["state"].as_str()?;
            KINDS.contains(&state).then(|| {
                (
                    r["hostname"].as_str().unwrap_or_default().to_string(),
                    r["component"].as_str().unwrap_or_default().to_string(),
                    state.to_string(),
                )
            })
        })
        .collect();
    let (_, out, err) = cli(dc, state, &["check", "--json"]).await;
    let doc: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{after}: {e}: {out}{err}"));
    let mut checked = BTreeSet::new();
    findings(&doc, &mut checked);
    assert_eq!(listed, checked, "{after}: list (left) and check (right)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_check_agree_after_every_kind_of_run() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    agree(&dc, s, "nothing run").await;

    // A service default no server runs, over instances without params
    // (what a declined canary left before: `list` said wrong-image on
    // every server while `check` found no drift).
    let newer = dc
        .publish_component("net-agent", &BuildOptions::new("1.4.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let apis = dc.apis();
    let service = apis
        .sapi
        .list_agent_services()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "net-agent")
        .unwrap();
    apis.sapi
        .update_service(
            service.uuid,
            &Update::params(object([("image_uuid", Value::String(newer.to_string()))])),
        )
        .await
        .unwrap();
    agree(&dc, s, "a service default ahead of the fleet").await;

    // A bad build caught at its canary: reverted there, halted.
    let bad = dc
        .publish_component("vm-agent", &BuildOptions::new("1.5.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    dc.faults().unhealthy_build("vm-agent", bad, &[]);
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "update",
            "vm-agent",
            "--image",
            &bad.to_string(),
            "-y",
            "--canary",
            "1",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("canary failed on"), "{out}");
    agree(&dc, s, "a failed canary").await;

    // A failure-budget halt.
    dc.faults().clear();
    for h in ["cn0001", "cn0002"] {
        dc.faults().fail_installs_on(dc.server(h).unwrap().uuid);
    }
    let (code, out, err) = cli(
        &dc,
        s,
        &[
            "update",
            "net-agent",
            "--latest",
            "-y",
            "-J",
            "1",
            "--max-failures",
            "1",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("halted after"), "{out}");
    agree(&dc, s, "a budget halt").await;

    // A completed update.
    dc.faults().clear();
    let (code, out, err) = cli(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    agree(&dc, s, "a completed update").await;
    dc.shutdown().await;
}

/// Answer the canary question of `update vm-agent --latest --canary 1 -J
/// 2` on `dc` (state in `dir`) with `keys`, in tmux; the screen at the end.
async fn answer_canary(dc: &SimDc, dir: &Path, name: &str, keys: &[&str]) -> String {
    let script = crate::terminal::script(dc, dir, "update vm-agent --latest --canary 1 -J 2");
    let tmux = crate::terminal::Tmux::start(name, &script);
    tmux.wait_for("Proceed? [y/N]").await;
    tmux.keys(&["y", "Enter"]);
    tmux.wait_for("[y/N]").await;
    tmux.wait_for("continue with").await;
    tmux.keys(keys);
    tmux.wait_for("EXIT=").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_check_agree_after_halts_at_the_canary_and_sigterm_and_a_split_rollout_is_linked()
{
    if !crate::tools::require_tool("tmux", "tmux") {
        return;
    }
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .populate(SeedSpec::with_newer())
            .install_latency(agentsadm_sim::LatencySpec::fixed(300)),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let s = state.path();

    let screen = answer_canary(&dc, s, "agree-ctrl-c", &["C-c"]).await;
    assert!(screen.lines().any(|l| l == "EXIT=2"), "{screen}");
    agree(&dc, s, "Ctrl-C at the canary question").await;

    let screen = answer_canary(&dc, s, "agree-no", &["n", "Enter"]).await;
    assert!(screen.lines().any(|l| l == "EXIT=2"), "{screen}");
    agree(&dc, s, "a declined canary").await;

    // The same command again carries the rollout on.
    let (code, out, err) = cli(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&dc, s, &["history", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    let (on, declined, interrupted) = (&runs[0], &runs[1], &runs[2]);
    assert_eq!(declined["halt_reason"], "declined", "{declined}");
    assert_eq!(on["continues"], declined["id"], "{out}");
    assert_eq!(declined["continued_by"], on["id"], "{out}");
    // Ctrl-C at the question is a no as well: the run after it carries
    // that one on.
    assert_eq!(declined["continues"], interrupted["id"], "{out}");
    for (run, says) in [
        (
            on,
            format!("carries on: run {}", declined["id"].as_str().unwrap()),
        ),
        (
            declined,
            format!("carried on by: run {}", on["id"].as_str().unwrap()),
        ),
    ] {
        let (code, text, err) = cli(&dc, s, &["history", run["id"].as_str().unwrap()]).await;
        assert_eq!(code, 0, "{err}");
        assert!(text.contains(&says), "{says}:\n{text}");
    }

    // SIGTERM mid-rollout.
    let next = dc
        .publish_component("vm-agent", &BuildOptions::new("1.6.0"), PublishTarget::Dc)
        .unwrap()
        .uuid
        .to_string();
    let log = s.join("run.log");
    let run = crate::outage::spawn_agentsadm(
        &dc,
        &log,
        &["update", "vm-agent", "--image", &next, "-y", "-J", "1"],
    );
    let pid = run.id().expect("a pid");
    let (code, out, err) =
        crate::outage::after_first_server(run, || crate::outage::send("TERM", pid)).await;
    assert_eq!(code, 2, "{out}{err}");
    // The server in flight finishes on its own (0.3 s an install): list
    // and check read the same datacenter only once it has.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    agree(&dc, s, "SIGTERM mid-rollout").await;
    dc.shutdown().await;
}
