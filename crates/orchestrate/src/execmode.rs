//! Which path CNAPI execute takes to each server ([`ExecuteMode`]), read
//! the way CNAPI itself decides: its `FEATURE_USE_CNAGENT_COMMAND_EXECUTE`
//! (rendered into CNAPI's config from SAPI metadata by config-agent,
//! sdc-cnapi `sapi_manifests/cnapi/template`) and the server's cn-agent in
//! `server.agents`.
//!
//! The flag is read once per run: the `sdc` application's metadata, under
//! the `cnapi` service's, under each `cnapi` instance's (SAPI's own order
//! for a config). It counts as on only when every CNAPI instance renders
//! it on, with mustache's truthiness (`{{#FLAG}}`: anything but false,
//! null, 0, "" and []). Anything unreadable counts as off: Ur mode is the
//! one whose mistakes cost nothing but `timeout`, while sending `timeout`
//! to a server in Ur mode kills CNAPI 1.26.6.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::OnceCell;

use agentsadm_api::ApiError;
use agentsadm_api::SapiClient;
use agentsadm_api::cnapi::ExecuteMode;
use agentsadm_api::cnapi::Server;
use agentsadm_api::sapi::Object;
use agentsadm_types::error::error_chain;

/// CNAPI's SAPI metadata key for running commands through cn-agent.
pub const CN_AGENT_EXECUTE_FLAG: &str = "FEATURE_USE_CNAGENT_COMMAND_EXECUTE";

/// Whether a metadata value turns a mustache section on.
pub fn mustache_truthy(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

/// The flag's value in a stack of metadata objects, the last one winning.
fn rendered(layers: &[Option<&Object>]) -> bool {
    let mut value = None;
    for layer in layers.iter().flatten() {
        if let Some(v) = layer.get(CN_AGENT_EXECUTE_FLAG) {
            value = Some(v);
        }
    }
    value.is_some_and(mustache_truthy)
}

/// Read CNAPI's flag from SAPI (module docs).
pub async fn read_cn_agent_flag(sapi: &SapiClient) -> Result<bool, ApiError> {
    let app = sapi.sdc_application().await?;
    let app_meta = app.as_ref().map(|a| &a.metadata);
    let services = sapi
        .list_services(Some("cnapi"), app.as_ref().map(|a| a.uuid), None)
        .await?;
    let Some(service) = services.into_iter().find(|s| s.name == "cnapi") else {
        return Ok(rendered(&[app_meta]));
    };
    let instances = sapi.list_service_instances(service.uuid).await?;
    if instances.is_empty() {
        return Ok(rendered(&[app_meta, service.metadata.as_ref()]));
    }
    Ok(instances
        .iter()
        .all(|i| rendered(&[app_meta, service.metadata.as_ref(), i.metadata.as_ref()])))
}

/// The flag, read at most once per run and shared by a transport's clones.
#[derive(Clone, Debug, Default)]
pub struct ExecuteModes {
    sapi: Option<SapiClient>,
    flag: Arc<OnceCell<bool>>,
}

impl ExecuteModes {
    /// Read the flag from `sapi` when first needed.
    pub fn from_sapi(sapi: SapiClient) -> ExecuteModes {
        ExecuteModes {
            sapi: Some(sapi),
            flag: Arc::default(),
        }
    }

    /// A fixed flag (tests, and callers that know it).
    pub fn fixed(cn_agent_flag: bool) -> ExecuteModes {
        ExecuteModes {
            sapi: None,
            flag: Arc::new(OnceCell::new_with(Some(cn_agent_flag))),
        }
    }

    /// CNAPI's flag: off without a SAPI to ask, or when SAPI cannot say.
    pub async fn flag(&self) -> bool {
        *self
            .flag
            .get_or_init(|| async {
                let Some(sapi) = &self.sapi else {
                    return false;
                };
                match read_cn_agent_flag(sapi).await {
                    Ok(on) => on,
                    Err(e) => {
                        tracing::warn!(
                            error = %error_chain(&e),
                            "cannot read CNAPI's {CN_AGENT_EXECUTE_FLAG} from SAPI; CNAPI execute is treated as going through Ur (no timeout sent)"
                        );
                        false
                    }
                }
            })
            .await
    }

    /// The mode CNAPI uses for `server` (read with its `agents`).
    pub async fn for_server(&self, server: &Server) -> ExecuteMode {
        ExecuteMode::for_server(self.flag().await, server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mustache_sections() {
        for v in [
            json!(true),
            json!("true"),
            json!("false"),
            json!(1),
            json!({}),
        ] {
            assert!(mustache_truthy(&v), "{v}");
        }
        for v in [json!(false), json!(null), json!(""), json!(0), json!([])] {
            assert!(!mustache_truthy(&v), "{v}");
        }
    }

    #[test]
    fn later_layers_win() {
        let on: Object = serde_json::from_value(json!({CN_AGENT_EXECUTE_FLAG: true})).unwrap();
        let off: Object = serde_json::from_value(json!({CN_AGENT_EXECUTE_FLAG: false})).unwrap();
        let other: Object = serde_json::from_value(json!({"x": 1})).unwrap();
        assert!(rendered(&[Some(&off), Some(&on), Some(&other)]));
        assert!(!rendered(&[Some(&on), None, Some(&off)]));
        assert!(!rendered(&[None, Some(&other)]));
    }
}
