//! The mockcloud layout: `servers/<uuid>/agents/<name>/{image_uuid,
//! package.json,instance_uuid}` only, no hooks, cheap enough to run for many
//! servers at once.

use std::collections::BTreeMap;
use std::path::Path;

use crate::gz_common::*;
use agentsadm_api::cnapi::ExecuteResult;
use agentsadm_api::remote::ComponentAction;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::layout::LayoutKind;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_platform::Sysinfo;
use agentsadm_sim::standin::Fault;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::ids::ServerUuid;

async fn mock(root: &Path, server: ServerUuid, args: &[&str], imgapi: &str) -> ExecuteResult {
    let mut argv: Vec<String> = vec!["gz".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    for a in [
        "--layout",
        "mockcloud",
        "--root",
        root.to_str().unwrap(),
        "--server-uuid",
        &server.to_string(),
        "--no-sapi",
        "--no-cnapi",
        "--json",
    ] {
        argv.push(a.to_string());
    }
    let env = BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.to_string())]);
    agentsadm_cli::gz::command::run_captured(argv, env).await
}

fn new_server(root: &Path) -> ServerUuid {
    let uuid = ServerUuid::new_v4();
    let dir = root.join("servers").join(uuid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let s = Sysinfo {
        uuid,
        hostname: "VC".into(),
        headnode: false,
    };
    std::fs::write(
        dir.join("sysinfo.json"),
        serde_json::to_vec(&s.to_json()).unwrap(),
    )
    .unwrap();
    uuid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mockcloud_install_upgrade_rollback_remove() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let url = imgapi.url();
    let root = tempfile::tempdir().unwrap();
    let server = new_server(root.path());
    let v1 = image("cn-agent", "1.0.0");
    let v2 = image("cn-agent", "2.0.0");
    imgapi.publish(&v1);
    imgapi.publish(&v2);
    let agent = root
        .path()
        .join(format!("servers/{server}/agents/cn-agent"));
    let r = ok(&mock(
        root.path(),
        server,
        &["install", &v1.manifest.uuid.to_string()],
        &url,
    )
    .await);
    assert_eq!(r.components[0].action, ComponentAction::Installed);
    let mut files: Vec<String> = std::fs::read_dir(&agent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, vec!["image_uuid", "instance_uuid", "package.json"]);
    let instance = std::fs::read_to_string(agent.join("instance_uuid")).unwrap();

    let r = ok(&mock(
        root.path(),
        server,
        &["install", &v2.manifest.uuid.to_string()],
        &url,
    )
    .await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    assert_eq!(
        std::fs::read_to_string(agent.join("instance_uuid")).unwrap(),
        instance
    );
    let rep = report(&mock(root.path(), server, &["report"], &url).await);
    assert_eq!(rep.agents.len(), 1);
    assert_eq!(rep.agents[0].image_uuid, Some(v2.manifest.uuid));
    assert_eq!(rep.agents[0].uuid.unwrap().to_string(), instance.trim());

    // A corrupt image changes nothing.
    let v3 = image("cn-agent", "3.0.0");
    imgapi.publish(&v3);
    imgapi.set_fault(v3.manifest.uuid, Fault::Corrupt);
    let before = snapshot(root.path());
    let out = mock(
        root.path(),
        server,
        &[
            "install",
            &v3.manifest.uuid.to_string(),
            "--api-retries",
            "0",
        ],
        &url,
    )
    .await;
    assert!(failed(&out).contains("sha1"));
    assert_same(
        &before,
        &snapshot(root.path()),
        "corrupt image on mockcloud",
    );

    let r = ok(&mock(root.path(), server, &["rollback", "cn-agent"], &url).await);
    assert_eq!(r.components[0].image_uuid, Some(v1.manifest.uuid));
    assert_eq!(
        std::fs::read_to_string(agent.join("instance_uuid")).unwrap(),
        instance
    );
    let r = ok(&mock(root.path(), server, &["remove", "cn-agent"], &url).await);
    assert_eq!(r.components[0].action, ComponentAction::Removed);
    assert!(!agent.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_mock_servers_install_at_once() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let url = imgapi.url();
    let root = tempfile::tempdir().unwrap();
    let img = image("vm-agent", "1.0.0");
    imgapi.publish(&img);
    let servers: Vec<ServerUuid> = (0..40).map(|_| new_server(root.path())).collect();
    let uuid = img.manifest.uuid.to_string();
    let args = ["install", uuid.as_str()];
    let runs = servers.iter().map(|s| mock(root.path(), *s, &args, &url));
    for out in futures::future::join_all(runs).await {
        ok(&out);
    }
    for s in &servers {
        let p = root
            .path()
            .join(format!("servers/{s}/agents/vm-agent/image_uuid"));
        assert_eq!(std::fs::read_to_string(p).unwrap().trim(), uuid);
    }
}

/// dockerlogger's image is a shell archive with no image_uuid or
/// package.json: the mockcloud layout records both from the manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mockcloud_installs_a_shar_image() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let url = imgapi.url();
    let root = tempfile::tempdir().unwrap();
    let server = new_server(root.path());
    let img = image("dockerlogger", "1.0.0");
    assert!(agentsadm_gz::shar::is_shar(&img.file));
    imgapi.publish(&img);
    let r = ok(&mock(
        root.path(),
        server,
        &["install", &img.manifest.uuid.to_string()],
        &url,
    )
    .await);
    assert_eq!(r.components[0].action, ComponentAction::Installed);
    let rep = report(&mock(root.path(), server, &["report"], &url).await);
    assert_eq!(rep.agents.len(), 1);
    assert_eq!(rep.agents[0].name, "dockerlogger");
    assert_eq!(rep.agents[0].image_uuid, Some(img.manifest.uuid));
    assert_eq!(rep.agents[0].version, img.manifest.version);
}

/// gz-tools images carry no package.json; the layout records one from
/// the manifest, so the component installs and reports like the rest.
#[tokio::test]
async fn gz_tools_installs_without_a_package_json() {
    let img = image("gz-tools", "1.0.0");
    let dir = tempfile::tempdir().unwrap();
    let file = write_image(&img, dir.path());
    let source = ImageSource::from_arg(file.to_str().unwrap()).unwrap();
    let root = dir.path().join("mc");
    let server = new_server(&root);
    let mut settings = GzSettings::new(&root, PlatformKind::Rooted);
    settings.layout = LayoutKind::Mockcloud;
    settings.server_uuid = Some(server);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    let out = agentsadm_gz::install(settings.clone(), &[source]).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(out.components[0].action, ComponentAction::Installed);
    assert_eq!(
        out.components[0].version.as_deref(),
        Some(img.manifest.version.as_str())
    );
    let report = agentsadm_gz::report(settings).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.agents.len(), 1);
    assert_eq!(report.agents[0].name, "gz-tools");
    assert_eq!(report.agents[0].version, img.manifest.version);
    assert_eq!(report.agents[0].image_uuid, Some(img.manifest.uuid));
}
