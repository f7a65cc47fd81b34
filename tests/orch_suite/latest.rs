//! Where `--latest` looks (issue 15): always the updates server's channel
//! (`-C`, else SAPI's `update_channel`), whether its URL came from
//! `UPDATES_URL`, `--updates-url` or the default, and the plan says so on
//! its first line.

use agentsadm_sim::SeedSpec;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

use agentsadm_cli::orch::{LATEST_DC_RULE, LATEST_RULE};

/// `agentsadm <args>` against `dc` with `extra` environment and no
/// `UPDATES_URL` unless `extra` sets it.
async fn cli(dc: &SimDc, args: &[&str], extra: &[(&str, &str)]) -> (i32, String, String) {
    let mut run = crate::cli_common::agentsadm(dc).without_updates();
    for (k, v) in extra {
        run = run.env(k, v);
    }
    run.run(args).await
}

/// [`cli`], expecting exit status `code`, and what it printed (masked) is
/// the snapshot `name`; returns stdout.
async fn snap(dc: &SimDc, name: &str, args: &[&str], extra: &[(&str, &str)], code: i32) -> String {
    let ran = cli(dc, args, extra).await;
    let out = ran.1.clone();
    let text = crate::snapshot::command_text(ran, args, code);
    crate::snapshot::masked_snapshot!(name, text);
    out
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
        format!(
            "{LATEST_RULE}: vm-agent from channel release (SAPI's update_channel) of the updates server {updates} (UPDATES_URL)"
        ),
        "{by_env}"
    );
    // The whole plan: 1.1.0, not the dev channel's 1.2.0.
    crate::snapshot::masked_snapshot!(
        "latest_plan_by_env",
        crate::snapshot::command_text(
            (code, by_env.clone(), err),
            &["plan", "update", "vm-agent", "--latest"],
            0
        )
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
    assert_eq!(by_flag, by_env.replace("(UPDATES_URL)", "(--updates-url)"));

    // -C names another channel: its newest, said so.
    let dev = snap(
        &dc,
        "latest_plan_channel_dev",
        &["plan", "update", "vm-agent", "--latest", "-C", "dev"],
        &[("UPDATES_URL", &updates)],
        0,
    )
    .await;
    assert_eq!(
        dev.lines().next().unwrap_or_default(),
        format!(
            "{LATEST_RULE}: vm-agent from channel dev (-C) of the updates server {updates} (UPDATES_URL)"
        ),
        "{dev}"
    );

    // Without --latest nothing is said about an updates server.
    snap(
        &dc,
        "latest_plan_without_latest",
        &["plan", "update", "vm-agent"],
        &[("UPDATES_URL", &updates)],
        0,
    )
    .await;
    assert_eq!(dc.mutation_count(), before, "planning changes nothing");
}

/// An air-gapped datacenter: `--latest --source dc` takes the newest image
/// already in the datacenter IMGAPI and never contacts the updates server
/// (here a closed port); with no updates server configured, `--latest`
/// says so instead of looking up a public name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn air_gapped_latest_and_no_updates_server() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let closed = [("UPDATES_URL", "http://127.0.0.1:1")];
    // 1.1.0 is in the datacenter IMGAPI; 1.2.0 only on the updates server.
    let out = snap(
        &dc,
        "latest_source_dc_plan",
        &["plan", "update", "vm-agent", "--latest", "--source", "dc"],
        &closed,
        0,
    )
    .await;
    assert_eq!(
        out.lines().next().unwrap_or_default(),
        format!(
            "{LATEST_DC_RULE}: vm-agent from the datacenter IMGAPI {}",
            dc.urls().imgapi
        ),
        "{out}"
    );

    // No updates server configured (no flag, no UPDATES_URL, no sdcadm
    // configuration here): one line that says what to do (never a public
    // name looked up), exit 1.
    snap(
        &dc,
        "latest_no_updates_server",
        &["update", "vm-agent", "--latest", "-n"],
        &[],
        1,
    )
    .await;
    // -C alone also needs a server; --source dc refuses -C.
    snap(
        &dc,
        "latest_channel_needs_a_server",
        &["avail", "-C", "dev"],
        &[],
        1,
    )
    .await;
    snap(
        &dc,
        "latest_source_dc_refuses_channel",
        &["avail", "--source", "dc", "-C", "dev"],
        &[],
        1,
    )
    .await;
    dc.shutdown().await;
}

/// One `--latest` rule, said identically in `update --help`, the README
/// and (above) the plan's first line.
#[test]
fn the_latest_rule_is_said_the_same_everywhere() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["update", "--help"])
        .output()
        .expect("agentsadm runs");
    let help = String::from_utf8_lossy(&help.stdout);
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    // Each rule is one sentence inside longer texts: partial matching is
    // the point.
    for rule in [LATEST_RULE, LATEST_DC_RULE] {
        assert!(
            flat(&help).contains(rule),
            "update --help lacks {rule:?}:\n{help}"
        );
        assert!(flat(&readme).contains(rule), "README.md lacks {rule:?}");
    }
}

/// `update --latest --just-import` brings the image ahead of a
/// maintenance window (sdcadm's --just-images): the datacenter IMGAPI has
/// it afterwards, and no server, service default or instance changed; a
/// second run has nothing to import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn just_import_imports_and_changes_nothing_else() {
    use agentsadm_sim::{BuildOptions, PublishTarget};
    let dc = SimDc::start(SimConfig::default().servers(2))
        .await
        .expect("simulator starts");
    let newer = dc
        .publish_component(
            "vm-agent",
            &BuildOptions {
                // A fixed UUID: the image's version and short id derive
                // from it, and the snapshots show them.
                uuid: Some(
                    "5a5e0150-0000-4000-8000-000000000150"
                        .parse()
                        .expect("a UUID"),
                ),
                ..BuildOptions::new("1.5.0")
            },
            PublishTarget::Updates {
                channels: vec!["release".into()],
            },
        )
        .unwrap();
    let updates = dc.urls().updates.clone();
    let env = [("UPDATES_URL", updates.as_str())];
    let sapi = dc.apis().sapi;
    let before = (
        sapi.list_agent_instances().await.unwrap(),
        sapi.list_agent_services().await.unwrap(),
        dc.server_agents(dc.headnode().uuid),
    );
    assert!(dc.apis().imgapi.get_image(newer.uuid).await.is_err());
    snap(
        &dc,
        "latest_just_import",
        &["update", "vm-agent", "--latest", "--just-import"],
        &env,
        0,
    )
    .await;
    assert_eq!(
        dc.apis().imgapi.get_image(newer.uuid).await.unwrap().uuid,
        newer.uuid
    );
    let after = (
        sapi.list_agent_instances().await.unwrap(),
        sapi.list_agent_services().await.unwrap(),
        dc.server_agents(dc.headnode().uuid),
    );
    assert_eq!(before, after, "nothing but the image changed");
    snap(
        &dc,
        "latest_just_import_again",
        &["update", "vm-agent", "--latest", "--just-import"],
        &env,
        0,
    )
    .await;
    dc.shutdown().await;
}
