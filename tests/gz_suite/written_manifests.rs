//! What a postinstall writes into apm's SMF directory (issue 22). On a
//! real global zone that directory is `/var/svc/manifest/site`, imported
//! at every boot, so a postinstall that writes a manifest declaring another
//! component's service (or a system one) would take it over. Every
//! manifest is checked immediately before its import (not only the
//! package's templates), and every file the postinstall wrote beyond its
//! templates is journaled: the component's own (named after it) are
//! imported and removed with it; anything else is refused. Each refusal
//! leaves the root, SMF, a sentinel outside the root and the SAPI and
//! CNAPI records as they were.

use crate::gz_common::*;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::hostile::writes_manifest;

const SMF: &str = "opt/smartdc/agents/smf";

/// vm-agent and net-agent 1.0.0 installed (vm-agent's uninstall hooks
/// touch nothing outside the package: what they changed there is not
/// rolled back, by design).
async fn scene() -> Guarded {
    let mut vm = spec("vm-agent", "1.0.0");
    vm.hooks.postuninstall = Some("true".into());
    Guarded::new(&[imagebuild::build(&vm), image("net-agent", "1.0.0")]).await
}

/// vm-agent 2.0.0 whose postinstall renders its templates, then runs
/// `body`.
fn vm_agent_whose_postinstall(body: &str) -> BuiltImage {
    let mut s = spec("vm-agent", "2.0.0");
    s.hooks.postinstall = Some(body.to_string());
    imagebuild::build(&s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postinstall_cannot_claim_another_components_or_the_systems_service() {
    let g = scene().await;
    let before = g.state();
    let net = "smartdc/agent/net-agent";
    let local = "system/filesystem/local";
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "its own manifest declares net-agent's service",
            writes_manifest("vm-agent.xml", net),
            vec![
                "vm-agent: an SMF manifest was refused: ",
                "opt/smartdc/agents/smf/vm-agent.xml declares the SMF service svc:/smartdc/agent/net-agent, outside vm-agent's services",
            ],
        ),
        (
            "its own manifest declares a system service",
            writes_manifest("vm-agent.xml", local),
            vec!["svc:/system/filesystem/local, outside vm-agent's services"],
        ),
        (
            "an extra manifest of its own declares a system service",
            writes_manifest("vm-agent-extra.xml", local),
            vec![
                "opt/smartdc/agents/smf/vm-agent-extra.xml declares the SMF service svc:/system/filesystem/local, outside vm-agent's services",
            ],
        ),
        (
            "a manifest named after no component declares net-agent's service",
            writes_manifest("evil.xml", net),
            vec!["wrote opt/smartdc/agents/smf/evil.xml, which belongs to no component"],
        ),
        (
            "it overwrites net-agent's manifest",
            writes_manifest("net-agent.xml", net),
            vec!["wrote opt/smartdc/agents/smf/net-agent.xml, which is net-agent's"],
        ),
        (
            "a manifest in a subdirectory",
            writes_manifest("deep/vm-agent.xml", local),
            vec!["wrote opt/smartdc/agents/smf/deep/vm-agent.xml"],
        ),
        (
            "its manifest is a link to net-agent's",
            "ln -sf net-agent.xml \"$npm_config_smfdir/vm-agent.xml\"".to_string(),
            vec!["opt/smartdc/agents/smf/vm-agent.xml is not a regular file"],
        ),
    ];
    for (what, body, expect) in cases {
        let img = vm_agent_whose_postinstall(&body);
        let out = g.gz(&["install", &g.publish(&img)]).await;
        let msg = failed(&out);
        eprintln!("CASE {what}: {msg}");
        assert!(
            msg.starts_with("hook:postinstall: ") && msg.contains("rolled back"),
            "{what}: {msg}"
        );
        for want in expect {
            assert!(msg.contains(want), "{what}: {msg:?} lacks {want:?}");
        }
        g.assert_unchanged(&before, what);
    }
    // A failing postinstall's stray manifest goes with the rollback too.
    let img = vm_agent_whose_postinstall(&format!(
        "{}\nexit 1",
        writes_manifest("vm-agent-extra.xml", "smartdc/agent/vm-agent-extra")
    ));
    let msg = failed(&g.gz(&["install", &g.publish(&img)]).await);
    assert!(msg.contains("rolled back"), "{msg}");
    g.assert_unchanged(&before, "failed postinstall with an extra manifest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postinstalls_own_extra_manifest_is_imported_and_removed_with_it() {
    let g = scene().await;
    let extra = format!("{SMF}/vm-agent-extra.xml");
    let fmri = "svc:/smartdc/agent/vm-agent-extra:default";
    let img = vm_agent_whose_postinstall(&writes_manifest(
        "vm-agent-extra.xml",
        "smartdc/agent/vm-agent-extra",
    ));
    ok(&g.gz(&["install", &g.publish(&img)]).await);
    assert!(g.srv.at(&extra).is_file());
    assert_eq!(g.srv.smf_state()[fmri], "online");
    ok(&g.gz(&["remove", "vm-agent"]).await);
    assert!(!g.srv.at(&extra).exists(), "the extra manifest stayed");
    let smf = g.srv.smf_state();
    assert!(!smf.contains_key(fmri), "{smf:?}");
    assert_eq!(smf["svc:/smartdc/agent/net-agent:default"], "online");
    assert!(g.srv.at(&format!("{SMF}/net-agent.xml")).is_file());
}
