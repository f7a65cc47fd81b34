//! The setup flows end to end, with the scripts in `installer/` and the
//! agentsadm binary: build the USB key's image directory, set up a headnode
//! with no API (then adopt and import once SAPI and IMGAPI are up), and set
//! up a compute node from empty with `agentsetup.sh` against the simulated
//! datacenter, the agentsadm binary and cn_tools served by a loopback
//! "assets zone". Also shellcheck of the scripts (a failure under CI=true without it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use agentsadm_api::sapi::CreateService;

use agentsadm_api::sapi::ServiceType;

use agentsadm_api::remote::AgentsReport;
use agentsadm_api::sapi::object;
use agentsadm_platform::Sysinfo;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::imagebuild::write_to_dir;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;
use axum::Router;
use axum::routing::get;

use crate::flows_common::*;

const BIN: &str = env!("CARGO_BIN_EXE_agentsadm");

fn installer(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("installer")
        .join(script)
}

/// Run a script with exactly these variables added (and the API URLs of
/// the test's own environment removed).
async fn run_script(script: &str, args: &[&str], env: &[(&str, String)]) -> Output {
    // Run logs of the agentsadm the script runs go to a directory of the
    // test's own, never the developer's home.
    let state = tempfile::tempdir().expect("state dir");
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(installer(script))
        .args(args)
        .env("XDG_STATE_HOME", state.path());
    for v in ["SAPI_URL", "CNAPI_URL", "IMGAPI_URL", "AGENTSADM_ROOT"] {
        cmd.env_remove(v);
    }
    // The scripts find the test's agentsadm first in PATH.
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.expect("bash runs")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Image files of every component at 1.0.0 (what the build would put on
/// the key), and their UUIDs by component. agentsadm's is `make release`'s
/// of this very binary: setup installs it over the copy it started with,
/// and the scripts go on running it.
fn images(dir: &Path) -> (Vec<PathBuf>, std::collections::BTreeMap<String, ImageUuid>) {
    let catalog = Catalog::builtin();
    let mut files = Vec::new();
    let mut uuids = std::collections::BTreeMap::new();
    for c in catalog.iter() {
        if c.kind == ComponentKind::Agentsadm {
            let spec = agentsadm_gz::release::ReleaseSpec {
                binary: PathBuf::from(BIN),
                semver: "1.0.0".into(),
                branch: "master".into(),
                timestamp: "20260101T000000Z".into(),
                git_sha: "0123456".into(),
                uuid: None,
            };
            let r = agentsadm_gz::release::write_release(&spec, dir).unwrap();
            files.push(r.tarball);
            uuids.insert(c.name.to_string(), r.manifest.uuid);
            continue;
        }
        let img = build(&ImageSpec::for_component(c, "1.0.0"));
        let (_, file) = write_to_dir(&img, dir).unwrap();
        files.push(file);
        uuids.insert(c.name.to_string(), img.manifest.uuid);
    }
    (files, uuids)
}

/// A GZ root for a server: sysinfo.json (and the setup state joysetup
/// leaves for a compute node).
fn gz_root(dir: &Path, uuid: ServerUuid, hostname: &str, headnode: bool) {
    let sysinfo = Sysinfo {
        uuid,
        hostname: hostname.to_string(),
        headnode,
    };
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("sysinfo.json"),
        serde_json::to_vec_pretty(&sysinfo.to_json()).unwrap(),
    )
    .unwrap();
    if !headnode {
        std::fs::create_dir_all(dir.join("var/lib")).unwrap();
        std::fs::write(
            dir.join("var/lib/setup.json"),
            r#"{"node_type":"computenode","start_time":"2026-01-01T00:00:00Z","current_state":"imgadm_setup","seen_states":["zpool_created","filesystems_setup","imgadm_setup"],"complete":false}"#,
        )
        .unwrap();
    }
}

async fn gz_report(root: &Path) -> AgentsReport {
    let out = tokio::process::Command::new(BIN)
        .args(["gz", "report", "--json", "--root"])
        .arg(root)
        .env_remove("SAPI_URL")
        .env_remove("CNAPI_URL")
        .env_remove("IMGAPI_URL")
        .output()
        .await
        .unwrap();
    ok(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn names(report: &AgentsReport) -> BTreeSet<String> {
    report.agents.iter().map(|a| a.name.to_string()).collect()
}

fn default_set(headnode: bool) -> BTreeSet<String> {
    Catalog::builtin()
        .default_set(headnode)
        .iter()
        .map(|c| c.package_name().to_string())
        .collect()
}

/// A loopback assets zone: `/extra/...` from a directory.
async fn assets_zone(extra: PathBuf) -> String {
    let app = Router::new().route(
        "/extra/{*path}",
        get(
            move |axum::extract::Path(path): axum::extract::Path<String>| {
                let extra = extra.clone();
                async move {
                    if path.split('/').any(|p| p == "..") {
                        return Err(axum::http::StatusCode::BAD_REQUEST);
                    }
                    std::fs::read(extra.join(&path)).map_err(|_| axum::http::StatusCode::NOT_FOUND)
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// cn_tools.tar.gz with one file, as the headnode build makes it.
fn cn_tools(path: &Path) {
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    let data = b"#!/bin/sh\necho sdc-sbcreate\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    tar.append_data(&mut h, "bin/sdc-sbcreate", &data[..])
        .unwrap();
    tar.into_inner().unwrap().finish().unwrap();
}

/// What sdc-init.js does before adopt_agents: the `sdc` application and an
/// agent service (without params.image_uuid) per apm agent.
async fn sdc_init(dc: &SimDc) {
    let apis = dc.apis();
    let app = apis
        .sapi
        .create_application(
            "sdc",
            "930896af-bf8c-48d4-885c-6573a94b1853",
            object([("datacenter_name", "coal")]),
        )
        .await
        .unwrap();
    for c in dc.catalog().iter() {
        // The agentsshar's set: apm agents every server gets.
        if c.kind != ComponentKind::ApmAgent || !c.in_default_set(false) {
            continue;
        }
        apis.sapi
            .create_service(&CreateService {
                name: c.name.to_string(),
                application_uuid: app.uuid,
                service_type: Some(ServiceType::Agent),
                params: Some(object([(
                    "tags",
                    serde_json::json!({"smartdc_role": c.name, "smartdc_type": "core"}),
                )])),
                metadata: Some(object([("SERVICE_NAME", c.name.to_string())])),
                manifests: None,
                uuid: None,
            })
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headnode_then_compute_node_from_empty() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("images");
    std::fs::create_dir_all(&src).unwrap();
    let (files, uuids) = images(&src);

    // The build: the key's extra/ directory.
    let extra = work.path().join("extra");
    let shar = work
        .path()
        .join("agents-master-20260101T000000Z-g0123456.sh");
    std::fs::write(&shar, "#!/bin/sh\nexit 0\n").unwrap();
    let mut args: Vec<String> = vec![
        "-A".into(),
        BIN.into(),
        "-a".into(),
        BIN.into(),
        "-s".into(),
        shar.display().to_string(),
        extra.display().to_string(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&run_script("build-usbkey-agents.sh", &argv, &[]).await);
    let agents_dir = extra.join("agents");
    assert!(agents_dir.join("index.json").exists());
    assert!(extra.join("agentsadm/agentsadm").exists());
    assert_eq!(
        std::fs::read_link(agents_dir.join("latest")).unwrap(),
        PathBuf::from("agents-master-20260101T000000Z-g0123456.sh")
    );

    // The datacenter: APIs with nothing in them yet.
    let dc = SimDc::start(SimConfig::default().servers(2).empty())
        .await
        .unwrap();
    let urls = dc.urls().clone();
    let hn = dc.headnode();
    let hn_root = work.path().join("hn");
    gz_root(&hn_root, hn.uuid, "headnode", true);
    let hn_env = |extra_env: Vec<(&'static str, String)>| {
        let mut v = vec![
            ("AGENTSADM_ROOT", hn_root.display().to_string()),
            ("AGENTS_DIR", agents_dir.display().to_string()),
            (
                "AGENTSADM_SRC",
                extra.join("agentsadm/agentsadm").display().to_string(),
            ),
        ];
        v.extend(extra_env);
        v
    };

    // 1. Headnode: install with no API at all.
    let before = dc.mutation_count();
    ok(&run_script("headnode-agents.sh", &["install"], &hn_env(vec![])).await);
    assert_eq!(dc.mutation_count(), before, "no API call before adoption");
    let report = gz_report(&hn_root).await;
    assert_eq!(names(&report), default_set(true));
    assert!(
        report.agents.iter().all(|a| a.uuid.is_some()),
        "instance UUIDs are written: {report:?}"
    );
    assert!(hn_root.join("opt/smartdc/agentsadm/bin/agentsadm").exists());
    // Again: nothing changes.
    ok(&run_script("headnode-agents.sh", &["install"], &hn_env(vec![])).await);
    assert_eq!(gz_report(&hn_root).await, report);

    // 2. SAPI up (proto mode): adopt.
    sdc_init(&dc).await;
    ok(&run_script(
        "headnode-agents.sh",
        &["adopt"],
        &hn_env(vec![("SAPI_URL", urls.sapi.clone())]),
    )
    .await);
    let apis = dc.apis();
    let services = apis.sapi.list_agent_services().await.unwrap();
    for name in default_set(true) {
        let c = dc.catalog().get(&name).unwrap();
        let svc = services
            .iter()
            .find(|s| s.name == c.name)
            .unwrap_or_else(|| panic!("no service {name} after adopt"));
        assert_eq!(
            svc.image_uuid(),
            Some(uuids[c.name.as_str()]),
            "{name} default"
        );
        let inst = instance_of(&dc, hn.uuid, &c.name)
            .await
            .unwrap_or_else(|| panic!("no headnode instance of {name}"));
        assert_eq!(inst.image_uuid(), Some(uuids[c.name.as_str()]));
        let reported = report.agents.iter().find(|a| a.name == name).unwrap();
        assert_eq!(Some(inst.uuid), reported.uuid, "the kept UUID is adopted");
    }

    // 3. IMGAPI up: import; CNAPI up: the headnode reports.
    ok(&run_script(
        "headnode-agents.sh",
        &["import"],
        &hn_env(vec![("IMGAPI_URL", urls.imgapi.clone())]),
    )
    .await);
    for name in default_set(false) {
        let c = dc.catalog().get(&name).unwrap();
        apis.imgapi
            .get_image(uuids[c.name.as_str()])
            .await
            .unwrap_or_else(|e| panic!("{name} not imported: {e}"));
    }
    let out = tokio::process::Command::new(BIN)
        .args(["gz", "report", "--post", "--root"])
        .arg(&hn_root)
        .env("CNAPI_URL", &urls.cnapi)
        .output()
        .await
        .unwrap();
    ok(&out);
    dc.set_setup(hn.uuid, true);
    assert_clean(&check(&dc, false).await);

    // 4. A compute node from empty, through agentsetup.sh.
    let cn = dc.server("cn0001").unwrap();
    let cn_root = work.path().join("cn");
    gz_root(&cn_root, cn.uuid, &cn.hostname, false);
    std::fs::create_dir_all(extra.join("joysetup")).unwrap();
    cn_tools(&extra.join("joysetup/cn_tools.tar.gz"));
    let assets = assets_zone(extra.clone()).await;
    let cn_env = vec![
        ("ASSETS_URL", assets.clone()),
        ("AGENTSADM_ROOT", cn_root.display().to_string()),
        ("SAPI_URL", urls.sapi.clone()),
        ("IMGAPI_URL", urls.imgapi.clone()),
        ("CNAPI_URL", urls.cnapi.clone()),
    ];
    let out = run_script("agentsetup.sh", &[], &cn_env).await;
    ok(&out);
    let report = gz_report(&cn_root).await;
    assert_eq!(names(&report), default_set(false));
    for a in &report.agents {
        let c = dc.catalog().get(&a.name).unwrap();
        assert_eq!(
            a.image_uuid,
            Some(uuids[c.name.as_str()]),
            "{} image",
            a.name
        );
        let inst = instance_of(&dc, cn.uuid, &c.name)
            .await
            .unwrap_or_else(|| panic!("no instance of {} for the new server", a.name));
        assert_eq!(Some(inst.uuid), a.uuid);
        assert_eq!(inst.image_uuid(), a.image_uuid);
    }
    let mut cnapi = dc.server_agents(cn.uuid);
    let mut local = report.agents.clone();
    cnapi.sort();
    local.sort();
    assert_eq!(cnapi, local, "server.agents is what the server has");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cn_root.join("var/lib/setup.json")).unwrap())
            .unwrap();
    let seen: Vec<&str> = state["seen_states"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(seen.contains(&"tools_installed") && seen.contains(&"agents_installed"));
    assert_eq!(state["complete"], true);
    assert_eq!(state["node_type"], "computenode");
    assert!(cn_root.join("opt/smartdc/bin/sdc-sbcreate").exists());
    assert!(cn_root.join("opt/smartdc/agentsadm/bin/agentsadm").exists());
    assert!(cn_root.join("var/log/agent-setup.log").exists());
    // The workflow marks the server set up; then nothing is out of place.
    dc.set_setup(cn.uuid, true);
    assert_clean(&check(&dc, false).await);

    // Running it again does nothing new.
    let before = dc.mutation_count();
    let out = run_script("agentsetup.sh", &[], &cn_env).await;
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("agents already installed"));
    assert_eq!(dc.mutation_count(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentsetup_refuses_what_it_cannot_fetch() {
    let work = tempfile::tempdir().unwrap();
    let extra = work.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let assets = assets_zone(extra.clone()).await;
    let root = work.path().join("cn");
    gz_root(&root, ServerUuid::new_v4(), "cn9", false);
    let out = run_script(
        "agentsetup.sh",
        &[],
        &[
            ("ASSETS_URL", assets.clone()),
            ("AGENTSADM_ROOT", root.display().to_string()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot download agentsadm"), "{err}");
    // curl -f: no error page was saved as the binary.
    assert!(!root.join("opt/smartdc/agentsadm/bin/agentsadm").exists());
    assert!(!root.join("opt/smartdc/agents").exists());

    // No setup state: refused before fetching anything.
    let bare = work.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let out = run_script(
        "agentsetup.sh",
        &[],
        &[
            ("ASSETS_URL", assets),
            ("AGENTSADM_ROOT", bare.display().to_string()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("joysetup.sh creates it"));
    // No ASSETS_URL at all.
    let out = run_script("agentsetup.sh", &[], &[]).await;
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn scripts_pass_shellcheck() {
    if !crate::tools_common::require_tool("shellcheck", "shellcheck") {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("installer");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 3, "{scripts:?}");
    let out = std::process::Command::new("shellcheck")
        .args(&scripts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
