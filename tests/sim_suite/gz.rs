//! The simulator's mock servers run the real GZ installer: seeded servers
//! are exactly what the installer leaves (it reports, upgrades with a
//! rollback copy, rolls back and removes them), in both layouts; hooks run
//! on rooted servers; cn-agent replacing itself through execute is handed
//! to the (simulated) agentsadm-install service; a state directory keeps
//! its layout.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::GzLayout;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::SimServer;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// `agentsadm gz <args> --json` on a server through CNAPI execute.
async fn gz(dc: &SimDc, server: &SimServer, args: &[&str]) -> GzResult {
    gz_env(dc, server, args, &[]).await
}

/// [`gz`] with this environment in the request (all the command gets).
async fn gz_env(dc: &SimDc, server: &SimServer, args: &[&str], env: &[(&str, &str)]) -> GzResult {
    let mut argv: Vec<String> = vec!["gz".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.push("--json".into());
    let env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let req = gz_execute_request(&argv, env);
    let r = dc
        .apis()
        .cnapi
        .execute(server.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {} / {}", r.stdout, r.stderr))
}

async fn install_agent(dc: &SimDc, server: ServerUuid, image: ImageUuid) -> (TaskStatus, String) {
    let cnapi = dc.apis().cnapi;
    let id = cnapi.install_agent(server, image).await.unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(30)).await.unwrap();
    (t.status, t.error_message().unwrap_or_default())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// Every path under `root`, relative, for comparing two servers' trees.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            out.insert(p.strip_prefix(root).unwrap().display().to_string());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// The server's SAPI agent instances: by `params.server_uuid`, and, for
/// the ones adopted without params (vm-agent and net-agent do so), by the
/// instance UUIDs the server reports in `server.agents`.
async fn sapi_instances(dc: &SimDc, server: ServerUuid) -> BTreeSet<InstanceUuid> {
    let reported: BTreeSet<InstanceUuid> = dc
        .server_agents(server)
        .iter()
        .filter_map(|a| a.uuid)
        .collect();
    dc.apis()
        .sapi
        .list_agent_instances()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| match &i.params {
            Some(_) => i.server_uuid() == Some(server),
            None => reported.contains(&i.uuid),
        })
        .map(|i| i.uuid)
        .collect()
}

#[tokio::test]
async fn seeded_rooted_servers_are_what_the_installer_leaves() {
    let dc = SimDc::start(SimConfig::default().servers(2)).await.unwrap();
    assert_eq!(dc.config().gz_layout, GzLayout::Rooted);
    let cn = dc.server("cn0001").unwrap();
    let cn2 = dc.server("cn0002").unwrap();
    let report = dc.gz_report(cn.uuid).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.agents, dc.server_agents(cn.uuid));
    assert_eq!(report.agents.len(), dc.catalog().default_set(false).len());
    // The instance UUID files hold the server's SAPI instances.
    let reported: BTreeSet<InstanceUuid> = report.agents.iter().filter_map(|a| a.uuid).collect();
    assert_eq!(reported, sapi_instances(&dc, cn.uuid).await);
    let vm = report.agents.iter().find(|a| a.name == "vm-agent").unwrap();
    let agents = cn.root.join("opt/smartdc/agents");
    assert_eq!(
        read(&agents.join("etc/vm-agent")),
        vm.uuid.unwrap().to_string()
    );
    // The postinstall hook ran (its output is there), and the SMF manifest
    // was rendered for this server's paths and imported.
    assert!(agents.join("etc/vm-agent.installed").exists());
    let xml = read(&agents.join("smf/vm-agent.xml"));
    assert!(xml.contains(&cn.root.display().to_string()), "{xml}");
    assert!(!xml.contains("templates"), "{xml}");
    let smf = read(&cn.root.join("var/svc/smf-state.json"));
    assert!(smf.contains("svc:/smartdc/agent/vm-agent:default"), "{smf}");
    // Two servers of one role differ in content, not in shape.
    dc.gz_report(cn2.uuid).await.unwrap();
    assert_eq!(tree(&cn.root), tree(&cn2.root));

    // The installer upgrades a seeded component, keeping a rollback copy
    // and the instance UUID.
    let v11 = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    assert_eq!(
        install_agent(&dc, cn.uuid, v11.uuid).await,
        (TaskStatus::Complete, String::new())
    );
    let previous = agents.join(".agentsadm/previous/vm-agent/tree");
    assert_eq!(
        read(&previous.join("image_uuid")),
        vm.image_uuid.unwrap().to_string()
    );
    let now = dc.server_agents(cn.uuid);
    let vm_now = now.iter().find(|a| a.name == "vm-agent").unwrap();
    assert_eq!((vm_now.image_uuid, vm_now.uuid), (Some(v11.uuid), vm.uuid));
    // ... rolls it back, and removes it (deleting its SAPI instance).
    let r = gz(&dc, &cn, &["rollback", "vm-agent"]).await;
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(r.components[0].image_uuid, vm.image_uuid);
    let back = dc.server_agents(cn.uuid);
    assert_eq!(
        back.iter()
            .find(|a| a.name == "vm-agent")
            .and_then(|a| a.image_uuid),
        vm.image_uuid,
        "the installer reported to CNAPI"
    );
    let r = gz(&dc, &cn, &["remove", "vm-agent"]).await;
    assert_eq!(r.components[0].action, ComponentAction::Removed, "{r:?}");
    assert!(!agents.join("lib/node_modules/vm-agent").exists());
    assert!(
        !sapi_instances(&dc, cn.uuid)
            .await
            .contains(&vm.uuid.unwrap())
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn seeded_mockcloud_servers_are_what_the_installer_leaves() {
    // The installer's mockcloud layout driven through CNAPI execute: the
    // servers pass for SunOS CNs with a working execute (a real mockcloud
    // CN has none; `mockcloud_servers_refuse_execute` covers that).
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .gz_layout(GzLayout::Mockcloud)
            .strictness(agentsadm_sim::Strictness {
                mockcloud_refuses_execute: false,
                ..Default::default()
            }),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let report = dc.gz_report(cn.uuid).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.agents, dc.server_agents(cn.uuid));
    assert_eq!(report.agents.len(), dc.catalog().default_set(false).len());
    let reported: BTreeSet<InstanceUuid> = report.agents.iter().filter_map(|a| a.uuid).collect();
    assert_eq!(reported, sapi_instances(&dc, cn.uuid).await);
    // mockcloud's three files per component, gz-tools included.
    let mut files: Vec<String> = std::fs::read_dir(cn.root.join("agents/gz-tools"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["image_uuid", "instance_uuid", "package.json"]);
    assert!(!cn.root.join("opt").exists(), "no rooted GZ");
    let vm = report.agents.iter().find(|a| a.name == "vm-agent").unwrap();
    let v11 = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    assert_eq!(
        install_agent(&dc, cn.uuid, v11.uuid).await,
        (TaskStatus::Complete, String::new())
    );
    assert_eq!(
        read(&cn.root.join(".agentsadm/previous/vm-agent/image_uuid")),
        vm.image_uuid.unwrap().to_string()
    );
    assert_eq!(
        read(&cn.root.join("agents/vm-agent/instance_uuid")),
        vm.uuid.unwrap().to_string()
    );
    let r = gz(&dc, &cn, &["rollback", "vm-agent"]).await;
    assert_eq!(r.components[0].image_uuid, vm.image_uuid, "{r:?}");
    // cn-agent through execute: mockcloud has no SMF, so no hand-off.
    let cn_agent = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let r = gz(&dc, &cn, &["install", &cn_agent.uuid.to_string()]).await;
    assert_eq!(r.components[0].action, ComponentAction::Upgraded, "{r:?}");
    let r = gz(&dc, &cn, &["remove", "vm-agent"]).await;
    assert_eq!(r.components[0].action, ComponentAction::Removed, "{r:?}");
    assert!(!cn.root.join("agents/vm-agent").exists());
    dc.shutdown().await;
}

#[tokio::test]
async fn cn_agent_through_execute_hands_itself_to_agentsadm_install() {
    // Through cn-agent, with a command line that says so (the orchestrator
    // does; cn-agent passes the request's env as is, so SMF_FMRI there
    // would prove nothing).
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::CnAgent)
            .cn_agent_restart(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let old = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "cn-agent")
        .unwrap();
    let new = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let r = gz_env(
        &dc,
        &cn,
        &["install", &new.uuid.to_string(), "--inside-cn-agent"],
        &[],
    )
    .await;
    assert!(r.error.is_none(), "{r:?}");
    assert!(r.components.is_empty(), "handed over, not done: {r:?}");
    assert!(
        r.warnings.iter().any(|w| w.contains("agentsadm-install")),
        "{r:?}"
    );
    // The job runs after cn-agent's restart delay and reports to CNAPI.
    let deadline = Instant::now() + crate::HANG_BOUND;
    let now = loop {
        let a = dc.server_agents(cn.uuid);
        let cn_agent = a.into_iter().find(|a| a.name == "cn-agent").unwrap();
        if cn_agent.image_uuid == Some(new.uuid) {
            break cn_agent;
        }
        assert!(Instant::now() < deadline, "the hand-off job never reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(now.uuid, old.uuid, "instance UUID kept");
    assert_eq!(
        read(
            &cn.root
                .join("opt/smartdc/agents/.agentsadm/previous/cn-agent/tree/image_uuid")
        ),
        old.image_uuid.unwrap().to_string()
    );
    dc.shutdown().await;

    // Through Ur, commands do not run inside cn-agent: installed in-line.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::Ur),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let new = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let req = gz_execute_request(
        &[
            "gz".into(),
            "install".into(),
            new.uuid.to_string(),
            "--json".into(),
        ],
        Default::default(),
    );
    let mut req = req;
    req.timeout = None;
    let out = dc
        .apis()
        .cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    let r: GzResult = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r.components[0].action, ComponentAction::Upgraded, "{r:?}");
    dc.shutdown().await;
}

#[tokio::test]
async fn a_failing_hook_rolls_the_install_back() {
    let dc = SimDc::start(SimConfig::default().servers(1)).await.unwrap();
    let cn = dc.server("cn0001").unwrap();
    let before = dc.gz_report(cn.uuid).await.unwrap();
    let mut opts = BuildOptions::new("1.1.0");
    opts.hooks = Some(Hooks {
        postinstall: Some("echo cannot start >&2; exit 3".into()),
        ..Hooks::default()
    });
    let bad = dc
        .publish_component("net-agent", &opts, PublishTarget::Dc)
        .unwrap();
    let (status, message) = install_agent(&dc, cn.uuid, bad.uuid).await;
    assert_eq!(status, TaskStatus::Failure);
    assert!(message.contains("postinstall"), "{message}");
    assert!(message.contains("rolled back"), "{message}");
    let after = dc.gz_report(cn.uuid).await.unwrap();
    assert_eq!(after, before, "nothing changed on the server");
    assert_eq!(dc.server_agents(cn.uuid), before.agents);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_of_one_server_queue_and_all_complete() {
    let dc = SimDc::start(SimConfig::default().servers(1)).await.unwrap();
    let cn = dc.server("cn0001").unwrap();
    let images: Vec<ImageUuid> = ["vm-agent", "net-agent", "cmon-agent", "firewaller"]
        .iter()
        .map(|c| {
            dc.publish_component(c, &BuildOptions::new("1.1.0"), PublishTarget::Dc)
                .unwrap()
                .uuid
        })
        .collect();
    let runs = images.iter().map(|i| install_agent(&dc, cn.uuid, *i));
    for (status, message) in futures::future::join_all(runs).await {
        assert_eq!(status, TaskStatus::Complete, "{message}");
    }
    let agents = dc.gz_report(cn.uuid).await.unwrap().agents;
    for i in &images {
        assert!(agents.iter().any(|a| a.image_uuid == Some(*i)));
    }
    assert_eq!(agents, dc.server_agents(cn.uuid));
    dc.shutdown().await;
}

#[tokio::test]
async fn a_state_directory_keeps_its_layout_and_seeds_servers_later() {
    let dir = tempfile::tempdir().unwrap();
    let config = SimConfig::default()
        .servers(2)
        .state_dir(dir.path())
        .gz_layout(GzLayout::Mockcloud);
    let dc = SimDc::start(config).await.unwrap();
    let cn1 = dc.server("cn0001").unwrap();
    dc.gz_report(cn1.uuid).await.unwrap();
    dc.shutdown().await;
    // Restarted with the default (rooted) layout: the state's wins, and a
    // server never used before is seeded now, from the persisted images.
    let dc = SimDc::start(SimConfig::default().state_dir(dir.path()))
        .await
        .unwrap();
    assert_eq!(dc.config().gz_layout, GzLayout::Mockcloud);
    let cn2 = dc.server("cn0002").unwrap();
    let report = dc.gz_report(cn2.uuid).await.unwrap();
    assert_eq!(report.agents, dc.server_agents(cn2.uuid));
    assert!(cn2.root.join("agents/vm-agent/image_uuid").exists());
    assert!(!dir.path().join("templates").join("mockcloud-0").exists());
    dc.shutdown().await;
}

/// The orchestrator with every step through CNAPI execute: the real
/// `agentsadm gz` installs each component on rooted servers, cn-agent
/// hands itself to agentsadm-install and is confirmed through
/// server.agents; the datacenter converges and each GZ agrees with CNAPI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrated_update_through_execute_converges() {
    use agentsadm_orchestrate::execute::ExecOptions;
    use agentsadm_orchestrate::images::ImageChoice;
    use agentsadm_orchestrate::report::NullReporter;
    use agentsadm_orchestrate::session::Session;
    use agentsadm_orchestrate::transport::CnapiTransportConfig;
    use agentsadm_plan::ComponentSelection;
    use agentsadm_plan::Operation;
    use agentsadm_plan::Request;
    use agentsadm_plan::ServerSelection;
    use agentsadm_plan::TransportMode;
    use agentsadm_sim::SeedSpec;

    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .unwrap();
    let apis = dc.apis();
    let catalog = dc.catalog().clone();
    let session = Session {
        apis: &apis,
        catalog: &catalog,
        updates: None,
    };
    let req = Request {
        operation: Operation::Update,
        components: ComponentSelection::All,
        servers: ServerSelection::All,
        exclude: Vec::new(),
    };
    let planned = session
        .plan(&req, ImageChoice::Latest, TransportMode::Execute)
        .await
        .unwrap();
    let transport = CnapiTransportConfig {
        wait_chunk: Duration::from_secs(5),
        execute_timeout: Duration::from_secs(60),
        confirm_poll: (Duration::from_millis(20), Duration::from_millis(200)),
        ..Default::default()
    };
    let options = ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let report = crate::flows_common::execute_yes(
        session.apis,
        session.catalog,
        &planned.plan,
        &options,
        transport,
        &NullReporter,
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(&planned.plan));
    let again = session
        .plan(&req, ImageChoice::Latest, TransportMode::Execute)
        .await
        .unwrap();
    assert!(again.plan.is_empty(), "{}", again.plan);
    let cn_agent = &planned.plan.targets()["cn-agent"];
    for s in dc.servers() {
        let gz = dc.gz_report(s.uuid).await.unwrap();
        assert_eq!(gz.agents, dc.server_agents(s.uuid), "{}", s.hostname);
        assert!(
            gz.agents
                .iter()
                .any(|a| a.name == "cn-agent" && a.image_uuid == Some(cn_agent.uuid))
        );
    }
    dc.shutdown().await;
}

/// A server with an injected install failure (a failing postinstall) that
/// is asked to install the image it already runs answers `unchanged`, as a
/// real installer does without running a hook: an orchestrator whose turn
/// an API outage cut short sends exactly that for the steps the first try
/// finished. An install that would change something still fails.
#[tokio::test]
async fn an_injected_failure_spares_an_install_that_changes_nothing() {
    let dc = SimDc::start(SimConfig::default().servers(1)).await.unwrap();
    let cn = dc.server("cn0001").unwrap();
    let old = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "gz-tools")
        .and_then(|a| a.image_uuid)
        .expect("gz-tools installed")
        .to_string();
    let new = dc
        .publish_component("gz-tools", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid
        .to_string();
    let again = ["install", new.as_str(), "--expect-current", old.as_str()];
    let r = gz(&dc, &cn, &again).await;
    assert_eq!(r.components[0].action, ComponentAction::Upgraded, "{r:?}");
    dc.faults().fail_installs_on(cn.uuid);
    // The retry of the finished step.
    let r = gz(&dc, &cn, &again).await;
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(r.components[0].action, ComponentAction::Unchanged, "{r:?}");
    // The fault still bites where the install changes something.
    let newer = dc
        .publish_component("gz-tools", &BuildOptions::new("1.2.0"), PublishTarget::Dc)
        .unwrap()
        .uuid
        .to_string();
    let r = gz(&dc, &cn, &["install", &newer]).await;
    let failure = r.error.expect("the injected failure");
    assert!(failure.message.contains("injected failure"), "{failure:?}");
    dc.shutdown().await;
}
