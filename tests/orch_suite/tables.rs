//! `list` and `avail` as tables operators trim and sort (`-H`, `-o`,
//! `--sort`, `list -q`), within 120 columns, through the binary.

use agentsadm_sim::SeedSpec;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

use crate::snapshot::{command_text, masked_snapshot};

/// A simulated datacenter of `servers` compute nodes with a newer image
/// of every component published.
async fn with_newer(servers: usize) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(servers)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts")
}

/// `key` of every row of a JSON array, as booleans.
fn flags(rows: &str, key: &str) -> Vec<bool> {
    let v: serde_json::Value = serde_json::from_str(rows).unwrap_or_else(|e| panic!("{e}: {rows}"));
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_bool().unwrap_or_else(|| panic!("{key} in {r}")))
        .collect()
}

async fn cli(dc: &SimDc, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc)
        .without_updates()
        .run(args)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_avail_fit_and_take_table_options() {
    let dc = with_newer(2).await;

    let (code, out, err) = cli(&dc, &["list"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("HOSTNAME"));
    assert!(lines.iter().all(|l| l.len() <= 120), "{out}");
    // Sorted by hostname, then component.
    let keys: Vec<(&str, &str)> = lines[1..]
        .iter()
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap(), w.next().unwrap())
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    let (code, out, err) = cli(&dc, &["list", "vm-agent", "-H", "-o", "hostname,state"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "cn0001    ok\ncn0002    ok\nheadnode  ok\n");
    let (_, out, _) = cli(
        &dc,
        &[
            "list",
            "vm-agent",
            "-H",
            "-o",
            "hostname",
            "--sort",
            "-hostname",
        ],
    )
    .await;
    assert_eq!(out, "headnode\ncn0002\ncn0001\n");
    let args = ["list", "-o", "colour"];
    let text = command_text(cli(&dc, &args).await, &args, 1);
    masked_snapshot!("error_list_unknown_column", text);

    // -q: the hostnames.
    let (code, out, _) = cli(&dc, &["list", "-q"]).await;
    assert_eq!(code, 0);
    assert_eq!(out, "cn0001\ncn0002\nheadnode\n");

    // avail: short UUIDs, dates to the second, within 120 columns.
    let (code, out, err) = cli(&dc, &["avail", "--all-images"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().all(|l| l.len() <= 120), "{out}");
    assert!(!out.contains(".000Z"), "{out}");
    // Where the list came from, the header, then the images.
    assert!(out.starts_with("Images in "), "{out}");
    let first = out.lines().nth(2).unwrap();
    let image = first.split_whitespace().nth(2).unwrap();
    assert_eq!(image.len(), 8, "{first}");

    // What runs is the default; the image after it is marked newer, in
    // the NOTE column (-o takes avail's own column names) and the JSON.
    let (code, out, err) = cli(&dc, &["avail", "vm-agent", "-H", "-o", "version,note"]).await;
    assert_eq!(code, 0, "{err}");
    let notes: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(notes.len(), 2, "{out}");
    assert!(
        notes[0][0].starts_with("1.0.0") && notes[0][1] == "default",
        "{out}"
    );
    assert!(
        notes[1][0].starts_with("1.1.0") && notes[1][1] == "newer",
        "{out}"
    );
    let (_, json, _) = cli(&dc, &["avail", "vm-agent", "--json"]).await;
    assert_eq!(flags(&json, "newer"), [false, true], "{json}");
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_by_version_and_short_uuid() {
    let dc = with_newer(1).await;
    // No target: why nothing changes.
    let args = ["update", "vm-agent", "-n"];
    let text = command_text(cli(&dc, &args).await, &args, 0);
    masked_snapshot!("update_no_target", text);

    let (code, out, err) = cli(&dc, &["update", "vm-agent@1.1.0", "-n"]).await;
    assert_eq!(code, 0, "{err}");
    let args = ["update", "vm-agent@1.1.0", "-n"];
    masked_snapshot!(
        "plan_update_by_version",
        command_text((code, out.clone(), err), &args, 0)
    );
    let target = out
        .lines()
        .find(|l| l.trim_start().starts_with("vm-agent 1.1.0"))
        .unwrap_or_else(|| panic!("{out}"));
    let uuid = target.split_whitespace().last().unwrap();
    let (code, out2, err) = cli(&dc, &["update", &format!("vm-agent@{}", &uuid[..8]), "-n"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out2);
    let (code, out3, err) = cli(&dc, &["update", "vm-agent", "--image", &uuid[..8], "-n"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out3);
    let args = ["update", "vm-agent@9.9.9", "-n"];
    let text = command_text(cli(&dc, &args).await, &args, 1);
    masked_snapshot!("error_update_no_such_version", text);
    dc.shutdown().await;
}

/// `list --summary` shows the holds: per image, how many of its servers
/// are held; a datacenter-wide hold once, with who, when and why (it also
/// holds servers not set up yet, which no row shows). It once showed
/// neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_summary_shows_holds() {
    let dc = SimDc::start(SimConfig::default().servers(2))
        .await
        .expect("simulator starts");
    let (code, _, err) = cli(&dc, &["hold", "net-agent", "-s", "cn0001", "-y"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&dc, &["hold", "vm-agent", "--reason", "freeze", "-y"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&dc, &["list", "--summary"]).await;
    assert_eq!(code, 0, "{err}");
    let row = |c: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{c} ")))
            .unwrap_or_else(|| panic!("no {c}: {out}"))
            .to_string()
    };
    assert!(row("net-agent").ends_with("ok 3 (held 1)"), "{out}");
    assert!(row("vm-agent").ends_with("ok 3 (held 3)"), "{out}");
    assert!(row("cn-agent").ends_with("ok 3"), "{out}");
    let dc_wide = out
        .lines()
        .find(|l| l.starts_with("Held datacenter-wide, new servers included: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        dc_wide.contains("vm-agent (by ") && dc_wide.ends_with(": freeze)."),
        "{dc_wide}"
    );
    assert!(!dc_wide.contains("net-agent"), "{dc_wide}");
    let (_, json, _) = cli(&dc, &["list", "--summary", "--json"]).await;
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let vm = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["component"] == "vm-agent")
        .unwrap();
    assert_eq!(vm["marks"]["held"], 3, "{vm}");
    assert_eq!(vm["held_datacenter_wide"]["reason"], "freeze", "{vm}");
    dc.shutdown().await;
}

/// sdcadm's habits: `-j` is --json on every command (the listing commands,
/// `check`, a plan), `history` takes -H, -o and --sort as `list` does; a
/// usage error with `-jy` is the JSON error document, and sdcadm's `-j 5`
/// for the concurrency is a usage error, never a rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_commands_take_j_and_history_takes_table_options() {
    let dc = with_newer(1).await;
    let state = tempfile::tempdir().unwrap();
    let run = |args: &'static [&'static str]| {
        let a = crate::cli_common::agentsadm(&dc)
            .without_updates()
            .state(state.path());
        async move { a.run(args).await }
    };
    let (code, out, err) = run(&["update", "vm-agent@1.1.0", "-y", "-J", "1"]).await;
    assert_eq!(code, 0, "{out}{err}");
    for args in [
        &["list", "-j"][..],
        &["avail", "-j"][..],
        &["history", "-j"][..],
        &["check", "-j"][..],
        &["update", "vm-agent@1.1.0", "-n", "-j"][..],
        &["hold", "vm-agent", "-n", "-j"][..],
    ] {
        let (code, out, err) = run(args).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
    }
    let (code, out, err) = run(&["history", "-H", "-o", "status,command"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim_end(),
        "succeeded  agentsadm update vm-agent@1.1.0 -y -J 1",
        "{out}"
    );
    let (code, _, err) = run(&["history", "-o", "nosuchcolumn"]).await;
    assert_eq!(code, 1, "{err}");
    // A usage error asked for with `-jy` is a JSON document too.
    let (code, out, err) = run(&["update", "vm-agent", "--task-timeout", "5x", "-jy"]).await;
    assert_eq!(code, 1, "{out}{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(doc["error"]["usage"], true, "{doc}");
    // sdcadm's `-j 5`: refused before anything runs, pointing at -J.
    let runs = || async {
        let (_, out, _) = run(&["history", "-j"]).await;
        let doc: serde_json::Value = serde_json::from_str(&out).expect("history -j");
        doc["runs"].as_array().map_or(0, Vec::len)
    };
    let before = runs().await;
    let (code, out, err) = run(&["update", "vm-agent@1.0.0", "-y", "-j", "5"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("-J 5"), "{err}");
    assert_eq!(runs().await, before, "no run was recorded");
    dc.shutdown().await;
}

/// `list --summary` shows each component's version mix at a glance: a
/// bar of each image's share of the component's servers, the image SAPI
/// names for new servers starred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_summary_draws_the_version_mix() {
    let dc = with_newer(3).await;
    let (code, out, err) = cli(&dc, &["update", "vm-agent@1.1.0", "-s", "cn0001", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&dc, &["list", "--summary", "vm-agent"]).await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("vm-agent ")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    // Three of four servers on 1.0.0 (the default), one on 1.1.0.
    assert!(
        rows[0].contains(" 1.0.0") && rows[0].contains("[########--]*"),
        "{out}"
    );
    assert!(
        rows[1].contains(" 1.1.0") && rows[1].contains("[###-------] "),
        "{out}"
    );
    assert!(out.contains("\nMIX: "), "{out}");
    let (_, json, _) = cli(&dc, &["list", "--summary", "vm-agent", "--json"]).await;
    assert_eq!(flags(&json, "default"), [true, false], "{json}");
    dc.shutdown().await;
}
