//! The run history through the binary against the simulator: every
//! changing run leaves an entry (this headnode's journal and SAPI), another
//! session (another state directory) sees it through SAPI, a run killed
//! with SIGKILL mid-rollout is listed as interrupted with the servers it
//! recorded, and the next plan schedules from what servers took.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use agentsadm_sim::LatencySpec;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;

use crate::snapshot::{command_text, masked_snapshot};

pub async fn sim(cns: usize, latency_ms: u64) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(cns)
            .populate(SeedSpec::with_newer())
            .install_latency(LatencySpec::fixed(latency_ms)),
    )
    .await
    .expect("simulator starts")
}

/// The binary against `dc` with `$XDG_STATE_HOME` at `state`.
pub fn command(dc: &SimDc, state: &Path, args: &[&str]) -> tokio::process::Command {
    let urls = dc.urls();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"));
    cmd.args(args)
        .env("SAPI_URL", &urls.sapi)
        .env("CNAPI_URL", &urls.cnapi)
        .env("IMGAPI_URL", &urls.imgapi)
        .env("UPDATES_URL", &urls.updates)
        .env("AGENTSADM_NO_PROGRESS", "1")
        .env("XDG_STATE_HOME", state)
        .env_remove("AGENTSADM_TEST_CRASH_AT")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

pub async fn cli(dc: &SimDc, state: &Path, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(120), command(dc, state, args).output())
        .await
        .expect("agentsadm finishes")
        .expect("agentsadm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `agentsadm history --json` in `state`: the runs, newest first.
pub async fn runs(dc: &SimDc, state: &Path) -> Vec<Value> {
    let (code, out, err) = cli(dc, state, &["history", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["runs"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_is_recorded_and_another_session_sees_it() {
    let dc = sim(3, 0).await;
    let here = tempfile::tempdir().unwrap();
    let (code, out, err) = cli(&dc, here.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("agentsadm history "), "{out}");

    let mine = runs(&dc, here.path()).await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    let run = &mine[0];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["operation"], "update vm-agent");
    assert!(
        run["command"]
            .as_str()
            .unwrap()
            .contains("update vm-agent --latest -y")
    );
    assert_eq!(run["servers"].as_array().unwrap().len(), 4);
    let step = &run["servers"][0]["steps"][0];
    assert_eq!(step["component"], "vm-agent");
    assert_eq!(step["status"], "done");
    assert!(step["from"].is_string() && step["to"].is_string(), "{step}");
    assert_ne!(step["from"], step["to"]);
    assert!(!run["servers"][0]["tasks"].as_array().unwrap().is_empty());
    assert_eq!(run["exit_status"], 0);
    // The service default moved, and says from where.
    assert_eq!(run["plan"]["service_changes"][0]["component"], "vm-agent");

    // Another session (no journals of its own) sees it through SAPI.
    let elsewhere = tempfile::tempdir().unwrap();
    let theirs = runs(&dc, elsewhere.path()).await;
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0]["id"], run["id"]);
    assert_eq!(theirs[0]["status"], "succeeded");
    assert_eq!(theirs[0]["servers"], run["servers"]);

    // One run per server, by its short id.
    let id = run["id"].as_str().unwrap();
    let (code, text, err) = cli(&dc, elsewhere.path(), &["history", &id[..8]]).await;
    assert_eq!(code, 0, "{err}");
    // (Its whole text is the snapshot history_run, snapshots.rs.)
    assert!(text.starts_with(&format!("Run {id}: ")), "{text}");
    // The server's outcome, once ("succeeded (done)" said it twice).
    assert!(
        text.lines()
            .any(|l| l.starts_with("cn0001 ") && l.contains(" succeeded ")),
        "{text}"
    );
    assert!(!text.contains("succeeded (done)"), "{text}");

    // The list, and its filters.
    let (_, list, _) = cli(&dc, here.path(), &["history"]).await;
    assert!(list.starts_with("RUN"), "{list}");
    assert!(
        list.contains(&id[..8]) && list.contains("succeeded"),
        "{list}"
    );
    let args = ["history", "--since", "2999-01-01"];
    let none = command_text(cli(&dc, here.path(), &args).await, &args, 0);
    masked_snapshot!("history_since_later", none);
    let args = ["history", "ffffffff"];
    let unknown = command_text(cli(&dc, here.path(), &args).await, &args, 1);
    masked_snapshot!("history_unknown_run", unknown);

    // A dry run and a refused run record nothing.
    let (code, ..) = cli(&dc, here.path(), &["update", "vm-agent", "-n"]).await;
    assert_eq!(code, 0);
    assert_eq!(runs(&dc, here.path()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_rollout_is_interrupted_with_what_it_knew() {
    let dc = sim(5, 400).await;
    let state = tempfile::tempdir().unwrap();
    let mut child = command(
        &dc,
        state.path(),
        &["update", "vm-agent", "--latest", "-y", "-J", "1"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("agentsadm starts");
    // Wait until the journal holds two finished servers, then SIGKILL.
    let dir = state.path().join("agentsadm/history");
    let finished = || -> usize {
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .map(|t| t.lines().filter(|l| l.starts_with("{\"server\"")).count())
            .sum()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while finished() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().await.expect("SIGKILL");
    let _ = child.wait().await;

    let listed = runs(&dc, state.path()).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let run = &listed[0];
    assert_eq!(run["status"], "interrupted", "{run}");
    let recorded = run["servers"].as_array().unwrap();
    assert!(
        (2..6).contains(&recorded.len()),
        "{} servers recorded",
        recorded.len()
    );
    assert!(recorded.iter().all(|s| s["outcome"] == "succeeded"));
    assert!(run["error"].as_str().unwrap().contains("process ended"));

    // The next run (its lock broken as stale: the owner is gone) seals
    // the entry and sends it to SAPI, where another session reads it.
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "-y"]).await;
    assert!(code == 0 || code == 2, "{out}{err}");
    let elsewhere = tempfile::tempdir().unwrap();
    let theirs = runs(&dc, elsewhere.path()).await;
    let old = theirs
        .iter()
        .find(|r| r["id"] == run["id"])
        .expect("the killed run in SAPI");
    assert_eq!(old["status"], "interrupted");
    assert_eq!(old["servers"].as_array().unwrap().len(), recorded.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_plan_starts_the_slowest_first_and_shows_the_expected_finish() {
    let dc = sim(4, 0).await;
    let state = tempfile::tempdir().unwrap();
    // Before any history: no estimate.
    let (_, plan, _) = cli(
        &dc,
        state.path(),
        &["plan", "update", "vm-agent", "--latest"],
    )
    .await;
    assert!(!plan.contains("expected finish"), "{plan}");
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    // Another component no server has a time for: no estimate.
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &["plan", "update", "net-agent", "--latest", "--json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["plan"]["rollout"].get("expected_finish_s").is_none(),
        "{out}"
    );
    // The same component again (back to the image before): every server
    // has its own history.
    let before = runs(&dc, state.path()).await[0]["servers"][0]["steps"][0]["from"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &["plan", "update", "vm-agent", "--image", &before, "--json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let rollout = &v["plan"]["rollout"];
    assert!(
        rollout["expected_finish_s"].as_f64().unwrap() > 0.0,
        "{rollout}"
    );
    assert_eq!(rollout["history_servers"], 5);
    let servers = rollout["waves"][0]["servers"].as_array().unwrap();
    let expected: Vec<f64> = servers
        .iter()
        .map(|s| s["expected_s"].as_f64().unwrap())
        .collect();
    assert!(
        expected.windows(2).all(|w| w[0] >= w[1]),
        "longest first: {expected:?}"
    );
    assert!(servers.iter().all(|s| s["usual_s"].is_number()));
}

/// `history RUN` draws the run (the servers on one time axis, the canary
/// and the failure marked, the spread of install times) and fits 100
/// columns however long an error is: the table once grew to the longest
/// error line (300-520 columns). The whole text stays in --json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_drawn_and_fits_100_columns() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(6)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let failing = dc.server("cn0004").unwrap().uuid;
    dc.faults().fail_installs_on(failing);
    let state = tempfile::tempdir().unwrap();
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "update",
            "vm-agent",
            "--latest",
            "-y",
            "--canary",
            "1",
            "--max-failures",
            "3",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    let run = runs(&dc, state.path()).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, text, err) = cli(&dc, state.path(), &["history", &run[..8]]).await;
    assert_eq!(code, 0, "{err}");
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "lines over 100 columns: {wide:#?}\n{text}");
    assert!(
        text.contains("Timeline: 7 servers in start order"),
        "{text}"
    );
    let row = |h: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{h} ")) && l.contains('|'))
            .unwrap_or_else(|| panic!("no timeline row for {h}:\n{text}"))
    };
    let canaries = text
        .lines()
        .filter(|l| l.contains("|") && l.contains('C'))
        .count();
    assert_eq!(canaries, 1, "{text}");
    assert!(
        row("cn0004")
            .trim_end()
            .trim_end_matches('|')
            .trim_end()
            .ends_with('x'),
        "{text}"
    );
    assert!(
        text.contains("Install times of the 6 succeeded: P50 "),
        "{text}"
    );
    assert!(
        text.contains("\nWhy (the whole text: agentsadm history"),
        "{text}"
    );
    assert!(text.contains("  cn0004: "), "{text}");
    // --json keeps every server's start, canary mark and the whole error.
    let (_, json, _) = cli(&dc, state.path(), &["history", &run[..8], "--json"]).await;
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let servers = doc["run"]["servers"].as_array().unwrap();
    assert!(servers.iter().all(|s| s["started_s"].is_number()), "{json}");
    assert_eq!(servers.iter().filter(|s| s["canary"] == true).count(), 1);
    dc.shutdown().await;
}

/// The run's picture exported for a ticket (`history RUN --svg FILE`) is
/// a document a real renderer draws: rsvg-convert (Debian's librsvg2-bin)
/// turns it into a PNG of the asked width and of the SVG's proportions,
/// and the picture is not blank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_exported_as_a_picture_a_renderer_draws() {
    if !crate::tools::require_tool("rsvg-convert", "librsvg2-bin") {
        return;
    }
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    dc.faults()
        .fail_installs_on(dc.server("cn0002").unwrap().uuid);
    let state = tempfile::tempdir().unwrap();
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 2, "{out}{err}");
    let run = runs(&dc, state.path()).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let svg = state.path().join("run.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    let (code, _, err) = cli(
        &dc,
        state.path(),
        &["history", &run[..8], "--svg", &svg_arg],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let png = state.path().join("run.png");
    let rendered = std::process::Command::new("rsvg-convert")
        .args(["-w", "820", "-o"])
        .arg(&png)
        .arg(&svg)
        .output()
        .expect("rsvg-convert runs");
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let (width, height, pixels) = read_png(&std::fs::read(&png).unwrap());
    // 5 servers: 40 px of title, 14 a row, 40 of axis and legend, on a
    // canvas 800 wide (the SVG's 800 x 150, drawn 820 wide).
    assert_eq!((width, height), (820, 154), "the picture's size");
    let distinct: std::collections::BTreeSet<u8> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 16,
        "a blank picture: {} distinct bytes",
        distinct.len()
    );
    dc.shutdown().await;
}

/// A PNG's width, height and inflated image data (IHDR, the IDAT chunks).
fn read_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    use std::io::Read;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut size, mut idat) = (8, (0, 0), Vec::new());
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                size = (
                    u32::from_be_bytes(data[..4].try_into().unwrap()),
                    u32::from_be_bytes(data[4..8].try_into().unwrap()),
                )
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let mut pixels = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut pixels)
        .expect("the image data inflates");
    (size.0, size.1, pixels)
}

/// A server whose installs fail at once every time is never a canary: its
/// failures are no speed (before, its one quick completed install made it
/// the quickest, and every rollout halted at it), it is passed over while
/// its newest step of the component failed, the plan says why, and the
/// rollout proceeds with it failing within the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_at_once_every_time_is_not_the_canary() {
    use agentsadm_sim::{BuildOptions, PublishTarget};
    let dc = sim(4, 50).await;
    let state = tempfile::tempdir().unwrap();
    let uuid = |h: &str| dc.server(h).expect(h).uuid;
    for h in ["cn0002", "cn0003", "cn0004"] {
        dc.faults().set_slow(uuid(h), 6.0);
    }
    // cn0001 is the quickest, once.
    let (code, out, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    // From now on its installs fail at once.
    dc.faults().fail_installs_on(uuid("cn0001"));
    let publish = |version: &str| {
        dc.publish_component("vm-agent", &BuildOptions::new(version), PublishTarget::Dc)
            .expect("the simulator builds vm-agent")
            .uuid
            .to_string()
    };
    let second = publish("1.2.0");
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "update", "vm-agent", "--image", &second, "-y", "--canary", "0",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("Failed:\n  cn0001 ("), "{out}");

    let third = publish("1.3.0");
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "plan", "update", "vm-agent", "--image", &third, "--canary", "1", "--json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let rollout = &v["plan"]["rollout"];
    let canary = rollout["waves"][0]["servers"][0]["hostname"]
        .as_str()
        .unwrap();
    assert_ne!(canary, "cn0001", "{rollout}");
    assert_eq!(rollout["canary_choice"]["basis"], "quickest", "{rollout}");
    assert_eq!(
        rollout["canary_choice"]["passed_over"][0]["hostname"], "cn0001",
        "{rollout}"
    );
    let (_, text, _) = cli(
        &dc,
        state.path(),
        &[
            "plan", "update", "vm-agent", "--image", &third, "--canary", "1",
        ],
    )
    .await;
    assert!(
        text.contains("passed over: cn0001 (its last vm-agent step failed)"),
        "{text}"
    );

    // The rollout: the canary passes, the others follow, cn0001 fails
    // within the budget; nothing halts.
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "update", "vm-agent", "--image", &third, "-y", "--canary", "1",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains(&format!("canary passed on {canary}")), "{out}");
    assert!(!out.contains("halted"), "{out}");
    assert!(out.contains("Failed:\n  cn0001 ("), "{out}");
    assert!(out.contains("Updated 4 of 5 servers (1 failed)"), "{out}");
}
