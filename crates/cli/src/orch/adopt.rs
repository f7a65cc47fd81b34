//! `agentsadm adopt`: create the SAPI agent services and instances for
//! what servers report (`--local`: what this global zone has installed,
//! for headnode setup).

use clap::Args;
use serde_json::json;

use super::ServersArg;

use super::exit;
use crate::CmdResult;
use crate::EXIT_PARTIAL;
use crate::GlobalOpts;
use crate::execution::with_dc_lock;
use agentsadm_orchestrate::adopt;
use agentsadm_orchestrate::gather;
use agentsadm_plan::resolve_servers;

#[derive(Args, Debug)]
pub struct AdoptArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// Only show what would be adopted.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Take the datacenter lock even if another agentsadm holds it.
    #[arg(long)]
    pub break_lock: bool,
    /// Adopt what this server's own global zone has installed instead of
    /// what CNAPI reports (headnode setup, before CNAPI exists).
    #[arg(long, conflicts_with = "servers")]
    pub local: bool,
    /// The global zone root for --local.
    #[arg(long, value_name = "DIR", default_value = "/", requires = "local")]
    pub root: std::path::PathBuf,
}

pub async fn run_adopt(g: &GlobalOpts, a: AdoptArgs) -> CmdResult {
    if a.local {
        return crate::flows::run_adopt_local(g, a).await;
    }
    let out = g.output();
    let catalog = g.load_catalog()?;
    let apis = g.apis()?;
    let (intent, reality) = gather::gather(&apis, &catalog).await?;
    let servers = if a.servers.servers.is_empty() {
        None
    } else {
        Some(resolve_servers(&reality, &a.servers.servers)?)
    };
    let plan = adopt::plan_adoption(&catalog, &intent, &reality, servers.as_deref());
    if !out.json {
        out.line(plan.render().trim_end());
    }
    if a.dry_run || plan.is_empty() {
        if out.json {
            out.json(&json!({"plan": plan, "executed": false}));
        }
        return Ok(exit(0));
    }
    let work = adopt::adopt(&apis.sapi, &plan, &intent);
    let report = with_dc_lock(&apis.sapi, "adopt", a.break_lock, &out, work).await??;
    let status = if report.failures.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    };
    if out.json {
        out.json(&json!({"plan": plan, "executed": true, "result": report, "exit_status": status}));
    } else {
        for (server, component, e) in &report.failures {
            eprintln!("error: cannot adopt {component} on {server}: {e}");
        }
        out.line(format!(
            "Adopted {} instances; created {} services; set {} default images.",
            report.instances_adopted, report.services_created, report.defaults_set
        ));
    }
    Ok(exit(status))
}
