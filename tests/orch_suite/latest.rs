//! Where `--latest` looks (issue 15): always the updates server's channel
//! (`-C`, else SAPI's `update_channel`), whether its URL came from
//! `UPDATES_URL`, `--updates-url` or the default, and the plan says so on
//! its first line.

use agentsadm_sim::SeedSpec;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

/// `agentsadm <args>` against `dc` with `extra` environment and no
/// `UPDATES_URL` unless `extra` sets it.
async fn cli(dc: &SimDc, args: &[&str], extra: &[(&str, &str)]) -> (i32, String, String) {
    let mut run = crate::cli_common::agentsadm(dc).without_updates();
    for (k, v) in extra {
        run = run.env(k, v);
    }
    run.run(args).await
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
