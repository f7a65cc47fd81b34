//! How a run is pointed at a server (issue 12): a relative `--root` works
//! like the absolute one it names; on a SmartOS host a root other than `/`
//! never runs package hooks (they would act on the host's SMF) and says
//! why; the fetch limits and `--allow-inactive` are command-line flags,
//! each named in the refusal it lifts.

use std::collections::BTreeMap;

use crate::gz_common::*;
use agentsadm_sim::standin::ImgapiStandIn;

/// A vm-agent image with hooks that log into `$npm_config_etc/hooks.log`.
fn logged(semver: &str) -> agentsadm_sim::imagebuild::BuiltImage {
    let mut s = spec("vm-agent", semver);
    s.hooks = logging_hooks();
    agentsadm_sim::imagebuild::build(&s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_root_works_like_the_absolute_one() {
    let srv = TestServer::new(false);
    let images = tempfile::tempdir().unwrap();
    let file = write_image(&image("vm-agent", "1.0.0"), images.path());
    let parent = srv.root().parent().unwrap();
    let rel = srv.root().file_name().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .current_dir(parent)
        .arg("gz")
        .arg("install")
        .arg(&file)
        .arg("--root")
        .arg(std::path::Path::new(".").join(rel))
        .args(["--no-sapi", "--no-cnapi"])
        .env("AGENTSADM_TEST_HOST", "other")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The postinstall wrote under the root's prefix, not relative to its
    // own working directory.
    assert!(
        srv.at("opt/smartdc/agents/etc/vm-agent.installed")
            .is_file()
    );
    let xml = std::fs::read_to_string(srv.at("opt/smartdc/agents/smf/vm-agent.xml")).unwrap();
    assert!(
        xml.contains(&srv.root().display().to_string()),
        "the manifest names a relative path: {xml}"
    );
    assert!(
        !srv.at("opt/smartdc/agents/lib/node_modules/vm-agent")
            .join(rel)
            .exists(),
        "a hook wrote relative to its working directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smartos_host_runs_no_hooks_for_another_root() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let img = logged("1.0.0");
    imgapi.publish(&img);
    let uuid = img.manifest.uuid.to_string();
    let log = "opt/smartdc/agents/etc/hooks.log";
    let env = |host: &str| {
        BTreeMap::from([
            ("IMGAPI_URL".to_string(), imgapi.url()),
            ("AGENTSADM_TEST_HOST".to_string(), host.to_string()),
        ])
    };
    let srv = TestServer::new(false);
    let r = ok(&srv
        .gz(
            &["install", &uuid, "--no-sapi", "--no-cnapi"],
            &env("smartos"),
        )
        .await);
    assert!(!srv.at(log).exists(), "a hook ran");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("hooks are not run") && w.contains("this host's SMF")),
        "{:?}",
        r.warnings
    );
    assert_eq!(srv.installed_image("vm-agent"), Some(uuid.clone()));
    // Elsewhere a rooted directory runs them.
    let srv = TestServer::new(false);
    ok(&srv
        .gz(
            &["install", &uuid, "--no-sapi", "--no-cnapi"],
            &env("other"),
        )
        .await);
    assert!(srv.at(log).exists(), "no hook ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_limits_and_inactive_images_have_flags() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let srv = TestServer::new(false);
    let env = BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.url())]);
    let before = snapshot(srv.root());
    let disabled = manifest_with(&image("vm-agent", "1.0.0"), |m| m.disabled = true);
    imgapi.publish(&disabled);
    let u = disabled.manifest.uuid.to_string();
    let msg = failed(
        &srv.gz(&["install", &u, "--no-sapi", "--no-cnapi"], &env)
            .await,
    );
    assert!(
        msg.contains("is disabled") && msg.contains("pass --allow-inactive to install it anyway"),
        "{msg}"
    );
    assert_same(&before, &snapshot(srv.root()), "disabled");
    for (flag, value) in [
        ("--max-unpacked-bytes", "1K"),
        ("--max-expansion-ratio", "1"),
    ] {
        let msg = failed(
            &srv.gz(
                &[
                    "install",
                    &u,
                    "--allow-inactive",
                    flag,
                    value,
                    "--no-sapi",
                    "--no-cnapi",
                ],
                &env,
            )
            .await,
        );
        assert!(msg.contains(flag), "{flag}: {msg}");
        assert_same(&before, &snapshot(srv.root()), flag);
        srv.assert_no_leftovers();
    }
    let bad = failed_or_usage(
        &srv.gz(&["install", &u, "--max-unpacked-bytes", "lots"], &env)
            .await,
    );
    assert!(bad.contains("not a size in bytes"), "{bad}");
    ok(&srv
        .gz(
            &["install", &u, "--allow-inactive", "--no-sapi", "--no-cnapi"],
            &env,
        )
        .await);
    assert_eq!(srv.installed_image("vm-agent"), Some(u));
}

/// The error a run printed, as JSON result or usage text.
fn failed_or_usage(out: &agentsadm_api::cnapi::ExecuteResult) -> String {
    format!("{} {}", out.stdout, out.stderr)
}

/// The platform is chosen, never implied by `--root` (issue 31): told to
/// drive SmartOS (as the server's build always does), a run on a rooted
/// directory asks the host's `sysinfo`, not the directory's
/// `sysinfo.json`, so on this host it cannot identify the server, and
/// changes nothing. Told nothing, the test build takes the directory as
/// the rooted fake, as every suite does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_elsewhere_still_drives_smartos_when_chosen() {
    let srv = TestServer::new(false);
    let before = snapshot(srv.root());
    let smartos: BTreeMap<String, String> =
        [("AGENTSADM_TEST_PLATFORM".to_string(), "smartos".to_string())].into();
    let out = srv.gz(&["report", "--no-cnapi"], &smartos).await;
    assert_ne!(out.exit_status, 0, "{}", out.stdout);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("cannot identify the server"), "{all}");
    assert_same(
        &before,
        &snapshot(srv.root()),
        "a SmartOS run that could not start",
    );
    let out = srv.gz(&["report", "--no-cnapi"], &BTreeMap::new()).await;
    assert_eq!(out.exit_status, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(report(&out).server_uuid, srv.uuid);
}
