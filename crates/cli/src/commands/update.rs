//! `agentsadm update (COMPONENT...|--all) ...`: move components on servers
//! to a target image, through the one run of a change.

use crate::CmdResult;
pub use crate::change::UpdateArgs;
use crate::change::run_change;
use crate::settings::Settings;

pub async fn run(g: &Settings, a: UpdateArgs) -> CmdResult {
    let named = a.components.clone();
    let change = match a.change(&g.load_catalog()?, g) {
        Ok(c) => c,
        Err(e) => return Err(server_hint(g, e, &named).await),
    };
    run_change(g, change, false).await
}

/// `update vm-agent cn0001`: sdcadm users name servers after the
/// component. When the unknown "component" is a server CNAPI knows, say
/// to select it with `-s` (one CNAPI lookup, on this error path only).
async fn server_hint(g: &Settings, e: anyhow::Error, named: &[String]) -> anyhow::Error {
    let Some(agentsadm_types::catalog::CatalogError::Unknown { name, .. }) = e.downcast_ref()
    else {
        return e;
    };
    let Ok(apis) = g.apis() else { return e };
    let filter = agentsadm_api::cnapi::ServerListFilter {
        hostname: name.parse::<uuid::Uuid>().is_err().then(|| name.clone()),
        uuids: name.parse().into_iter().collect(),
        ..Default::default()
    };
    match apis.cnapi.list_servers(&filter).await {
        Ok(found) if !found.is_empty() => {
            let components: Vec<&str> = named
                .iter()
                .map(|c| c.as_str())
                .filter(|c| {
                    let component = c.split('@').next().unwrap_or(c);
                    component != name
                        && g.load_catalog()
                            .is_ok_and(|cat| cat.get(component).is_some())
                })
                .collect();
            anyhow::anyhow!(
                "unknown component {name:?}: {name} is a server; select servers with -s: agentsadm update {} -s {name}",
                if components.is_empty() {
                    "COMPONENT".to_string()
                } else {
                    components.join(" ")
                }
            )
        }
        _ => e,
    }
}
