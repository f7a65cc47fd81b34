//! config-agent in CNAPI's zone, as far as CommandExecute goes: it renders
//! CNAPI's config from SAPI (`FEATURE_USE_CNAGENT_COMMAND_EXECUTE` →
//! `useCnAgentCommandExecute`, sdc-cnapi `sapi_manifests/cnapi`) and, when
//! the file changed, restarts CNAPI, which reads its config only when it
//! starts. Until then SAPI says one mode while the running CNAPI uses the
//! other: the window in which an execute with `timeout`, sent because SAPI
//! said cn-agent, kills a CNAPI still in Ur mode (docs/triton/apis.md
//! §3.12). It runs when asked ([`crate::SimDc::config_agent_sync`]) or
//! every [`crate::SimConfig::config_agent_poll_ms`].

use std::sync::Arc;
use std::time::Duration;

use agentsadm_api::sapi::Instance;
use agentsadm_orchestrate::execmode::rendered_for_cnapi;

use super::sleep_or_shutdown;
use crate::ExecuteTransport;
use crate::core::DcCore;

/// What config-agent would render from SAPI now.
pub(crate) fn rendered(core: &DcCore) -> ExecuteTransport {
    let store = core.sapi.lock();
    let app = store.applications.iter().find(|a| a.name == "sdc");
    let service = store
        .services
        .iter()
        .find(|s| s.name == "cnapi" && app.is_none_or(|a| s.application_uuid == a.uuid));
    let instances: Vec<Instance> = service
        .map(|s| {
            store
                .instances
                .values()
                .filter(|i| i.service_uuid == s.uuid)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if rendered_for_cnapi(app.map(|a| &a.metadata), service, &instances) {
        ExecuteTransport::CnAgent
    } else {
        ExecuteTransport::Ur
    }
}

/// One pass of config-agent: when SAPI renders another mode than CNAPI
/// runs, the config is rewritten and CNAPI restarts into it (requests in
/// flight are cut, as on any restart). Returns the new mode if it did.
pub(crate) fn sync(core: &DcCore) -> Option<ExecuteTransport> {
    let wanted = rendered(core);
    {
        let mut mode = core.cnapi.mode.lock().unwrap_or_else(|e| e.into_inner());
        if *mode == wanted {
            return None;
        }
        *mode = wanted;
    }
    core.cnapi.crash(
        None,
        &format!("config-agent rewrote its config for execute through {wanted:?} and restarted it"),
        Duration::from_millis(core.config.cnapi_restart_ms),
    );
    Some(wanted)
}

/// config-agent's polling, every `every`, until the datacenter shuts down.
pub(crate) async fn poll(core: Arc<DcCore>, every: Duration) {
    while sleep_or_shutdown(&core, every).await {
        sync(&core);
    }
}
