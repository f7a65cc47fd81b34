//! `agentsadm bench plan`: the planner's time and memory for a large fleet.
//!
//! Builds, in process, the wire-shaped answers of a datacenter with
//! `--servers` servers each running `--components` components (CNAPI
//! `server.agents`, SAPI services and instances with params), then times
//! what a run does with them: index reality, index intent, and plan an
//! update of every component to a new image. Prints the median of
//! `--runs` runs and the process's peak RSS (`VmHWM`, which includes the
//! synthetic input).

use agentsadm_types::component::ComponentName;
use std::time::Instant;

use serde_json::json;

use agentsadm_plan::ComponentSelection;
use agentsadm_plan::Operation;
use agentsadm_plan::PlanningInput;
use agentsadm_plan::Request;
use agentsadm_plan::ServerSelection;
use agentsadm_plan::TransportMode;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::plan;
use agentsadm_plan::reality::Reality;
use agentsadm_sim::testkit::BASE_VERSION;
use agentsadm_sim::testkit::ExampleDc;

/// Options of `agentsadm bench plan`.
#[derive(clap::Args, Clone, Debug)]
pub struct PlanBenchArgs {
    /// Servers in the synthetic datacenter.
    #[arg(long, default_value_t = 2000)]
    pub servers: usize,
    /// Components on every server (at most the catalog's size).
    #[arg(long, default_value_t = 14)]
    pub components: usize,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

impl PlanBenchArgs {
    /// These settings as `bench plan` options (for `bench all`).
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "--servers".into(),
            self.servers.to_string(),
            "--components".into(),
            self.components.to_string(),
            "--runs".into(),
            self.runs.to_string(),
        ]
    }
}

impl Default for PlanBenchArgs {
    fn default() -> Self {
        PlanBenchArgs {
            servers: 2000,
            components: 14,
            runs: 5,
        }
    }
}

/// Peak resident set size of this process in MB (Linux and illumos
/// `/proc/self/status` `VmHWM`), if readable.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(args: &PlanBenchArgs) -> anyhow::Result<serde_json::Value> {
    let servers = args.servers.max(1);
    let mut dc = ExampleDc::empty();
    // The components: every bulk-updatable one (core first), as many as asked.
    let mut names: Vec<ComponentName> = dc
        .catalog
        .iter()
        .filter(|c| c.bulk_update)
        .map(|c| c.name.clone())
        .collect();
    names.truncate(args.components.max(1));
    for n in &names {
        dc.publish(n, BASE_VERSION);
        dc.manage(n);
    }
    for i in 0..servers {
        let hostname = if i == 0 {
            "headnode".to_string()
        } else {
            format!("cn{i:04}")
        };
        let uuid = dc.add_server(&hostname, i == 0);
        for n in &names {
            dc.install(uuid, n, BASE_VERSION);
        }
    }
    let targets: Vec<_> = names.iter().map(|n| dc.publish(n, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    // The wire-shaped answers a run starts from.
    let server_list = dc.server_list();
    let instance_list = dc.instance_list();
    let request = Request {
        operation: Operation::Update,
        components: ComponentSelection::Named(names.clone()),
        servers: ServerSelection::All,
        exclude: Vec::new(),
    };

    let mut times = Vec::new();
    let mut steps = 0;
    for _ in 0..args.runs.max(1) {
        let t = Instant::now();
        let reality = Reality::from_servers(&dc.catalog, &server_list);
        let intent = Intent::build(&dc.catalog, &dc.services, &instance_list, &reality);
        let p = plan(&PlanningInput {
            catalog: &dc.catalog,
            intent: &intent,
            reality: &reality,
            request: &request,
            options: TransportMode::Auto.into(),
            images: &images,
            durations: None,
        })?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        steps = p.step_count();
        drop(p);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    // One step per server and component; a headnode-only one on the
    // headnode alone.
    let expected: usize = names
        .iter()
        .map(|n| match dc.catalog.get(n).map(|c| c.placement) {
            Some(agentsadm_types::catalog::Placement::HeadnodeOnly) => 1,
            _ => servers,
        })
        .sum();
    anyhow::ensure!(
        steps == expected,
        "benchmark plan has {steps} steps, expected {expected}"
    );
    Ok(json!({
        "servers": servers,
        "components": names.len(),
        "plan_ms": (median * 100.0).round() / 100.0,
        "peak_rss_mb": peak_rss_mb().map(|m| (m * 10.0).round() / 10.0),
    }))
}
