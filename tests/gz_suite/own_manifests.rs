//! A package's SMF manifests are its own postinstall's work (issue 13):
//! agentsadm never renders a `smf/manifests/*.xml.in` itself. A postinstall
//! that did not write one (config-agent's skips itself when it does not
//! like what it sees) fails the install, rolled back, with the server's
//! root, its SMF state and a sentinel outside it unchanged; one that did
//! has exactly what it wrote imported.

use std::os::unix::fs::PermissionsExt;

use crate::gz_common::*;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::RENDER_SMF;

/// What config-agent's postinstall does when it decides not to run: says
/// so and exits 0, its manifest unwritten.
const SKIPS_ITSELF: &str = "echo 'config-agent: not set up here; skipping postinstall' >&2\nexit 0";

const MANIFEST: &str = "opt/smartdc/agents/smf/config-agent.xml";
const FMRI: &str = "svc:/smartdc/application/config-agent:default";

fn config_agent(semver: &str, postinstall: &str, renders: bool) -> BuiltImage {
    let mut s = spec("config-agent", semver);
    s.hooks.postinstall = Some(postinstall.to_string());
    s.postinstall_renders_smf = renders;
    imagebuild::build(&s)
}

/// A file outside the server's root, and its mode and content.
struct Sentinel {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Sentinel {
    fn new() -> Sentinel {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"top secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Sentinel { _dir: dir, path }
    }

    fn state(&self) -> (u32, Vec<u8>) {
        let md = std::fs::metadata(&self.path).unwrap();
        (
            md.permissions().mode() & 0o7777,
            std::fs::read(&self.path).unwrap(),
        )
    }
}

/// Install `img` from a file; it must fail at the postinstall, naming the
/// component, the manifest and the postinstall, and change nothing.
async fn refused(srv: &TestServer, img: &BuiltImage, what: &str, how: &str) {
    let sentinel = Sentinel::new();
    let before = snapshot(srv.root());
    let smf_before = srv.smf_state();
    let sentinel_before = sentinel.state();
    let dir = tempfile::tempdir().unwrap();
    let file = write_image(img, dir.path());
    let out = srv.gz_offline(&["install", &file.to_string_lossy()]).await;
    let msg = failed(&out);
    eprintln!("CASE {what}: {msg}");
    for want in [
        "hook:postinstall: config-agent: ",
        &format!("SMF manifest {}", srv.at(MANIFEST).display()),
        how,
        "by the package's postinstall, which should have rendered it from opt/smartdc/agents/lib/node_modules/config-agent/smf/manifests/config-agent.xml.in",
        "fix the package's postinstall",
        "rolled back",
    ] {
        assert!(msg.contains(want), "{what}: {msg:?} lacks {want:?}");
    }
    assert_same(&before, &snapshot(srv.root()), what);
    assert_eq!(smf_before, srv.smf_state(), "{what}: SMF changed");
    assert_eq!(sentinel_before, sentinel.state(), "{what}: sentinel");
    srv.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postinstall_that_skips_itself_fails_the_install_and_changes_nothing() {
    // On a fresh server: the manifest was never written.
    let srv = TestServer::new(false);
    let skipping = config_agent("1.0.0", SKIPS_ITSELF, false);
    refused(&srv, &skipping, "fresh server", "was not written").await;
    assert_eq!(srv.installed_image("config-agent"), None);
    assert!(!srv.at(MANIFEST).exists());

    // Over an installed version: the old manifest, left as it was, is not
    // the new version's.
    let v1 = config_agent("1.0.0", "true", true);
    let dir = tempfile::tempdir().unwrap();
    ok(&srv
        .gz_offline(&["install", &write_image(&v1, dir.path()).to_string_lossy()])
        .await);
    let skipping = config_agent("2.0.0", SKIPS_ITSELF, false);
    refused(&srv, &skipping, "upgrade", "was left unchanged").await;
    assert_eq!(
        srv.installed_image("config-agent"),
        Some(v1.manifest.uuid.to_string())
    );
    assert_eq!(srv.smf_state()[FMRI], "online");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_a_postinstall_wrote_is_the_one_imported() {
    let srv = TestServer::new(false);
    // Renders like the real agents (the builder's RENDER_SMF), then marks
    // what it wrote.
    let postinstall = format!(
        "{RENDER_SMF}\necho '<!-- written by the postinstall -->' >> \"$npm_config_smfdir/config-agent.xml\""
    );
    let img = config_agent("1.0.0", &postinstall, false);
    let dir = tempfile::tempdir().unwrap();
    ok(&srv
        .gz_offline(&["install", &write_image(&img, dir.path()).to_string_lossy()])
        .await);
    let written = std::fs::read_to_string(srv.at(MANIFEST)).unwrap();
    let prefix = srv.at("opt/smartdc/agents");
    let tree = srv.at("opt/smartdc/agents/lib/node_modules/config-agent");
    assert!(
        written.ends_with("<!-- written by the postinstall -->\n")
            && written.contains(&format!(
                "value=\"{}/bin:/usr/bin:/usr/sbin\"",
                prefix.display()
            ))
            && written.contains(&format!("{}/bin/config-agent &amp;", tree.display()))
            && written.contains(&format!("version=\"{}\"", img.manifest.version))
            && !written.contains("@@"),
        "{written}"
    );
    assert_eq!(srv.smf_state()[FMRI], "online");
    let smf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(srv.at("var/svc/smf-state.json")).unwrap()).unwrap();
    assert_eq!(smf["services"][FMRI]["manifest"], MANIFEST);

    // The synthetic images' default postinstall renders the same way.
    let v2 = imagebuild::build(&spec("config-agent", "2.0.0"));
    ok(&srv
        .gz_offline(&["install", &write_image(&v2, dir.path()).to_string_lossy()])
        .await);
    let written = std::fs::read_to_string(srv.at(MANIFEST)).unwrap();
    assert!(
        written.contains(&format!("version=\"{}\"", v2.manifest.version))
            && !written.contains("written by the postinstall")
            && !written.contains("@@"),
        "{written}"
    );
}
