//! Hooks that destroy the transaction, and what a transaction leaves
//! (issue 12): the previous version is kept where the new package's hooks
//! do not work (not under `staging/`), so a preinstall that deletes its
//! transaction directory or a postinstall that deletes all of `staging/`
//! still ends with the previous version restored; a rollback that truly
//! cannot complete says what is installed now and the one command that
//! repairs it, and `gz report` shows the component as broken until then.
//! Also: `gz report` never shows a component with a pending journal as
//! installed, and recovery removes the temporaries of atomic writes. An
//! upgrade that cannot keep the version it replaced (out of space or
//! inodes at the very end) says so in its result and `gz report` shows it
//! (issue 22).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use crate::gz_common::*;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::standin::ImgapiStandIn;

const STATE: &str = "opt/smartdc/agents/.agentsadm";

/// vm-agent 2.0.0 whose `hook` runs `body`.
fn with_hook(hook: &str, body: &str) -> BuiltImage {
    let mut s = spec("vm-agent", "2.0.0");
    match hook {
        "preinstall" => s.hooks.preinstall = Some(body.into()),
        _ => s.hooks.postinstall = Some(body.into()),
    }
    imagebuild::build(&s)
}

struct Scene {
    imgapi: ImgapiStandIn,
    srv: TestServer,
    v1: BuiltImage,
    _outside: tempfile::TempDir,
    sentinel: std::path::PathBuf,
}

impl Scene {
    async fn new() -> Scene {
        let imgapi = ImgapiStandIn::start().await.unwrap();
        let srv = TestServer::new(false);
        // Its hooks touch nothing outside the package (what they would
        // change there is not rolled back, by design).
        let mut v1 = spec("vm-agent", "1.0.0");
        v1.hooks.postuninstall = Some("true".into());
        let v1 = imagebuild::build(&v1);
        imgapi.publish(&v1);
        let outside = tempfile::tempdir().unwrap();
        let sentinel = outside.path().join("secret");
        std::fs::write(&sentinel, b"top secret\n").unwrap();
        std::fs::set_permissions(&sentinel, std::fs::Permissions::from_mode(0o600)).unwrap();
        let scene = Scene {
            imgapi,
            srv,
            v1,
            _outside: outside,
            sentinel,
        };
        let u1 = scene.v1.manifest.uuid.to_string();
        ok(&scene.gz(&["install", &u1]).await);
        scene
    }

    fn env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("IMGAPI_URL".to_string(), self.imgapi.url())])
    }

    async fn gz(&self, args: &[&str]) -> agentsadm_api::cnapi::ExecuteResult {
        let mut a = args.to_vec();
        a.extend(["--no-sapi", "--no-cnapi"]);
        self.srv.gz(&a, &self.env()).await
    }

    fn sentinel_state(&self) -> (u32, Vec<u8>) {
        let md = std::fs::metadata(&self.sentinel).unwrap();
        (
            md.permissions().mode() & 0o7777,
            std::fs::read(&self.sentinel).unwrap(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_that_delete_staging_leave_the_previous_version() {
    let scene = Scene::new().await;
    let before = snapshot(scene.srv.root());
    let smf_before = scene.srv.smf_state();
    let sentinel_before = scene.sentinel_state();
    for (what, img) in [
        // cwd is <txn>/new/vm-agent: `../..` is the transaction directory.
        (
            "preinstall deletes its transaction",
            with_hook("preinstall", "rm -rf \"$(cd ../.. && pwd)\""),
        ),
        (
            "postinstall deletes staging and fails",
            with_hook(
                "postinstall",
                "rm -rf \"$npm_config_prefix/.agentsadm/staging\"\nexit 1",
            ),
        ),
    ] {
        scene.imgapi.publish(&img);
        let out = scene.gz(&["install", &img.manifest.uuid.to_string()]).await;
        let msg = failed(&out);
        eprintln!("CASE {what}: {msg}");
        assert!(msg.contains("rolled back"), "{what}: {msg}");
        assert!(!msg.contains("INCOMPLETE"), "{what}: {msg}");
        assert_same(&before, &snapshot(scene.srv.root()), what);
        assert_eq!(smf_before, scene.srv.smf_state(), "{what}");
        assert_eq!(sentinel_before, scene.sentinel_state(), "{what}");
        scene.srv.assert_no_leftovers();
        let r = report(&scene.gz(&["report"]).await);
        assert!(r.errors.is_empty(), "{what}: {:?}", r.errors);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_rollback_names_the_state_and_the_repair() {
    let scene = Scene::new().await;
    let u1 = scene.v1.manifest.uuid.to_string();
    let v1_tree = snapshot(scene.srv.root());
    // Deletes agentsadm's whole state, the kept previous version with it.
    let img = with_hook(
        "postinstall",
        "rm -rf \"$npm_config_prefix/.agentsadm\"\nexit 1",
    );
    scene.imgapi.publish(&img);
    let out = scene.gz(&["install", &img.manifest.uuid.to_string()]).await;
    let msg = failed(&out);
    eprintln!("CASE state deleted: {msg}");
    let repair = format!("repair with `agentsadm gz install {u1} --force`");
    assert!(msg.contains("ROLLBACK INCOMPLETE"), "{msg}");
    assert!(msg.contains(&repair), "{msg}");
    assert!(
        msg.contains(&format!("now version {}", img.manifest.version)),
        "{msg}"
    );
    // gz report: broken, not installed, until repaired.
    let r = report(&scene.gz(&["report"]).await);
    assert!(
        r.agents.iter().all(|a| a.name != "vm-agent"),
        "{:?}",
        r.agents
    );
    let e = r
        .errors
        .iter()
        .find(|e| e.name == "vm-agent")
        .expect("vm-agent broken");
    assert!(
        e.message.starts_with("broken: ") && e.message.contains(&repair),
        "{e:?}"
    );
    // The one command repairs it.
    ok(&scene.gz(&["install", &u1, "--force"]).await);
    let r = report(&scene.gz(&["report"]).await);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let vm = r.agents.iter().find(|a| a.name == "vm-agent").unwrap();
    assert_eq!(vm.image_uuid.map(|u| u.to_string()), Some(u1.clone()));
    assert_same(&v1_tree, &snapshot(scene.srv.root()), "repaired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_never_shows_a_pending_transaction_as_installed() {
    let scene = Scene::new().await;
    let journal = scene.srv.at(&format!("{STATE}/journal/vm-agent.json"));
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    std::fs::write(&journal, b"{}").unwrap();
    let r = report(&scene.gz(&["report"]).await);
    assert!(
        r.agents.iter().all(|a| a.name != "vm-agent"),
        "{:?}",
        r.agents
    );
    let e = r
        .errors
        .iter()
        .find(|e| e.name == "vm-agent")
        .expect("reported");
    assert!(
        e.message
            .contains("transaction is under way or was interrupted"),
        "{e:?}"
    );
    std::fs::remove_file(&journal).unwrap();
    let r = report(&scene.gz(&["report"]).await);
    assert!(r.agents.iter().any(|a| a.name == "vm-agent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_removes_atomic_write_temporaries() {
    let scene = Scene::new().await;
    let planted = [
        format!("{STATE}/journal/.vm-agent.json.123456.tmp"),
        format!("{STATE}/.job.json.42.tmp"),
        format!("{STATE}/installed/.gz-tools.json.7.tmp"),
        "var/svc/.smf-state.0000abcd.tmp".to_string(),
        "opt/smartdc/agents/smf/.vm-agent.xml.99.tmp".to_string(),
        "opt/smartdc/agents/etc/.vm-agent.31337.tmp".to_string(),
    ];
    let kept = [
        "opt/smartdc/agents/etc/.notes.tmp",
        "opt/smartdc/agents/etc/x.1.tmp",
    ];
    for p in planted.iter().map(String::as_str).chain(kept) {
        let path = scene.srv.at(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"half").unwrap();
    }
    // Any locked run recovers first.
    ok(&scene.gz(&["remove", "net-agent"]).await);
    for p in &planted {
        assert!(!scene.srv.at(p).exists(), "{p} left behind");
    }
    for p in kept {
        assert!(scene.srv.at(p).exists(), "{p} is not ours and was removed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_verifies_the_kept_copy() {
    let scene = Scene::new().await;
    let v2 = image("vm-agent", "2.0.0");
    scene.imgapi.publish(&v2);
    ok(&scene.gz(&["install", &v2.manifest.uuid.to_string()]).await);
    let kept = scene.srv.at(&format!("{STATE}/previous/vm-agent/tree"));
    let pj = kept.join("package.json");
    let id = kept.join("image_uuid");
    let (pj_text, id_text) = (
        std::fs::read_to_string(&pj).unwrap(),
        std::fs::read_to_string(&id).unwrap(),
    );
    let before = snapshot(scene.srv.root());
    let smf_before = scene.srv.smf_state();
    let sentinel_before = scene.sentinel_state();
    let other_uuid = agentsadm_types::ids::ImageUuid::new_v4().to_string();
    for (what, file, text, want) in [
        (
            "version",
            &pj,
            pj_text.replace(&scene.v1.manifest.version, "6.6.6"),
            "package.json says version \"6.6.6\"",
        ),
        (
            "name",
            &pj,
            pj_text.replace("\"vm-agent\"", "\"net-agent\""),
            "package.json names \"net-agent\"",
        ),
        ("image", &id, format!("{other_uuid}\n"), "image_uuid says"),
    ] {
        std::fs::write(file, text).unwrap();
        let msg = failed(&scene.gz(&["rollback", "vm-agent"]).await);
        eprintln!("CASE kept {what}: {msg}");
        assert!(
            msg.contains("not the version recorded for it"),
            "{what}: {msg}"
        );
        assert!(msg.contains(want), "{what}: {msg}");
        assert_same(&before, &snapshot(scene.srv.root()), what);
        assert_eq!(smf_before, scene.srv.smf_state(), "{what}");
        assert_eq!(sentinel_before, scene.sentinel_state(), "{what}");
        scene.srv.assert_no_leftovers();
        std::fs::write(&pj, &pj_text).unwrap();
        std::fs::write(&id, &id_text).unwrap();
    }
    // Intact, it rolls back.
    ok(&scene.gz(&["rollback", "vm-agent"]).await);
    assert_eq!(
        scene.srv.installed_image("vm-agent"),
        Some(scene.v1.manifest.uuid.to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_cannot_keep_the_previous_version_says_so() {
    let scene = Scene::new().await;
    let v2 = image("vm-agent", "2.0.0");
    scene.imgapi.publish(&v2);
    let mut env = scene.env();
    // The filesystem is full (or out of inodes) just when the replaced
    // version is kept.
    env.insert("AGENTSADM_TEST_NO_SPACE_AT".into(), "keep-previous".into());
    let out = scene
        .srv
        .gz(
            &[
                "install",
                &v2.manifest.uuid.to_string(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &env,
        )
        .await;
    let r = ok(&out);
    assert_eq!(
        scene.srv.installed_image("vm-agent"),
        Some(v2.manifest.uuid.to_string())
    );
    let warning = r
        .warnings
        .iter()
        .find(|w| w.contains("could not be kept"))
        .unwrap_or_else(|| panic!("no warning in the result: {:?}", r.warnings));
    for want in [
        "vm-agent: the version it replaced (1.0.0",
        "No space left on device",
        "`agentsadm gz rollback vm-agent` is not possible",
    ] {
        assert!(warning.contains(want), "{want:?} in {warning}");
    }
    assert!(!scene.srv.at(&format!("{STATE}/previous/vm-agent")).exists());
    // gz report: installed, without the copy a rollback needs.
    let rep = report(&scene.gz(&["report"]).await);
    assert!(
        rep.agents
            .iter()
            .any(|a| a.name == "vm-agent" && a.image_uuid == Some(v2.manifest.uuid))
    );
    let e = rep
        .errors
        .iter()
        .find(|e| e.name == "vm-agent")
        .unwrap_or_else(|| panic!("not in the report: {:?}", rep.errors));
    assert!(
        e.message
            .starts_with("no previous version kept: the version it replaced"),
        "{e:?}"
    );
    failed(&scene.gz(&["rollback", "vm-agent"]).await);
    // The next upgrade keeps v2, and the report has nothing to say.
    let v3 = image("vm-agent", "3.0.0");
    scene.imgapi.publish(&v3);
    let r = ok(&scene.gz(&["install", &v3.manifest.uuid.to_string()]).await);
    assert!(r.warnings.iter().all(|w| !w.contains("could not be kept")));
    let rep = report(&scene.gz(&["report"]).await);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert!(scene.srv.at(&format!("{STATE}/previous/vm-agent")).exists());
}
