//! The server's installed components as CNAPI's `server.agents` list
//! (docs/triton/agent-install.md §3.6), with gz-tools, dockerlogger and
//! sdcadm included.
//!
//! apm agents are read the way cn-agent's `refreshAgents` reads them: every
//! directory in `node_modules`, its `image_uuid`, its `package.json` version,
//! and the instance UUID in `etc/<dir>`; the entry is named after the
//! directory. Unlike cn-agent, one unreadable agent does not fail the report:
//! it goes to `errors` and the rest is reported. The directories there
//! that register the other kinds ([`super::registration`]) are not read as
//! agents: those components are reported from what is installed.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::fs;

use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::ReportError;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

use super::fsutil;
use super::kinds;
use super::package::PackageJson;
use super::paths::GzPaths;

/// Build the report for a smartdc-layout root.
pub fn report(paths: &GzPaths, catalog: &Catalog, server: ServerUuid) -> AgentsReport {
    let mut agents = Vec::new();
    let mut errors = Vec::new();
    apm_agents(paths, catalog, &mut agents, &mut errors);
    for c in catalog.iter().filter(|c| c.kind != ComponentKind::ApmAgent) {
        match kinds::current(paths, c) {
            Ok(Some(fp)) => {
                let (uuid, err) = instance_of(paths, &kinds::instance_rel(c));
                if let Some(e) = err {
                    errors.push(ReportError {
                        name: c.name.to_string(),
                        message: e,
                    });
                }
                match ComponentVersion::new(fp.version) {
                    Ok(version) => agents.push(AgentEntry {
                        name: c.name.clone(),
                        version,
                        image_uuid: fp.image_uuid,
                        uuid,
                    }),
                    Err(e) => errors.push(ReportError {
                        name: c.name.to_string(),
                        message: e.to_string(),
                    }),
                }
            }
            Ok(None) => {}
            Err(e) => errors.push(ReportError {
                name: c.name.to_string(),
                message: agentsadm_types::error::error_chain(&e),
            }),
        }
    }
    agents.sort();
    AgentsReport {
        server_uuid: server,
        agents,
        errors,
        services_off: Vec::new(),
    }
}

/// The instance UUID in a file: `(uuid, problem)`.
fn instance_of(paths: &GzPaths, rel: &str) -> (Option<InstanceUuid>, Option<String>) {
    let path = paths.at(rel);
    match fsutil::read_trimmed(&path) {
        Ok(None) => (None, None),
        Ok(Some(s)) if s.is_empty() => (None, None),
        Ok(Some(s)) => match s.parse() {
            Ok(u) => (Some(u), None),
            Err(_) => (
                None,
                Some(format!(
                    "instance UUID file {} holds {s:?}, not a UUID",
                    path.display()
                )),
            ),
        },
        Err(e) => (None, Some(format!("cannot read {}: {e}", path.display()))),
    }
}

fn apm_agents(
    paths: &GzPaths,
    catalog: &Catalog,
    agents: &mut Vec<AgentEntry>,
    errors: &mut Vec<ReportError>,
) {
    let dir = paths.node_modules();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            errors.push(ReportError {
                name: "node_modules".into(),
                message: format!("cannot list {}: {e}", dir.display()),
            });
            return;
        }
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && !super::registration::is_registration(catalog, n))
        .collect();
    names.sort();
    for name in names {
        let pkg_dir = dir.join(&name);
        let fail = |message: String| ReportError {
            name: name.clone(),
            message,
        };
        // A directory no component could have made (`A B`, `..x`) is
        // reported as unreadable, never as an agent.
        let name = match ComponentName::new(name.as_str()) {
            Ok(n) => n,
            Err(e) => {
                errors.push(fail(e.to_string()));
                continue;
            }
        };
        match fs::symlink_metadata(&pkg_dir) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                errors.push(fail(format!(
                    "{} is not a directory (sysinfo and cn-agent expect real directories)",
                    pkg_dir.display()
                )));
                continue;
            }
            Err(e) => {
                errors.push(fail(format!("cannot read {}: {e}", pkg_dir.display())));
                continue;
            }
        }
        let image: Option<ImageUuid> = match fsutil::read_trimmed(&pkg_dir.join("image_uuid")) {
            Ok(Some(s)) => match s.parse() {
                Ok(u) => Some(u),
                Err(_) => {
                    errors.push(fail(format!("image_uuid holds {s:?}, not a UUID")));
                    continue;
                }
            },
            Ok(None) => {
                errors.push(fail(
                    "no image_uuid file: not installed from an image".into(),
                ));
                continue;
            }
            Err(e) => {
                errors.push(fail(format!("cannot read image_uuid: {e}")));
                continue;
            }
        };
        let version = match PackageJson::read(&pkg_dir) {
            Ok(Some(p)) => match ComponentVersion::new(p.version) {
                Ok(v) => v,
                Err(e) => {
                    errors.push(fail(e.to_string()));
                    continue;
                }
            },
            Ok(None) => {
                errors.push(fail("no package.json".into()));
                continue;
            }
            Err(e) => {
                errors.push(fail(agentsadm_types::error::error_chain(&e)));
                continue;
            }
        };
        let (uuid, err) = instance_of(paths, &format!("opt/smartdc/agents/etc/{name}"));
        if let Some(e) = err {
            errors.push(fail(e));
        }
        agents.push(AgentEntry {
            name,
            version,
            image_uuid: image,
            uuid,
        });
    }
}
