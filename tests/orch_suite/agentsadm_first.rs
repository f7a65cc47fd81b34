//! agentsadm first (issue 21): servers whose agentsadm is missing, too old,
//! or of unknown version get it before any step that runs through it, and
//! no server is sent a command line its agentsadm cannot parse.
//!
//! - (the plan itself, pure, is the planner's own scenario test:
//!   crates/plan/tests/scenarios/agentsadm_first.rs);
//! - a rollout on the simulated datacenter (strict: the servers' own
//!   agentsadm runs each command line, refusing newer words, and the
//!   bootstrap script runs for real with bash) that upgrades them first and
//!   converges;
//! - the bootstrap killed at each of its checkpoints, then run again.

use std::collections::BTreeMap;
use std::time::Duration;

use agentsadm_api::Apis;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::session::Session;
use agentsadm_orchestrate::transport::CnapiTransportConfig;
use agentsadm_plan::{Operation, TransportKind, TransportMode};
use agentsadm_sim::publish::{BuildOptions, PublishTarget};
use agentsadm_sim::testkit::request;
use agentsadm_sim::{SeedSpec, SimConfig, SimDc, SimServer};
use agentsadm_types::ids::{ImageUuid, ServerUuid};

fn fast_transport() -> CnapiTransportConfig {
    CnapiTransportConfig {
        wait_chunk: Duration::from_secs(5),
        execute_timeout: Duration::from_secs(60),
        confirm_poll: (Duration::from_millis(20), Duration::from_millis(200)),
        confirm_grace_after_failure: Duration::from_secs(2),
        ..Default::default()
    }
}

/// Run `agentsadm <argv>` on a server through CNAPI execute; its exit
/// status and output.
pub(crate) async fn gz(apis: &Apis, server: ServerUuid, argv: &[&str]) -> (i32, String) {
    let args: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let r = apis
        .cnapi
        .execute(
            server,
            &gz_execute_request(&args, BTreeMap::new()),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    (r.exit_status, format!("{}{}", r.stdout, r.stderr))
}

/// A server set up before agentsadm existed: no files, no record, no
/// instance file, and `server.agents` without it.
pub(crate) async fn remove_agentsadm(dc: &SimDc, s: &SimServer) {
    let root = &s.root;
    for p in [
        "opt/smartdc/agentsadm",
        "opt/smartdc/bin/agentsadm",
        "opt/smartdc/agents/.agentsadm/installed/agentsadm.json",
        "opt/smartdc/agents/etc/agentsadm",
    ] {
        let p = root.join(p);
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else if p.symlink_metadata().is_ok() {
            std::fs::remove_file(&p).unwrap();
        }
    }
    post_own_report(dc, s.uuid).await;
    let sapi = &dc.apis().sapi;
    let services = sapi.list_agent_services().await.unwrap();
    let service = services.iter().find(|s| s.name == "agentsadm").unwrap();
    for i in sapi.list_service_instances(service.uuid).await.unwrap() {
        if i.server_uuid() == Some(s.uuid) {
            sapi.delete_instance(i.uuid).await.unwrap();
        }
    }
}

/// Post what the server's GZ reports to `server.agents` (as cn-agent would
/// after a change made by hand).
async fn post_own_report(dc: &SimDc, server: ServerUuid) {
    let report = dc.gz_report(server).await.unwrap();
    dc.apis()
        .cnapi
        .update_server_agents(server, &report.agents)
        .await
        .unwrap();
}

/// A copy that says no version: a binary alone, as CN setup fetched it
/// before agentsadm recorded itself.
async fn bare_copy(dc: &SimDc, s: &SimServer) {
    let root = &s.root;
    for p in [
        "opt/smartdc/agentsadm/package.json",
        "opt/smartdc/agentsadm/image_uuid",
        "opt/smartdc/agentsadm/etc/buildstamp",
        "opt/smartdc/agents/.agentsadm/installed/agentsadm.json",
    ] {
        let _ = std::fs::remove_file(root.join(p));
    }
    post_own_report(dc, s.uuid).await;
}

/// The datacenter of the rollout: five CNs; an old agentsadm (0.0.9) in the
/// datacenter IMGAPI, and newer gz-tools and vm-agent.
async fn rollout_dc() -> (SimDc, ImageUuid) {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(5)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let old = dc
        .publish_component("agentsadm", &BuildOptions::new("0.0.9"), PublishTarget::Dc)
        .unwrap();
    (dc, old.uuid)
}

/// Execute `p` (confirmed) with quick task waits; every server succeeds.
async fn run_to_success(session: &Session<'_>, p: &agentsadm_plan::Plan) {
    let options = ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let report = crate::flows_common::execute_yes(
        session.apis,
        session.catalog,
        p,
        &options,
        fast_transport(),
        &NullReporter,
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(p));
}

/// Put the old agentsadm on `s` (its current copy installs it).
pub(crate) async fn old_copy(dc: &SimDc, s: &SimServer, old: ImageUuid) {
    let apis = dc.apis();
    let image = old.to_string();
    let (status, out) = gz(&apis, s.uuid, &["gz", "install", &image, "--json"]).await;
    assert_eq!(status, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_gives_agentsadm_first_and_converges() {
    let (dc, old) = rollout_dc().await;
    let cns = dc.compute_nodes();
    // cn0001 current; cn0002 and cn0005 none; cn0003 old; cn0004 unknown.
    for i in [1, 4] {
        dc.gz_report(cns[i].uuid).await.unwrap();
        remove_agentsadm(&dc, &cns[i]).await;
    }
    old_copy(&dc, &cns[2], old).await;
    dc.gz_report(cns[3].uuid).await.unwrap();
    bare_copy(&dc, &cns[3]).await;
    let apis = dc.apis();
    // Strict: what the old copy and the missing one would do with the
    // orchestrator's command lines.
    let (status, out) = gz(&apis, cns[2].uuid, &["gz", "health", "vm-agent", "--json"]).await;
    assert_eq!(
        (status, out.contains("unrecognized subcommand 'health'")),
        (2, true),
        "{out}"
    );
    let (status, _) = gz(&apis, cns[1].uuid, &["gz", "report", "--json"]).await;
    assert_eq!(status, 127);

    let session = Session {
        apis: &apis,
        catalog: dc.catalog(),
        updates: None,
    };
    let req = request(Operation::Update, &["gz-tools", "vm-agent"], &[]);
    let planned = session
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    let p = &planned.plan;
    let text = p.to_string();
    let agentsadm_default = dc.default_image("agentsadm").unwrap();
    for (i, from) in [
        (1, "(none)"),
        (4, "(none)"),
        (2, "0.0.9-"),
        (3, "(version unknown)"),
    ] {
        let sp = &p.servers()[&cns[i].uuid];
        let first = &sp.steps[0];
        assert_eq!(
            (first.component.as_str(), first.transport),
            ("agentsadm", TransportKind::Bootstrap),
            "{}\n{text}",
            cns[i].hostname
        );
        assert_eq!(first.action.target().unwrap().uuid, agentsadm_default);
        let line = format!("agentsadm: {} {from}", cns[i].hostname);
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(
        p.servers()[&cns[0].uuid]
            .steps
            .iter()
            .all(|s| s.component != "agentsadm")
    );

    run_to_success(&session, p).await;

    // The bootstrap went to exactly the four servers, once each.
    let mut bootstrapped: Vec<ServerUuid> = dc
        .executes()
        .iter()
        .filter(|e| e.args.len() == 3 && e.args[0] == agentsadm_default.to_string())
        .map(|e| e.server)
        .collect();
    bootstrapped.sort();
    let mut want: Vec<ServerUuid> = [1, 2, 3, 4].map(|i| cns[i].uuid).to_vec();
    want.sort();
    assert_eq!(bootstrapped, want);
    for s in &cns {
        let agents = dc.server_agents(s.uuid);
        let a = agents.iter().find(|a| a.name == "agentsadm").unwrap();
        assert_eq!(a.image_uuid, Some(agentsadm_default), "{}", s.hostname);
        assert!(
            a.uuid.is_some(),
            "{}: recorded with its instance",
            s.hostname
        );
        let own = dc.gz_report(s.uuid).await.unwrap();
        assert!(
            own.agents
                .iter()
                .any(|a| a.name == "agentsadm" && a.image_uuid == Some(agentsadm_default))
        );
        assert!(s.root.join("opt/smartdc/agentsadm/bin/agentsadm").is_file());
        assert!(!s.root.join("opt/smartdc/agentsadm.bootstrap").exists());
    }
    // Adopted into SAPI by the copy itself, with the instance UUID the
    // server reports.
    let services = apis.sapi.list_agent_services().await.unwrap();
    let service = services.iter().find(|s| s.name == "agentsadm").unwrap();
    let instances = apis
        .sapi
        .list_service_instances(service.uuid)
        .await
        .unwrap();
    for s in &cns {
        let reported = dc
            .server_agents(s.uuid)
            .into_iter()
            .find(|a| a.name == "agentsadm")
            .and_then(|a| a.uuid);
        let inst = instances
            .iter()
            .find(|i| i.server_uuid() == Some(s.uuid))
            .unwrap_or_else(|| panic!("{}: no SAPI instance", s.hostname));
        assert_eq!(Some(inst.uuid), reported, "{}", s.hostname);
        assert_eq!(inst.image_uuid(), Some(agentsadm_default), "{}", s.hostname);
    }

    // Convergence: nothing left.
    let again = session
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    assert!(again.plan.is_empty(), "{}", again.plan);
    dc.shutdown().await;
}

/// The real cn-agent rewrites `server.agents` from `node_modules` after each
/// of its tasks and when it starts (docs/triton/agent-install.md §3.6), and
/// agentsadm, gz-tools, dockerlogger and sdcadm live elsewhere: without
/// their registrations there, a vm-agent update through cn-agent drops
/// them, and the next plan takes every server for one without agentsadm
/// and bootstraps it again (seen against the real cn-agent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentsadm_stays_in_server_agents_through_cn_agent_tasks() {
    let (dc, _old) = rollout_dc().await;
    let cns = dc.compute_nodes();
    let apis = dc.apis();
    let session = Session {
        apis: &apis,
        catalog: dc.catalog(),
        updates: None,
    };
    let req = request(Operation::Update, &["vm-agent"], &[]);
    let planned = session
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    let p = &planned.plan;
    assert!(
        p.servers()
            .values()
            .flat_map(|s| &s.steps)
            .all(|s| s.transport == TransportKind::InstallAgent && s.component == "vm-agent"),
        "{p}"
    );
    run_to_success(&session, p).await;
    // cn-agent starting again reads the GZ once more.
    dc.restart_cn_agent(cns[0].uuid).await.unwrap();
    for s in &cns {
        let own = dc.gz_report(s.uuid).await.unwrap();
        let reported = dc.server_agents(s.uuid);
        for name in ["agentsadm", "gz-tools"] {
            let want = own.agents.iter().find(|a| a.name == name).unwrap();
            let got = reported.iter().find(|a| a.name == name);
            assert_eq!(
                got.map(|a| (&a.version, a.image_uuid, a.uuid)),
                Some((&want.version, want.image_uuid, want.uuid)),
                "{}: {name} as cn-agent reports it",
                s.hostname
            );
        }
    }
    // And so the next change needs no agentsadm step anywhere.
    let req = request(Operation::Update, &["gz-tools"], &[]);
    let next = session
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    assert!(
        next.plan
            .servers()
            .values()
            .flat_map(|s| &s.steps)
            .all(|s| s.component != "agentsadm"),
        "{}",
        next.plan
    );
    dc.shutdown().await;
}

/// A server whose agentsadm binary is gone while `server.agents` still
/// lists it (removed by hand, lost with a disk): every execute there
/// answers 127. `update agentsadm` puts the listed copy back through the
/// bootstrap and then installs the new one (main failed the server with
/// 127 on every run); a gz-tools update through execute on another such
/// server does the same and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_but_missing_agentsadm_is_bootstrapped() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let cns = dc.compute_nodes();
    let apis = dc.apis();
    let bin = "opt/smartdc/agentsadm/bin/agentsadm";
    for s in &cns {
        dc.gz_report(s.uuid).await.unwrap();
        std::fs::remove_file(s.root.join(bin)).unwrap();
        let (status, _) = gz(&apis, s.uuid, &["gz", "report", "--json"]).await;
        assert_eq!(status, 127, "{}", s.hostname);
        assert!(
            dc.server_agents(s.uuid)
                .iter()
                .any(|a| a.name == "agentsadm" && a.image_uuid.is_some()),
            "still listed"
        );
    }
    let session = Session {
        apis: &apis,
        catalog: dc.catalog(),
        updates: None,
    };
    for (s, component) in [(&cns[0], "agentsadm"), (&cns[1], "gz-tools")] {
        let req = request(Operation::Update, &[component], &[s.hostname.as_str()]);
        let planned = session
            .plan(&req, ImageChoice::Latest, TransportMode::Auto)
            .await
            .unwrap();
        let p = &planned.plan;
        let steps = &p.servers()[&s.uuid].steps;
        assert_eq!(
            steps
                .iter()
                .map(|st| (st.component.as_str(), st.transport))
                .collect::<Vec<_>>(),
            [(component, TransportKind::Execute)],
            "{p}"
        );
        let to = steps[0].action.target().unwrap().uuid;
        run_to_success(&session, p).await;
        assert!(s.root.join(bin).is_file(), "{}: put back", s.hostname);
        let (status, out) = gz(&apis, s.uuid, &["gz", "report", "--json"]).await;
        assert_eq!(status, 0, "{out}");
        let agents = dc.server_agents(s.uuid);
        let entry = agents.iter().find(|a| a.name == component).unwrap();
        assert_eq!(entry.image_uuid, Some(to), "{}", s.hostname);
        // Converged: nothing left for the same request.
        let again = session
            .plan(&req, ImageChoice::Latest, TransportMode::Auto)
            .await
            .unwrap();
        assert!(again.plan.is_empty(), "{}", again.plan);
    }
    dc.shutdown().await;
}
