//! Output that is not a terminal carries no escape sequence: every
//! operator command, its text and its `--json`, with stdout and stderr
//! going to pipes (as to a file or `| less`), and the log lines on stderr
//! turned up to debug (every crate: the HTTP client logs each connection)
//! so that the log formatter writes on every command that calls an API.

use agentsadm_sim::{SeedSpec, SimConfig, SimDc};

/// Run `args` and fail if either stream has an ESC byte; stdout and
/// stderr.
async fn plain(dc: &SimDc, state: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = crate::cli_common::agentsadm(dc)
        .state(state)
        .env("AGENTSADM_LOG", "debug")
        .output(args)
        .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "`agentsadm {}` wrote an escape sequence to a pipe:\n{stdout}\n{stderr}",
        args.join(" ")
    );
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_escape_sequences_when_output_is_not_a_terminal() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let (code, _, err) = plain(&dc, s, &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("DEBUG"),
        "the log lines this test checks were not written: {err}"
    );
    let (code, runs, _) = plain(&dc, s, &["history", "--json"]).await;
    assert_eq!(code, 0);
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    let run = runs["runs"][0]["id"].as_str().unwrap().to_string();
    let commands: &[&[&str]] = &[
        &["list"],
        &["list", "--summary"],
        &["avail"],
        &["plan", "update", "net-agent", "--latest"],
        &["update", "net-agent", "--latest", "-n"],
        &["history"],
        &["history", &run],
        &["check"],
        &["check", "--live"],
        &["hold", "vm-agent", "-s", "cn0001", "-y"],
        &["release", "vm-agent", "-s", "cn0001", "-y"],
        &["disable", "net-agent", "-s", "cn0001", "-y"],
        &["enable", "net-agent", "-s", "cn0001", "-y"],
        &["revert", &run, "-n"],
        // An error goes through the same writers.
        &["update", "no-such-agent", "-y"],
    ];
    for args in commands {
        plain(&dc, s, args).await;
        let mut json = args.to_vec();
        json.push("--json");
        plain(&dc, s, &json).await;
    }
    dc.shutdown().await;
}
