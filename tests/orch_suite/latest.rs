//! Where `--latest` looks (issue 15): always the updates server's channel
//! (`-C`, else SAPI's `update_channel`), whether its URL came from
//! `UPDATES_URL`, `--updates-url` or the default, and the plan says so on
//! its first line.

use std::process::Stdio;

use agentsadm_sim::SeedSpec;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

/// `agentsadm <args>` against `dc` with `extra` environment and no
/// `UPDATES_URL` unless `extra` sets it.
async fn cli(dc: &SimDc, args: &[&str], extra: &[(&str, &str)]) -> (i32, String, String) {
    let urls = dc.urls();
    let state = tempfile::tempdir().expect("state dir");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"));
    cmd.args(args)
        .env("SAPI_URL", &urls.sapi)
        .env("CNAPI_URL", &urls.cnapi)
        .env("IMGAPI_URL", &urls.imgapi)
        .env_remove("UPDATES_URL")
        .env("AGENTSADM_NO_PROGRESS", "1")
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().await.expect("agentsadm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_looks_in_the_update_channel_wherever_the_url_came_from() {
    // 1.1.0 is in the DC IMGAPI and in every channel of the updates
    // server; 1.2.0 only in its dev and experimental channels. SAPI's
    // update_channel is release.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let updates = dc.urls().updates.clone();
    let before = dc.mutation_count();

    let (code, by_env, err) = cli(
        &dc,
        &["plan", "update", "vm-agent", "--latest"],
        &[("UPDATES_URL", &updates)],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let first = by_env.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("target: newest vm-agent in channel release of the updates server {updates}"),
        "{by_env}"
    );
    assert!(
        by_env.contains("1.1.0") && !by_env.contains("1.2.0"),
        "{by_env}"
    );

    // The same URL as an option: the same plan.
    let (code, by_flag, err) = cli(
        &dc,
        &[
            "plan",
            "update",
            "vm-agent",
            "--latest",
            "--updates-url",
            &updates,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(by_flag, by_env);

    // -C names another channel: its newest, said so.
    let (code, dev, err) = cli(
        &dc,
        &["plan", "update", "vm-agent", "--latest", "-C", "dev"],
        &[("UPDATES_URL", &updates)],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        dev.starts_with(&format!(
            "target: newest vm-agent in channel dev of the updates server {updates}"
        )),
        "{dev}"
    );
    assert!(dev.contains("1.2.0"), "{dev}");

    // Without --latest nothing is said about an updates server.
    let (code, intent, err) = cli(
        &dc,
        &["plan", "update", "vm-agent"],
        &[("UPDATES_URL", &updates)],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(!intent.contains("target:"), "{intent}");
    assert_eq!(dc.mutation_count(), before, "planning changes nothing");
}
