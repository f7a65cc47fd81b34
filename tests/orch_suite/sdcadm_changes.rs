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

/// A 1-server datacenter (the headnode) with newer images in its IMGAPI,
/// the headnode's GZ laid out.
async fn headnode_dc() -> (SimDc, agentsadm_sim::SimServer) {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let hn = dc.headnode();
    dc.gz_report(hn.uuid).await.unwrap();
    (dc, hn)
}

/// `sdcadm self-update IMAGE` as the headnode's disk shows it: another
/// sdcadm tree, its image and buildstamp (CNAPI is not told).
fn self_update(hn: &agentsadm_sim::SimServer, image: &agentsadm_types::image::ImageManifest) {
    let sdcadm = hn.root.join("opt/smartdc/sdcadm");
    std::fs::write(
        sdcadm.join("etc/buildstamp"),
        format!("{}\n", image.version),
    )
    .unwrap();
    std::fs::write(sdcadm.join("image_uuid"), format!("{}\n", image.uuid)).unwrap();
}

/// The sdcadm image the headnode's disk holds, as its own report says
/// (agentsadm's install record, or what sdcadm put over it).
async fn sdcadm_on_disk(dc: &SimDc, hn: &agentsadm_sim::SimServer) -> String {
    let report = dc.gz_report(hn.uuid).await.unwrap();
    let sdcadm = report.agents.iter().find(|a| a.name == "sdcadm").unwrap();
    sdcadm.image_uuid.unwrap().to_string()
}

/// The image the headnode's SAPI sdcadm instance names.
async fn sdcadm_in_sapi(dc: &SimDc, hn: &agentsadm_sim::SimServer) -> String {
    let service = dc.seed_report().unwrap().services["sdcadm"];
    let instances = dc.apis().sapi.list_agent_instances().await.unwrap();
    let mine: Vec<_> = instances
        .iter()
        .filter(|i| i.service_uuid == service)
        .filter(|i| {
            i.params
                .as_ref()
                .and_then(|p| p.get("server_uuid"))
                .and_then(Value::as_str)
                == Some(hn.uuid.to_string().as_str())
        })
        .collect();
    assert_eq!(mine.len(), 1, "{instances:?}");
    mine[0].params.as_ref().unwrap()["image_uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `check --fix` after sdcadm changed sdcadm on the headnode, in either
/// direction, records what runs in SAPI and reinstalls nothing; the
/// finding (wrong-image, exit 2) says how to go back with sdcadm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_keeps_what_sdcadm_put_in_place() {
    let (dc, hn) = headnode_dc().await;
    let seed = dc.seed_report().unwrap();
    let (old, new) = (&seed.images["sdcadm"], &seed.dc_newer["sdcadm"]);
    let root = hn.root.to_str().unwrap().to_string();
    let aa = |args: &'static [&'static str]| {
        let cmd = crate::cli_common::agentsadm(&dc)
            .without_updates()
            .env("AGENTSADM_TEST_HEADNODE_ROOT", &root);
        async move { cmd.run(args).await }
    };
    let finding = |out: &str| -> Value {
        let doc: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let found: Vec<&Value> = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["component"] == "sdcadm")
            .collect();
        assert_eq!(found.len(), 1, "{doc}");
        found[0].clone()
    };
    // Newer (`sdcadm self-update --latest`), then back to the older one
    // (`sdcadm self-update OLD`), each after check --fix recorded the last.
    for (runs, named) in [(new, old), (old, new)] {
        self_update(&hn, runs);
        let (code, out, err) = aa(&["check", "--json"]).await;
        assert_eq!(code, 2, "{out}{err}");
        let f = finding(&out);
        assert_eq!(f["kind"], "wrong-image", "{f}");
        assert_eq!(f["fix"]["action"], "set-params", "{f}");
        assert_eq!(f["fix"]["image"], runs.uuid.to_string(), "{f}");
        let details = f["details"].as_str().unwrap();
        assert!(
            details.contains(&format!("sdcadm self-update {}", named.uuid)),
            "{details}"
        );
        let (code, out, err) = aa(&["check", "--fix", "-y"]).await;
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            sdcadm_on_disk(&dc, &hn).await,
            runs.uuid.to_string(),
            "{out}"
        );
        assert_eq!(sdcadm_in_sapi(&dc, &hn).await, runs.uuid.to_string());
        let (code, out, err) = aa(&["check", "--json"]).await;
        assert_eq!(code, 0, "{out}{err}");
    }
    dc.shutdown().await;
}

/// `update sdcadm --image OLDER` after a `sdcadm self-update` plans from
/// the headnode's disk, not from CNAPI's stale registration of the older
/// image: the older sdcadm is put back on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_back_from_a_self_update_changes_the_disk() {
    let (dc, hn) = headnode_dc().await;
    let seed = dc.seed_report().unwrap();
    let (old, new) = (&seed.images["sdcadm"], &seed.dc_newer["sdcadm"]);
    self_update(&hn, new);
    let old_uuid = old.uuid.to_string();
    let (code, out, err) = crate::cli_common::agentsadm(&dc)
        .without_updates()
        .env("AGENTSADM_TEST_HEADNODE_ROOT", hn.root.to_str().unwrap())
        .run(&[
            "update",
            "sdcadm",
            "-s",
            hn.hostname.as_str(),
            "--image",
            old_uuid.as_str(),
            "-y",
        ])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(sdcadm_on_disk(&dc, &hn).await, old_uuid, "{out}{err}");
    assert_eq!(sdcadm_in_sapi(&dc, &hn).await, old_uuid);
    dc.shutdown().await;
}
