//! `agentsadm bench`: each benchmark prints exactly its one JSON object, and
//! `bench all` prints one table of all of them (or, with `--json`, one
//! object), at sizes small enough for the test suite.

use crate::rel::Run;

use crate::rel::agentsadm;
use serde_json::Value;

/// The whole of stdout as one JSON object (trailing text fails).
fn one_object(args: &[&str], run: &Run) -> serde_json::Map<String, Value> {
    assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
    match serde_json::from_str::<Value>(&run.stdout) {
        Ok(Value::Object(m)) => m,
        other => panic!(
            "{args:?}: stdout is not one JSON object ({other:?}):\n{}",
            run.stdout
        ),
    }
}

/// The object's keys, sorted.
fn keys(m: &serde_json::Map<String, Value>) -> Vec<&str> {
    let mut k: Vec<&str> = m.keys().map(String::as_str).collect();
    k.sort();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_benchmark_prints_exactly_its_json_object() {
    let args = ["bench", "plan", "--servers", "30", "--runs", "1"];
    let plan = one_object(&args, &agentsadm(&args, &[]).await);
    assert_eq!(
        keys(&plan),
        ["components", "peak_rss_mb", "plan_ms", "servers"]
    );
    assert_eq!(plan["servers"], 30);

    let args = [
        "bench",
        "rollout",
        "--backend",
        "fake",
        "--servers",
        "30",
        "--shar-servers",
        "5",
        "--latency-ms",
        "2",
    ];
    let rollout = one_object(&args, &agentsadm(&args, &[]).await);
    assert_eq!(rollout["modes"].as_array().map(Vec::len), Some(3));
    assert!(rollout["wall_over_ideal_20"].as_f64().unwrap() > 0.0);
    assert!(rollout["realistic_wall_over_ideal_20"].as_f64().unwrap() > 0.0);
    assert_eq!(rollout["realistic_canary_waves"], 1);

    // A small realistic shape (the default is cn-agent's 9,331 files and a
    // 40 MB node, about 40 s under load): the JSON's shape is what is
    // tested here, not the figures.
    let dir = tempfile::tempdir().unwrap();
    let shape = dir.path().join("shape.tsv");
    std::fs::write(
        &shape,
        "d\t4096\t755\tcn-agent\nf\t600\t644\tcn-agent/Makefile\nd\t4096\t755\tcn-agent/lib\nf\t900\t644\tcn-agent/lib/agent.js\n",
    )
    .unwrap();
    let shape = shape.to_str().unwrap();
    let args = [
        "bench",
        "install",
        "--image-mb",
        "1",
        "--runs",
        "1",
        "--shape",
        shape,
        "--node-mb",
        "1",
    ];
    let install = one_object(&args, &agentsadm(&args, &[]).await);
    assert_eq!(install["image_mb"], 1);
    assert!(install["speedup_vs_cn_agent"].as_f64().unwrap() > 0.0);
}

/// Every benchmark at its smallest.
const SMALL: [&str; 16] = [
    "--image-mb",
    "1",
    "--install-runs",
    "1",
    "--rollout-servers",
    "20",
    "--shar-servers",
    "4",
    "--latency-ms",
    "5",
    "--plan-servers",
    "30",
    "--plan-runs",
    "1",
    "--backend",
    "sim",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_all_prints_one_table() {
    let mut args = vec!["bench", "all"];
    args.extend(SMALL);
    let run = agentsadm(&args, &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("BENCHMARK"), "{out}");
    for needle in [
        "install    agentsadm gz install, 1 MB image",
        "install    speedup vs cn-agent path",
        "rollout    one-component 20 servers x 1 components, 20-wide",
        "rollout    one-component 20 servers x 1 components, 5-wide",
        "rollout    shar-style 4 servers",
        "rollout    speedup 20-wide vs 5-wide",
        "plan       plan 30 servers x 14 components",
        "plan       peak RSS",
        "cores",
        "load",
    ] {
        assert!(out.contains(needle), "no {needle:?} in:\n{out}");
    }
    assert!(!out.contains("failed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_all_json_is_one_object_of_the_chosen_benchmarks() {
    let mut args = vec!["--json", "bench", "all", "--only", "plan,rollout"];
    args.extend(SMALL);
    args.pop();
    args.push("fake");
    let all = one_object(&args, &agentsadm(&args, &[]).await);
    assert_eq!(
        keys(&all),
        ["elapsed_s", "machine", "plan", "rollout"],
        "{all:?}"
    );
    assert_eq!(all["plan"]["servers"], 30);
    assert_eq!(all["rollout"]["modes"][0]["servers"], 20);
    assert!(all["machine"]["cores"].as_u64().unwrap() >= 1);
}
