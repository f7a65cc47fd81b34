//! Bad input at the command line: every command group refuses unknown
//! components and servers (by UUID and by hostname), malformed UUIDs,
//! unreachable API URLs and conflicting options with exactly one line on
//! stderr, naming the cause, and exit status 1 — and changes nothing:
//! neither SAPI, nor CNAPI's `server.agents`, nor a server's files.
//!
//! The real binary runs against one simulated datacenter (and a rooted
//! global zone for `gz`), several cases at a time.

use futures::StreamExt;

use crate::gz_common::TestServer;

use crate::gz_common::image;

use crate::gz_common::ok;

use crate::gz_common::snapshot;

use crate::gz_common::write_image;
use crate::rel::Run;
use crate::rel::agentsadm;
use crate::rel::assert_same_state;
use crate::rel::dc_env;
use crate::rel::dc_state;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;

/// A loopback port nothing listens on (connection refused at once).
const DEAD_URL: &str = "http://127.0.0.1:1";
/// A well-formed UUID that names nothing in the datacenter.
const UNKNOWN_UUID: &str = "0b4e8f3a-5c1d-4e2f-9a7b-3c6d8e0f1a2b";
/// Cases run at once (most are milliseconds; the unreachable-URL ones
/// spend seconds in retries).
const PARALLEL: usize = 6;

/// One refused command line and the text its error line must contain.
struct Case {
    args: Vec<String>,
    expect: Vec<String>,
    /// Run against the simulated datacenter (else with no API URLs).
    with_dc: bool,
    /// It may print its result before the failing step (`gz report --post`
    /// prints the report, then cannot post it).
    stdout_ok: bool,
    /// More environment for this case.
    env: Vec<(String, String)>,
}

fn case(args: &[&str], expect: &[&str]) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        expect: expect.iter().map(|s| s.to_string()).collect(),
        with_dc: true,
        stdout_ok: false,
        env: Vec::new(),
    }
}

fn offline(args: &[&str], expect: &[&str]) -> Case {
    Case {
        with_dc: false,
        ..case(args, expect)
    }
}

/// Exit 1, one line on stderr (`agentsadm: error: ...` naming the cause),
/// nothing on stdout.
fn check(c: &Case, run: &Run) -> Result<(), String> {
    let lines = run.stderr_lines();
    let mut problems = Vec::new();
    if run.code != Some(1) {
        problems.push(format!("exit status {:?}, expected 1", run.code));
    }
    if lines.len() != 1 {
        problems.push(format!("{} lines on stderr, expected 1", lines.len()));
    }
    if let Some(line) = lines.first() {
        if !line.starts_with("agentsadm: error: ") {
            problems.push("the line does not start with 'agentsadm: error: '".into());
        }
        for e in &c.expect {
            if !line.contains(e.as_str()) {
                problems.push(format!("the line does not name {e:?}"));
            }
        }
    }
    if !c.stdout_ok && !run.stdout.trim().is_empty() {
        problems.push("stdout is not empty".into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "agentsadm {}: {}\n  stderr: {}\n  stdout: {}",
            c.args.join(" "),
            problems.join("; "),
            run.stderr.trim_end(),
            run.stdout.trim_end()
        ))
    }
}

/// Run every case (`env` for those against the datacenter); the failures.
async fn run_all(cases: Vec<Case>, env: Vec<(String, String)>) -> Vec<String> {
    futures::stream::iter(cases)
        .map(|c| {
            let mut env = if c.with_dc { env.clone() } else { Vec::new() };
            env.extend(c.env.iter().cloned());
            async move {
                let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
                let run = agentsadm(&args, &env).await;
                check(&c, &run).err()
            }
        })
        .buffer_unordered(PARALLEL)
        .filter_map(|e| async move { e })
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrator_commands_refuse_bad_input_with_one_line_and_change_nothing() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(2)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let cn1 = dc.server("cn0001").unwrap();
    let before = dc_state(&dc).await;
    let mutations = dc.mutation_count();
    let u = UNKNOWN_UUID;
    let unknown_server = format!("unknown server {u}");
    let sim_tmp_dir = tempfile::tempdir().unwrap();
    let sim_tmp = sim_tmp_dir.path().to_str().unwrap().to_string();
    let cases = vec![
        // list
        case(&["list", "nosuch"], &["unknown component \"nosuch\""]),
        // A name that is not a component name is refused where it is read.
        case(&["list", "A B"], &["\"A B\" is not a component name"]),
        case(&["avail", "../x"], &["\"../x\" is not a component name"]),
        case(
            &["disable", "../x", "-s", "cn0001", "-y"],
            &["\"../x\" is not a component name"],
        ),
        case(&["list", "-s", "nosuch"], &["unknown server nosuch"]),
        case(&["list", "-s", u], &[&unknown_server]),
        case(
            &["list", "--sapi-url", DEAD_URL],
            &["SAPI", "cannot connect to http://127.0.0.1:1"],
        ),
        case(&["list", "--cnapi-url", "not a url"], &["invalid API URL"]),
        case(
            &["list", "--log-file", "/nonexistent/agentsadm/log"],
            &["cannot open log file"],
        ),
        // avail
        case(&["avail", "nosuch"], &["unknown component \"nosuch\""]),
        case(
            &[
                "avail",
                "vm-agent",
                "--channel",
                "dev",
                "--updates-url",
                DEAD_URL,
            ],
            &["cannot list images from http://127.0.0.1:1"],
        ),
        // plan
        case(&["plan", "update", "nosuch"], &["unknown component"]),
        case(&["plan", "install", "dockerlogger"], &["--all-servers"]),
        case(
            &[
                "plan",
                "remove",
                "cmon-agent",
                "-s",
                "cn0001",
                "--sapi-url",
                DEAD_URL,
            ],
            &["cannot connect to http://127.0.0.1:1"],
        ),
        // update
        case(&["update", "-y"], &["name the components"]),
        case(
            &["update", "nosuch", "-y"],
            &["unknown component \"nosuch\""],
        ),
        case(
            &["update", "vm-agent", "--image", "not-a-uuid", "-y"],
            &["no vm-agent image matches \"not-a-uuid\"", "avail vm-agent"],
        ),
        case(
            &["update", "vm-agent", "--image", u, "--latest", "-y"],
            &["'--image <IMAGE>' cannot be used with '--latest'"],
        ),
        case(
            &["update", "--all", "vm-agent", "-y"],
            &["'--all' cannot be used with"],
        ),
        case(
            &["update", "vm-agent", "cn-agent", "--image", u, "-y"],
            &["--image needs exactly one component"],
        ),
        case(
            &[
                "update",
                "vm-agent",
                "--latest",
                "-s",
                "cn0001,nosuch",
                "-y",
            ],
            &["unknown server nosuch"],
        ),
        case(
            &["update", "vm-agent", "--latest", "-s", u, "-y"],
            &[&unknown_server],
        ),
        case(
            &["update", "vm-agent", "--latest", "-x", "nosuch", "-y"],
            &["unknown server nosuch"],
        ),
        case(
            &["update", "vm-agent", "--image", u, "-y"],
            &[u, "is in neither the datacenter IMGAPI"],
        ),
        case(
            &[
                "update",
                "vm-agent",
                "--latest",
                "-y",
                "--cnapi-url",
                DEAD_URL,
            ],
            &["CNAPI", "cannot connect to http://127.0.0.1:1"],
        ),
        case(
            &["update", "vm-agent", "--task-timeout", "soon", "-y"],
            &["invalid value 'soon' for '--task-timeout"],
        ),
        // install
        case(
            &["install", "nosuch", "-s", "cn0001", "-y"],
            &["unknown component \"nosuch\""],
        ),
        case(
            &[
                "install",
                "dockerlogger",
                "-s",
                "cn0001",
                "--all-servers",
                "-y",
            ],
            &["cannot be used with '--all-servers'"],
        ),
        case(&["install", "dockerlogger", "-y"], &["--all-servers"]),
        case(
            &["install", "dockerlogger", "-s", "nosuch", "-y"],
            &["unknown server nosuch"],
        ),
        case(
            &[
                "install",
                "dockerlogger",
                "--all-servers",
                "--image",
                "1234",
                "-y",
            ],
            &["no dockerlogger image matches \"1234\""],
        ),
        case(
            &[
                "install",
                "dockerlogger",
                "--all-servers",
                "--image",
                u,
                "-y",
            ],
            &[u],
        ),
        // remove
        case(&["remove", "cmon-agent", "-y"], &["-s SERVERS"]),
        case(
            &["remove", "cmon-agent", "-s", "nosuch", "-y"],
            &["unknown server nosuch"],
        ),
        case(&["remove", "cmon-agent", "-s", u, "-y"], &[&unknown_server]),
        case(
            &["remove", "nosuch", "-s", "cn0001", "-y"],
            &["unknown component \"nosuch\""],
        ),
        case(
            &[
                "remove",
                "cmon-agent",
                "-s",
                "cn0001",
                "--all-servers",
                "-y",
            ],
            &["unexpected argument '--all-servers'"],
        ),
        // adopt
        case(&["adopt", "-s", "nosuch"], &["unknown server nosuch"]),
        case(
            &["adopt", "--sapi-url", DEAD_URL],
            &["cannot connect to http://127.0.0.1:1"],
        ),
        // disable / enable (issue 25)
        case(
            &["disable", "nosuch", "-s", "cn0001", "-y"],
            &["unknown component \"nosuch\""],
        ),
        case(
            &["disable", "net-agent", "-s", "nosuch", "-y"],
            &["unknown server nosuch"],
        ),
        case(&["disable", "net-agent", "-y"], &["-s"]),
        case(&["enable", "net-agent", "-s", u, "-y"], &[&unknown_server]),
        // hold / release
        case(
            &["hold", "nosuch", "--reason", "x"],
            &["unknown component \"nosuch\""],
        ),
        case(
            &["hold", "vm-agent", "-s", "nosuch"],
            &["unknown server nosuch"],
        ),
        case(
            &["release", "vm-agent", "--sapi-url", DEAD_URL],
            &["cannot connect to http://127.0.0.1:1"],
        ),
        // history / revert (issue 24)
        case(&["history", "nosuchrun"], &["nosuchrun"]),
        case(&["history", "--since", "yesterdayish"], &["yesterdayish"]),
        case(&["revert", "nosuchrun", "-y"], &["nosuchrun"]),
        // sim
        case(
            &["sim", "serve", "--servers", "many"],
            &["invalid value 'many' for '--servers"],
        ),
        Case {
            // A refused start leaves its state directory behind (see
            // `a_refused_sim_serve_leaves_no_state_directory`): in ours.
            env: vec![("AGENTSADM_SIM_TMPDIR".into(), sim_tmp.clone())],
            ..case(
                &["sim", "serve", "--servers", "1", "--not-setup", "nosuch"],
                &["no simulated server \"nosuch\""],
            )
        },
        // bench
        case(
            &["bench", "install", "--runs", "0"],
            &["--runs and --image-mb must be at least 1"],
        ),
        case(
            &["bench", "rollout", "--backend", "cloud"],
            &["invalid value 'cloud' for '--backend"],
        ),
        case(
            &["bench", "all", "--only", "nosuch"],
            &["invalid value 'nosuch' for '--only"],
        ),
        // No API URL at all (not on a headnode).
        offline(&["list"], &["no SAPI URL", "--sapi-url"]),
        offline(
            &["update", "vm-agent", "--latest", "-y"],
            &["no SAPI URL", "SAPI_URL"],
        ),
    ];
    let failures = run_all(cases, dc_env(&dc)).await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_same_state(&before, &dc_state(&dc).await, "bad input");
    assert_eq!(dc.mutation_count(), mutations, "a refused command wrote");
    assert_eq!(dc.record(cn1.uuid).map(|r| r.setup), Some(true));
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gz_commands_refuse_bad_input_with_one_line_and_change_nothing() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let v1 = image("vm-agent", "1.0.0");
    ok(&srv
        .gz_offline(&["install", write_image(&v1, dir.path()).to_str().unwrap()])
        .await);
    // An image whose manifest names a component agentsadm does not know.
    let mut stranger = image("vm-agent", "2.0.0");
    stranger.manifest.name = "not-an-agent".into();
    let stranger = write_image(&stranger, dir.path());
    let before = snapshot(srv.root());
    let root = srv.root().to_str().unwrap().to_string();
    let u = UNKNOWN_UUID;
    let gz = |args: &[&str], expect: &[&str]| {
        let mut a = vec!["gz"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--root", &root]);
        offline(&a, expect)
    };
    let dead = ["--no-sapi", "--no-cnapi", "--imgapi-url", DEAD_URL];
    let cases = vec![
        gz(
            &[
                "install",
                "0b4e8f3a-5c1d-4e2f-9a7b",
                "--no-sapi",
                "--no-cnapi",
            ],
            &["\"0b4e8f3a-5c1d-4e2f-9a7b\" is neither an image UUID"],
        ),
        gz(
            &["install", u, "--no-sapi", "--no-cnapi"],
            &["no IMGAPI URL is known", "--imgapi-url"],
        ),
        gz(
            &[&["install", u][..], &dead[..]].concat(),
            &["cannot get image", "cannot connect to http://127.0.0.1:1"],
        ),
        gz(
            &["install", u, "--imgapi-url", DEAD_URL],
            &["no SAPI URL", "--no-sapi"],
        ),
        gz(
            &[
                "install",
                stranger.to_str().unwrap(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &["not-an-agent"],
        ),
        gz(
            &["install", "--no-sapi", "--no-cnapi"],
            &["required arguments were not provided: <IMAGE_UUID|FILE>"],
        ),
        gz(
            &[
                "install",
                u,
                "--no-sapi",
                "--no-cnapi",
                "--hook-timeout",
                "forever",
            ],
            &["invalid value 'forever' for '--hook-timeout"],
        ),
        gz(
            &["remove", "nosuch", "--no-sapi", "--no-cnapi"],
            &["unknown component \"nosuch\""],
        ),
        gz(
            &["rollback", "vm-agent", "--no-sapi", "--no-cnapi"],
            &["vm-agent has no previous version kept"],
        ),
        gz(
            &["rollback", "nosuch", "--no-sapi", "--no-cnapi"],
            &["unknown component \"nosuch\""],
        ),
        // gz disable / enable (issue 25): nothing recorded, no SMF change.
        gz(
            &["disable", "nosuch", "--no-sapi", "--no-cnapi"],
            &["unknown component \"nosuch\""],
        ),
        gz(
            &["enable", "nosuch", "--no-sapi", "--no-cnapi"],
            &["unknown component \"nosuch\""],
        ),
        gz(
            &["disable", "net-agent", "--no-sapi", "--no-cnapi"],
            &["net-agent is not installed"],
        ),
        gz(
            &["report", "--server-uuid", "not-a-uuid"],
            &["malformed server UUID \"not-a-uuid\""],
        ),
        Case {
            stdout_ok: true,
            ..gz(
                &["report", "--post", "--cnapi-url", DEAD_URL],
                &[
                    "cannot post server.agents",
                    "cannot connect to http://127.0.0.1:1",
                ],
            )
        },
        offline(
            &["gz", "report", "--root", "/nonexistent/agentsadm-root"],
            &["cannot identify the server at /nonexistent/agentsadm-root"],
        ),
    ];
    let failures = run_all(cases, Vec::new()).await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    crate::gz_common::assert_same(&before, &snapshot(srv.root()), "gz bad input");
    srv.assert_no_leftovers();
}

/// A `sim serve` whose configuration is refused must not leave its
/// temporary state directory behind (each refused start leaks one into
/// /dev/shm today).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_sim_serve_leaves_no_state_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let env = vec![(
        "AGENTSADM_SIM_TMPDIR".to_string(),
        tmp.path().to_str().unwrap().to_string(),
    )];
    let run = agentsadm(
        &["sim", "serve", "--servers", "1", "--not-setup", "nosuch"],
        &env,
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
