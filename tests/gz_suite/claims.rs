//! Names that belong to someone else (issue 12): a package may not claim a
//! bin, an SMF manifest file or an SMF service another installed component
//! owns, nor a service outside its catalog namespace; each is refused with
//! the server's root and a sentinel outside it unchanged. Removal deletes
//! only what the component itself owns.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::gz_common::*;
use agentsadm_api::remote::FailureStep;
use agentsadm_api::remote::GzResult;
use agentsadm_gz::fetch::FetchOptions;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::TreeBuilder;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::ids::ImageUuid;

/// A server with vm-agent and net-agent installed, and a sentinel file
/// outside its root.
struct Scene {
    imgapi: ImgapiStandIn,
    srv: TestServer,
    _outside: tempfile::TempDir,
    sentinel: PathBuf,
}

impl Scene {
    async fn new() -> Scene {
        let imgapi = ImgapiStandIn::start().await.unwrap();
        let srv = TestServer::new(false);
        let outside = tempfile::tempdir().unwrap();
        let sentinel = outside.path().join("secret");
        std::fs::write(&sentinel, b"top secret\n").unwrap();
        std::fs::set_permissions(&sentinel, std::fs::Permissions::from_mode(0o600)).unwrap();
        let scene = Scene {
            imgapi,
            srv,
            _outside: outside,
            sentinel,
        };
        for name in ["vm-agent", "net-agent"] {
            let img = image(name, "1.0.0");
            let r = scene.install(&img).await;
            assert!(r.error.is_none(), "{name}: {:?}", r.error);
        }
        scene
    }

    fn sentinel_state(&self) -> (u32, Vec<u8>) {
        let md = std::fs::metadata(&self.sentinel).unwrap();
        (
            md.permissions().mode() & 0o7777,
            std::fs::read(&self.sentinel).unwrap(),
        )
    }

    async fn install(&self, img: &BuiltImage) -> GzResult {
        self.imgapi.publish(img);
        let mut settings = GzSettings::new(self.srv.root(), PlatformKind::Rooted);
        settings.no_sapi = true;
        settings.no_cnapi = true;
        settings.imgapi_url = Some(self.imgapi.url());
        settings.fetch = FetchOptions {
            retries: 0,
            ..FetchOptions::default()
        };
        let mut session = GzSession::open(settings, true).await.unwrap();
        session
            .install(&[ImageSource::Imgapi(img.manifest.uuid)])
            .await
    }

    /// Install `img`: refused at validate with every `expect` in the
    /// message, the root, SMF state and the sentinel as they were.
    async fn refused(&self, what: &str, img: &BuiltImage, expect: &[&str]) {
        let before = snapshot(self.srv.root());
        let smf_before = self.srv.smf_state();
        let sentinel_before = self.sentinel_state();
        let r = self.install(img).await;
        let e = r
            .error
            .unwrap_or_else(|| panic!("{what}: the install succeeded"));
        let msg = format!("{}: {}", e.step, e.message);
        eprintln!("CASE {what}: {msg}");
        assert_eq!(e.step, FailureStep::Validate, "{what}: {msg}");
        for want in expect {
            assert!(msg.contains(want), "{what}: {msg:?} lacks {want:?}");
        }
        assert_same(&before, &snapshot(self.srv.root()), what);
        assert_eq!(smf_before, self.srv.smf_state(), "{what}: SMF changed");
        assert_eq!(sentinel_before, self.sentinel_state(), "{what}: sentinel");
        self.srv.assert_no_leftovers();
    }
}

/// A vm-agent 2.0.0 package with these bins and these SMF templates
/// (file name, service name).
fn vm_agent_claiming(bins: &[&str], templates: &[(&str, &str)]) -> BuiltImage {
    let uuid = ImageUuid::new_v4();
    let bin: BTreeMap<&str, String> = bins.iter().map(|b| (*b, format!("./bin/{b}"))).collect();
    // Its postinstall renders its templates, as every real agent's does.
    let pj = serde_json::json!({"name": "vm-agent", "version": "2.0.0", "bin": bin,
        "scripts": {"postinstall": "npm/postinstall.sh"}});
    let mut t = TreeBuilder::new();
    t.dir("vm-agent")
        .file("vm-agent/package.json", 0o644, pj.to_string().as_bytes())
        .file("vm-agent/image_uuid", 0o644, format!("{uuid}\n").as_bytes())
        .dir("vm-agent/npm")
        .file(
            "vm-agent/npm/postinstall.sh",
            0o755,
            format!("#!/bin/bash\n{}\n", agentsadm_sim::imagebuild::RENDER_SMF).as_bytes(),
        )
        .dir("vm-agent/bin");
    for b in bins {
        t.file(&format!("vm-agent/bin/{b}"), 0o755, b"#!/bin/sh\necho hi\n");
    }
    t.dir("vm-agent/smf").dir("vm-agent/smf/manifests");
    for (file, service) in templates {
        let xml = format!(
            r#"<?xml version="1.0"?>
<service_bundle type="manifest" name="x">
  <service name="{service}" type="service" version="1">
    <create_default_instance enabled="true"/>
  </service>
</service_bundle>
"#
        );
        t.file(
            &format!("vm-agent/smf/manifests/{file}.xml.in"),
            0o644,
            xml.as_bytes(),
        );
    }
    raw_image("vm-agent", uuid, &t.finish())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_other_components_and_the_system_are_refused() {
    let scene = Scene::new().await;
    // A system service, by the image builder's own manifest.
    let mut spec = spec("vm-agent", "2.0.0");
    spec.smf_fmri = Some("svc:/system/filesystem/local:default".into());
    scene
        .refused(
            "system service",
            &agentsadm_sim::imagebuild::build(&spec),
            &[
                "svc:/system/filesystem/local",
                "outside vm-agent's services",
            ],
        )
        .await;
    // net-agent's service, from a manifest named after vm-agent.
    scene
        .refused(
            "net-agent's service",
            &vm_agent_claiming(&["vm-agent"], &[("vm-agent", "smartdc/agent/net-agent")]),
            &[
                "svc:/smartdc/agent/net-agent",
                "outside vm-agent's services",
            ],
        )
        .await;
    scene
        .refused(
            "net-agent's bin",
            &vm_agent_claiming(
                &["vm-agent", "net-agent"],
                &[("vm-agent", "smartdc/agent/vm-agent")],
            ),
            &["bin opt/smartdc/agents/bin/net-agent", "net-agent owns"],
        )
        .await;
    scene
        .refused(
            "net-agent's manifest file",
            &vm_agent_claiming(&["vm-agent"], &[("net-agent", "smartdc/agent/vm-agent-x")]),
            &[
                "SMF manifest opt/smartdc/agents/smf/net-agent.xml",
                "net-agent owns",
            ],
        )
        .await;
    // Its own names (a -setup service, like the real vm-agent's) install.
    let ok = vm_agent_claiming(
        &["vm-agent"],
        &[
            ("vm-agent", "smartdc/agent/vm-agent"),
            ("vm-agent-setup", "smartdc/agent/vm-agent-setup"),
        ],
    );
    let r = scene.install(&ok).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(
        scene
            .srv
            .smf_state()
            .contains_key("svc:/smartdc/agent/vm-agent-setup:default")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_deletes_only_its_own_names() {
    let scene = Scene::new().await;
    // A vm-agent tree that names net-agent's manifest and bin (as one
    // installed before claims were checked could).
    let tree = scene.srv.at("opt/smartdc/agents/lib/node_modules/vm-agent");
    std::fs::write(
        tree.join("smf/manifests/net-agent.xml.in"),
        std::fs::read(
            scene
                .srv
                .at("opt/smartdc/agents/lib/node_modules/net-agent/smf/manifests/net-agent.xml.in"),
        )
        .unwrap(),
    )
    .unwrap();
    let net_manifest = scene.srv.at("opt/smartdc/agents/smf/net-agent.xml");
    let net_bin = scene.srv.at("opt/smartdc/agents/bin/net-agent");
    let manifest_before = std::fs::read(&net_manifest).unwrap();
    assert!(std::fs::symlink_metadata(&net_bin).is_ok());
    let out = scene.srv.gz_offline(&["remove", "vm-agent"]).await;
    ok(&out);
    assert_eq!(std::fs::read(&net_manifest).unwrap(), manifest_before);
    assert!(std::fs::symlink_metadata(&net_bin).is_ok());
    let smf = scene.srv.smf_state();
    assert!(
        smf.contains_key("svc:/smartdc/agent/net-agent:default"),
        "{smf:?}"
    );
    assert!(
        !smf.contains_key("svc:/smartdc/agent/vm-agent:default"),
        "{smf:?}"
    );
    assert!(!tree.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_with_markup_are_refused() {
    let scene = Scene::new().await;
    for version in [
        "1\"/><exec_method name=\"start\" exec=\"/bin/sh\"/><x a=\"",
        "1 2",
    ] {
        let uuid = ImageUuid::new_v4();
        let pj = serde_json::json!({"name": "vm-agent", "version": version});
        let mut t = TreeBuilder::new();
        t.dir("vm-agent")
            .file("vm-agent/package.json", 0o644, pj.to_string().as_bytes())
            .file("vm-agent/image_uuid", 0o644, format!("{uuid}\n").as_bytes());
        let img = raw_image("vm-agent", uuid, &t.finish());
        scene
            .refused(&format!("version {version:?}"), &img, &["has the version"])
            .await;
    }
}
