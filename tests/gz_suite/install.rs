//! GZ installer: install, upgrade, rollback, remove and report on a rooted
//! directory, for every component kind, through the in-process CLI entry
//! point (`run_captured`) against a loopback IMGAPI stand-in.

use std::collections::BTreeMap;

use crate::gz_common::*;
use agentsadm_api::remote::ComponentAction;
use agentsadm_sim::standin::ImgapiStandIn;

fn offline_env(imgapi: &ImgapiStandIn) -> BTreeMap<String, String> {
    BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.url())])
}

#[tokio::test]
async fn installs_every_kind_on_a_headnode_and_reports_it() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let hn = TestServer::new(true);
    let names = [
        "agents_core",
        "config-agent",
        "vm-agent",
        "net-agent",
        "cn-agent",
        "gz-tools",
        "dockerlogger",
        "sdcadm",
        "marlin-agent",
    ];
    let mut uuids = Vec::new();
    for n in names {
        let img = image(n, "1.0.0");
        imgapi.publish(&img);
        uuids.push(img.manifest.uuid.to_string());
    }
    let mut args: Vec<&str> = vec!["install"];
    args.extend(uuids.iter().map(String::as_str));
    args.extend(["--no-sapi", "--no-cnapi"]);
    let r = ok(&hn.gz(&args, &offline_env(&imgapi)).await);
    assert_eq!(r.components.len(), names.len());
    assert!(
        r.components
            .iter()
            .all(|c| c.action == ComponentAction::Installed)
    );
    // Core components first, cn-agent last.
    assert_eq!(r.components[0].name, "agents_core");
    assert_eq!(r.components[1].name, "config-agent");
    assert_eq!(r.components.last().unwrap().name, "cn-agent");

    // apm layout: real directory, bin link, instance UUID, rendered SMF.
    let vm = hn.at("opt/smartdc/agents/lib/node_modules/vm-agent");
    assert!(
        vm.is_dir()
            && !std::fs::symlink_metadata(&vm)
                .unwrap()
                .file_type()
                .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(hn.at("opt/smartdc/agents/bin/vm-agent")).unwrap(),
        std::path::Path::new("../lib/node_modules/vm-agent/bin/vm-agent")
    );
    assert!(
        hn.instance("vm-agent")
            .unwrap()
            .parse::<uuid::Uuid>()
            .is_ok()
    );
    let xml = std::fs::read_to_string(hn.at("opt/smartdc/agents/smf/vm-agent.xml")).unwrap();
    assert!(
        xml.contains(&vm.to_string_lossy().to_string()),
        "@@ROOT@@ rendered: {xml}"
    );
    assert!(!xml.contains("@@"));
    assert_eq!(
        std::fs::read_link(vm.join("node")).unwrap(),
        std::path::Path::new("lib")
    );
    // marlin-agent installs as package `marlin`.
    assert!(
        hn.at("opt/smartdc/agents/lib/node_modules/marlin/image_uuid")
            .is_file()
    );
    let smf = hn.smf_state();
    assert_eq!(smf["svc:/smartdc/agent/vm-agent:default"], "online");
    assert_eq!(smf["svc:/smartdc/dockerlogger:default"], "online");
    // gz-tools: the headnode gets tools.tar.gz (sdc-server is not in cn_tools).
    assert!(hn.at("opt/smartdc/bin/sdc-server").is_file());
    assert_eq!(
        std::fs::read_to_string(hn.at("opt/smartdc/etc/gz-tools.image"))
            .unwrap()
            .trim(),
        uuids[5]
    );
    // dockerlogger and sdcadm layouts.
    assert!(hn.at("opt/smartdc/docker/bin/dockerlogger").is_file());
    assert!(hn.at("opt/smartdc/docker/etc/dockerlogger.uuid").is_file());
    assert!(hn.at("var/svc/manifest/site/dockerlogger.xml").is_file());
    assert!(hn.at("opt/smartdc/sdcadm/bin/sdcadm").is_file());
    assert_eq!(
        std::fs::read_link(hn.at("opt/smartdc/bin/sdcadm")).unwrap(),
        std::path::Path::new("../sdcadm/bin/sdcadm")
    );
    hn.assert_no_leftovers();

    let rep = report(&hn.gz(&["report"], &BTreeMap::new()).await);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    let by_name: BTreeMap<&str, _> = rep.agents.iter().map(|a| (a.name.as_str(), a)).collect();
    for (n, u) in names.iter().zip(&uuids) {
        let key = if *n == "marlin-agent" { "marlin" } else { n };
        let e = by_name
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from {:?}", rep.agents));
        assert_eq!(e.image_uuid.unwrap().to_string(), *u, "{n}");
        assert!(e.uuid.is_some(), "{n} has an instance UUID");
        assert!(e.version.starts_with("1.0.0"), "{n}: {}", e.version);
    }
}

#[tokio::test]
async fn compute_node_gets_cn_tools_and_refuses_sdcadm() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let cn = TestServer::new(false);
    let tools = image("gz-tools", "1.0.0");
    let sdcadm = image("sdcadm", "1.0.0");
    imgapi.publish(&tools);
    imgapi.publish(&sdcadm);
    let before = snapshot(cn.root());
    let msg = failed(
        &cn.gz(
            &[
                "install",
                &sdcadm.manifest.uuid.to_string(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &offline_env(&imgapi),
        )
        .await,
    );
    assert!(msg.contains("headnode-only"), "{msg}");
    assert_same(&before, &snapshot(cn.root()), "sdcadm on a CN");
    ok(&cn
        .gz(
            &[
                "install",
                &tools.manifest.uuid.to_string(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &offline_env(&imgapi),
        )
        .await);
    assert!(cn.at("opt/smartdc/bin/sdc-usbkey").is_file());
    assert!(!cn.at("opt/smartdc/bin/sdc-server").exists());
}

#[tokio::test]
async fn upgrade_runs_hooks_like_apm_and_keeps_the_instance_uuid() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let mut s1 = spec("net-agent", "1.0.0");
    s1.hooks = logging_hooks();
    let mut s2 = spec("net-agent", "1.1.0");
    s2.hooks = logging_hooks();
    let v1 = agentsadm_sim::imagebuild::build(&s1);
    let v2 = agentsadm_sim::imagebuild::build(&s2);
    let f1 = write_image(&v1, dir.path());
    let f2 = write_image(&v2, dir.path());
    let r = ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Installed);
    let instance = srv.instance("net-agent").unwrap();
    std::fs::remove_file(srv.at("opt/smartdc/agents/etc/hooks.log")).unwrap();

    let r = ok(&srv.gz_offline(&["install", f2.to_str().unwrap()]).await);
    let c = &r.components[0];
    assert_eq!(c.action, ComponentAction::Upgraded);
    assert_eq!(c.from_image, Some(v1.manifest.uuid));
    assert_eq!(c.image_uuid, Some(v2.manifest.uuid));
    assert_eq!(
        srv.instance("net-agent").unwrap(),
        instance,
        "net-agent's identity never changes"
    );
    assert_eq!(c.instance_uuid.unwrap().to_string(), instance);

    let log = std::fs::read_to_string(srv.at("opt/smartdc/agents/etc/hooks.log")).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    let order: Vec<(&str, &str)> = lines.iter().map(|l| (l[0], l[1])).collect();
    assert_eq!(
        order,
        vec![
            (s1.version.as_str(), "preuninstall"),
            (s1.version.as_str(), "postuninstall"),
            (s2.version.as_str(), "preinstall"),
            (s2.version.as_str(), "postinstall"),
        ]
    );
    let installed = srv
        .at("opt/smartdc/agents/lib/node_modules/net-agent")
        .canonicalize()
        .unwrap();
    assert_eq!(
        lines[0][2],
        installed.to_str().unwrap(),
        "old hooks run in the installed dir"
    );
    assert!(
        lines[2][2].contains("/.agentsadm/staging/"),
        "preinstall runs in staging: {}",
        lines[2][2]
    );
    assert_eq!(lines[3][2], installed.to_str().unwrap());
    srv.assert_no_leftovers();
    assert!(
        srv.at("opt/smartdc/agents/.agentsadm/previous/net-agent/tree/image_uuid")
            .is_file()
    );
}

#[tokio::test]
async fn install_that_exists_changes_nothing() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec("vm-agent", "1.0.0");
    s.hooks = logging_hooks();
    let f = write_image(&agentsadm_sim::imagebuild::build(&s), dir.path());
    ok(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
    let before = snapshot(srv.root());
    let r = ok(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
    assert_eq!(r.components[0].action, ComponentAction::Unchanged);
    assert_same(
        &before,
        &snapshot(srv.root()),
        "reinstalling the same image",
    );
    // In text, it says so and how to repair.
    let out = agentsadm_cli::gz::command::run_captured(
        [
            "gz",
            "install",
            f.to_str().unwrap(),
            "--root",
            srv.root().to_str().unwrap(),
            "--no-sapi",
            "--no-cnapi",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
        Default::default(),
    )
    .await;
    assert_eq!(out.exit_status, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("already installed, unchanged") && out.stdout.contains("--force"),
        "{}",
        out.stdout
    );
    // --force reinstalls (hooks run again).
    let r = ok(&srv
        .gz_offline(&["install", "--force", f.to_str().unwrap()])
        .await);
    assert_eq!(r.components[0].action, ComponentAction::Upgraded);
    let log = std::fs::read_to_string(srv.at("opt/smartdc/agents/etc/hooks.log")).unwrap();
    assert_eq!(log.lines().count(), 2 + 4);
}

#[tokio::test]
async fn upgrade_then_rollback_restores_the_previous_version() {
    let srv = TestServer::new(true);
    let dir = tempfile::tempdir().unwrap();
    for name in ["cmon-agent", "gz-tools", "sdcadm", "dockerlogger"] {
        let v1 = image(name, "1.0.0");
        let v2 = image(name, "2.0.0");
        let f1 = write_image(&v1, dir.path());
        let f2 = write_image(&v2, dir.path());
        ok(&srv.gz_offline(&["install", f1.to_str().unwrap()]).await);
        let at_v1 = snapshot(srv.root());
        ok(&srv.gz_offline(&["install", f2.to_str().unwrap()]).await);
        assert_ne!(at_v1, snapshot(srv.root()), "{name} upgraded");
        let r = ok(&srv.gz_offline(&["rollback", name]).await);
        assert_eq!(
            r.components[0].action,
            ComponentAction::RolledBack,
            "{name}"
        );
        assert_eq!(r.components[0].image_uuid, Some(v1.manifest.uuid), "{name}");
        assert_same(
            &at_v1,
            &snapshot(srv.root()),
            &format!("{name} rolled back"),
        );
        srv.assert_no_leftovers();
        // Rolling back again returns to v2.
        let r = ok(&srv.gz_offline(&["rollback", name]).await);
        assert_eq!(r.components[0].image_uuid, Some(v2.manifest.uuid), "{name}");
    }
    let msg = failed(&srv.gz_offline(&["rollback", "vm-agent"]).await);
    assert!(msg.contains("no previous version"), "{msg}");
}

#[tokio::test]
async fn remove_deletes_tree_links_instance_and_services() {
    let srv = TestServer::new(false);
    let empty = snapshot(srv.root());
    let dir = tempfile::tempdir().unwrap();
    let f = write_image(&image("firewaller", "1.0.0"), dir.path());
    let g = write_image(&image("dockerlogger", "1.0.0"), dir.path());
    ok(&srv
        .gz_offline(&["install", f.to_str().unwrap(), g.to_str().unwrap()])
        .await);
    assert_eq!(srv.smf_state().len(), 2);
    let r = ok(&srv
        .gz_offline(&["remove", "firewaller", "dockerlogger"])
        .await);
    assert!(
        r.components
            .iter()
            .all(|c| c.action == ComponentAction::Removed)
    );
    assert!(srv.smf_state().is_empty());
    // Only empty directories and the (empty) SMF state file remain.
    let after: BTreeMap<String, String> = snapshot(srv.root())
        .into_iter()
        .filter(|(_, v)| !v.starts_with("dir"))
        .collect();
    let empty: BTreeMap<String, String> = empty
        .into_iter()
        .filter(|(_, v)| !v.starts_with("dir"))
        .collect();
    assert_same(&empty, &after, "after remove");
    let r = ok(&srv.gz_offline(&["remove", "firewaller"]).await);
    assert_eq!(r.components[0].action, ComponentAction::Absent);
    let msg = failed(&srv.gz_offline(&["remove", "no-such-agent"]).await);
    assert!(msg.contains("unknown component"), "{msg}");
}

#[tokio::test]
async fn report_lists_broken_agents_as_errors() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let f = write_image(&image("vm-agent", "1.0.0"), dir.path());
    ok(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
    std::fs::create_dir_all(srv.at("opt/smartdc/agents/lib/node_modules/legacy")).unwrap();
    std::fs::write(
        srv.at("opt/smartdc/agents/lib/node_modules/legacy/package.json"),
        "{garbage",
    )
    .unwrap();
    let rep = report(&srv.gz(&["report"], &BTreeMap::new()).await);
    assert_eq!(rep.agents.len(), 1);
    assert_eq!(rep.agents[0].name, "vm-agent");
    assert_eq!(rep.errors.len(), 1);
    assert_eq!(rep.errors[0].name, "legacy");
}

#[tokio::test]
async fn bzip2_and_uncompressed_images_install() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec("smartlogin", "1.0.0");
    s.compression = agentsadm_types::image::Compression::Bzip2;
    let f = write_image(&agentsadm_sim::imagebuild::build(&s), dir.path());
    let mut s = spec("amon-agent", "1.0.0");
    s.compression = agentsadm_types::image::Compression::None;
    let g = write_image(&agentsadm_sim::imagebuild::build(&s), dir.path());
    let r = ok(&srv
        .gz_offline(&["install", f.to_str().unwrap(), g.to_str().unwrap()])
        .await);
    assert_eq!(r.components.len(), 2);
    assert!(srv.installed_image("smartlogin").is_some());
    assert!(srv.installed_image("amon-agent").is_some());
}

/// apm makes its prefix directories before anything else; real agents'
/// hooks write into them (vm-agent's postinstall renders into `smf/`) and
/// fail where they are missing. A failed install on a fresh root removes
/// the ones it made.
#[tokio::test]
async fn prefix_directories_exist_before_the_hooks_run() {
    let prefix_dirs = ["tmp", "lib/node_modules", "bin", "smf", "etc", "db"];
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec("vm-agent", "1.0.0");
    // Fails unless every prefix directory is already there.
    let check = prefix_dirs
        .iter()
        .map(|d| format!("test -d \"$npm_config_prefix/{d}\""))
        .collect::<Vec<_>>()
        .join(" && ");
    s.hooks.preinstall = Some(check.clone());
    let f = write_image(&agentsadm_sim::imagebuild::build(&s), dir.path());
    ok(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
    for d in prefix_dirs {
        assert!(srv.at(&format!("opt/smartdc/agents/{d}")).is_dir(), "{d}");
    }

    let fresh = TestServer::new(false);
    let before = snapshot(fresh.root());
    let mut s = spec("vm-agent", "1.0.0");
    s.hooks.postinstall = Some("exit 3".into());
    let f = write_image(&agentsadm_sim::imagebuild::build(&s), dir.path());
    let out = fresh.gz_offline(&["install", f.to_str().unwrap()]).await;
    assert_ne!(out.exit_status, 0);
    assert_same(
        &before,
        &snapshot(fresh.root()),
        "a failed install on a fresh root",
    );
}
