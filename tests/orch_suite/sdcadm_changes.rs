//! What sdcadm changes behind agentsadm shows in `list` at once (issue
//! 29): `sdcadm self-update` and `sdcadm experimental update-gz-tools`
//! replace files cn-agent never reports, so CNAPI keeps agentsadm's
//! registration of the old version. `list` reads the headnode's own disk
//! for them, and names the compute nodes whose gz-tools only the server
//! itself can confirm.

use agentsadm_sim::{SeedSpec, SimConfig, SimDc};
use serde_json::Value;

/// `list --json` rows of `component` by hostname.
fn rows<'a>(all: &'a [Value], component: &str) -> Vec<(&'a str, &'a Value)> {
    all.iter()
        .filter(|r| r["component"] == component)
        .map(|r| (r["hostname"].as_str().unwrap(), r))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_sdcadm_and_gz_tools_as_sdcadm_left_them() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let seed = dc.seed_report().unwrap();
    let (hn, cn1) = (dc.headnode(), dc.compute_nodes()[0].clone());
    for s in [&hn, &cn1] {
        dc.gz_report(s.uuid).await.unwrap();
    }
    let old_tools = seed.images["gz-tools"].uuid;
    let new_tools = &seed.dc_newer["gz-tools"];
    let new_sdcadm = &seed.dc_newer["sdcadm"];
    // `sdcadm self-update`: another sdcadm tree, another buildstamp.
    let sdcadm = hn.root.join("opt/smartdc/sdcadm");
    std::fs::write(sdcadm.join("etc/buildstamp"), "1.40.0-20261201T000000Z\n").unwrap();
    std::fs::write(sdcadm.join("image_uuid"), format!("{}\n", new_sdcadm.uuid)).unwrap();
    // `sdcadm experimental update-gz-tools`: the headnode's and cn001's.
    for s in [&hn, &cn1] {
        std::fs::write(
            s.root.join("opt/smartdc/etc/gz-tools.image"),
            format!("{}\n", new_tools.uuid),
        )
        .unwrap();
    }
    // CNAPI still has agentsadm's registrations.
    let registered = dc.server_agents(hn.uuid);
    let tools = registered.iter().find(|a| a.name == "gz-tools").unwrap();
    assert_eq!(tools.image_uuid, Some(old_tools));

    let run = |json: bool| {
        let mut args = vec!["list", "sdcadm", "gz-tools"];
        if json {
            args.push("--json");
        }
        let cmd = crate::cli_common::agentsadm(&dc)
            .without_updates()
            .env("AGENTSADM_TEST_HEADNODE_ROOT", hn.root.to_str().unwrap());
        async move { cmd.run(&args).await }
    };
    let (code, out, err) = run(true).await;
    assert_eq!(code, 0, "{err}");
    let all: Vec<Value> = serde_json::from_str(&out).unwrap();
    let sdcadm_rows = rows(&all, "sdcadm");
    assert_eq!(sdcadm_rows.len(), 1, "{out}");
    let (host, row) = sdcadm_rows[0];
    assert_eq!(host, hn.hostname);
    assert_eq!(row["version"], "1.40.0-20261201T000000Z", "{row}");
    assert_eq!(row["image"], new_sdcadm.uuid.to_string());
    assert!(
        row["note"].as_str().unwrap().contains("sdcadm changed it"),
        "{row}"
    );
    for (host, row) in rows(&all, "gz-tools") {
        if host == hn.hostname {
            // The version the disk does not say, from IMGAPI.
            assert_eq!(row["image"], new_tools.uuid.to_string(), "{row}");
            assert_eq!(row["version"], new_tools.version.as_str(), "{row}");
        } else {
            // Only the server can tell: said, not guessed.
            assert_eq!(row["image"], old_tools.to_string(), "{row}");
            assert!(
                row["note"].as_str().unwrap().starts_with("unconfirmed"),
                "{row}"
            );
        }
    }
    let (code, out, err) = run(false).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1.40.0-20261201T000000Z"), "{out}");
    assert!(
        err.contains("sdcadm changed it") && err.contains("check --live gz-tools"),
        "{err}"
    );

    // check finds what runs on the headnode against SAPI, and says where
    // it read it.
    let (_, out, err) = crate::cli_common::agentsadm(&dc)
        .without_updates()
        .env("AGENTSADM_TEST_HEADNODE_ROOT", hn.root.to_str().unwrap())
        .run(&["check", "--json"])
        .await;
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let on_headnode = |component: &str| {
        doc["findings"].as_array().unwrap().iter().any(|f| {
            f["component"] == component
                && f["hostname"] == hn.hostname.as_str()
                && f["kind"] == "wrong-image"
        })
    };
    assert!(on_headnode("sdcadm") && on_headnode("gz-tools"), "{doc}");
    let warnings = doc["warnings"].to_string();
    assert!(
        warnings.contains("read from this headnode's disk"),
        "{warnings}"
    );
}
