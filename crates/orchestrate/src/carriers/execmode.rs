//! Which path CNAPI execute takes to each server ([`ExecuteMode`]), and so
//! whether a request may carry `timeout`: sent to a server CNAPI serves
//! through Ur, `timeout` kills CNAPI 1.26.6 (docs/triton/apis.md §3.12).
//!
//! CNAPI decides per request from its own config's
//! `useCnAgentCommandExecute` and the server's cn-agent in `server.agents`.
//! That config is rendered from SAPI's `FEATURE_USE_CNAGENT_COMMAND_EXECUTE`
//! (sdc-cnapi `sapi_manifests/cnapi/template`) by config-agent, some time
//! after SAPI changed, and read by CNAPI only when it restarts: in that
//! window SAPI says one thing while the running CNAPI does the other. So
//! SAPI alone never decides. A server counts as executing through
//! cn-agent ([`ExecuteModes::decide`]) only when all of these hold:
//!
//! - its cn-agent is new enough ([`EXECUTE_TIMEOUT_MIN_CN_AGENT`]), read
//!   as CNAPI reads it (node-semver: a build `2.8.0-master-...` is a
//!   pre-release, below 2.8.0; `Server::cn_agent_version`);
//! - SAPI says the flag is on, read at most [`FLAG_TTL`] ago (SAPI's
//!   `sdc` application metadata, under the `cnapi` service's, under each
//!   `cnapi` instance's, with mustache's truthiness; on only when every
//!   CNAPI instance renders it on; anything unreadable counts as off, and
//!   so does the flag for other requests while one reads it);
//! - the running CNAPI was seen doing it: the last answer to an execute
//!   came through cn-agent ([`ExecuteAnswer::path`]: only cn-agent's answer
//!   has `signal`), and CNAPI has not failed a request since (a dropped
//!   connection or a 5xx may be a restart into the other mode).
//!
//! Until CNAPI has been seen, the answer is "not sure": the caller sends a
//! probe without `timeout` (safe in both modes) and looks at how it was
//! answered. Everything else is Ur: no `timeout`, the caller's own bound.
//! What is left is a flag turned off in SAPI and applied by config-agent
//! and a CNAPI restart all within [`FLAG_TTL`] of the last SAPI read, with
//! no failed request in between.
//!
//! [`EXECUTE_TIMEOUT_MIN_CN_AGENT`]: agentsadm_api::cnapi::EXECUTE_TIMEOUT_MIN_CN_AGENT
//! [`ExecuteAnswer::path`]: agentsadm_api::cnapi::ExecuteAnswer

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use agentsadm_api::ApiError;
use agentsadm_api::SapiClient;
use agentsadm_api::cnapi::CNAPI_CN_AGENT_EXECUTE_MIN;
use agentsadm_api::cnapi::EXECUTE_TIMEOUT_MIN_CN_AGENT;
use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::cnapi::ExecuteMode;
use agentsadm_api::cnapi::Server;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Object;
use agentsadm_api::sapi::Service;
use agentsadm_types::error::error_chain;

/// CNAPI's SAPI metadata key for running commands through cn-agent.
pub const CN_AGENT_EXECUTE_FLAG: &str = "FEATURE_USE_CNAGENT_COMMAND_EXECUTE";

/// How long a reading of SAPI's flag is used before SAPI is asked again.
pub const FLAG_TTL: Duration = Duration::from_secs(10);

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

/// What config-agent renders into CNAPI's config from these SAPI objects
/// (the `sdc` application's metadata, the `cnapi` service and its
/// instances): on only when every instance renders it on.
pub fn rendered_for_cnapi(
    app: Option<&Object>,
    service: Option<&Service>,
    instances: &[Instance],
) -> bool {
    let service_meta = service.and_then(|s| s.metadata.as_ref());
    if instances.is_empty() {
        return rendered(&[app, service_meta]);
    }
    instances
        .iter()
        .all(|i| rendered(&[app, service_meta, i.metadata.as_ref()]))
}

/// Read CNAPI's flag from SAPI (module docs).
pub async fn read_cn_agent_flag(sapi: &SapiClient) -> Result<bool, ApiError> {
    let app = sapi.sdc_application().await?;
    let app_meta = app.as_ref().map(|a| &a.metadata);
    let services = sapi
        .list_services(Some("cnapi"), app.as_ref().map(|a| a.uuid), None)
        .await?;
    let Some(service) = services.into_iter().find(|s| s.name == "cnapi") else {
        return Ok(rendered_for_cnapi(app_meta, None, &[]));
    };
    let instances = sapi.list_service_instances(service.uuid).await?;
    Ok(rendered_for_cnapi(app_meta, Some(&service), &instances))
}

/// What [`ExecuteModes::decide`] tells about one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The mode to send in (Ur: no `timeout`).
    pub mode: ExecuteMode,
    /// Whether the running CNAPI was seen doing so; when not, the caller
    /// probes first and decides again.
    pub sure: bool,
}

impl Decision {
    fn sure(mode: ExecuteMode) -> Decision {
        Decision { mode, sure: true }
    }
}

/// SAPI's flag, when it was read.
#[derive(Clone, Copy, Debug)]
struct FlagReading {
    on: bool,
    at: Instant,
}

/// The execute mode of each server (module docs), shared by a transport's
/// clones.
#[derive(Clone, Debug, Default)]
pub struct ExecuteModes {
    sapi: Option<SapiClient>,
    /// A flag given instead of SAPI (tests, callers that know it).
    fixed: Option<bool>,
    /// The last reading (held only to look at it or replace it).
    flag: Arc<Mutex<Option<FlagReading>>>,
    /// Held while one request reads the flag from SAPI.
    reading: Arc<tokio::sync::Mutex<()>>,
    /// The running CNAPI's flag as its answers showed it; `None` before
    /// the first answer and after CNAPI failed a request.
    seen: Arc<Mutex<Option<bool>>>,
}

impl ExecuteModes {
    /// Read the flag from `sapi` when needed ([`FLAG_TTL`]).
    pub fn from_sapi(sapi: SapiClient) -> ExecuteModes {
        ExecuteModes {
            sapi: Some(sapi),
            ..ExecuteModes::default()
        }
    }

    /// A fixed SAPI flag (tests, and callers that know it). The running
    /// CNAPI is still looked at before any `timeout` is sent.
    pub fn fixed(cn_agent_flag: bool) -> ExecuteModes {
        ExecuteModes {
            fixed: Some(cn_agent_flag),
            ..ExecuteModes::default()
        }
    }

    /// A reading of SAPI's flag taken less than [`FLAG_TTL`] ago.
    fn fresh(&self) -> Option<bool> {
        let last = *self.flag.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|r| r.at.elapsed() < FLAG_TTL).map(|r| r.on)
    }

    /// SAPI's flag: off without a SAPI to ask, or when SAPI cannot say,
    /// and while another request is reading it. That reading lists the
    /// `cnapi` instances, which the real SAPI answers by reading every
    /// instance it stores (0.31 s at 12,000, docs/triton/apis.md §2.10):
    /// waited for, it held up every execute of the servers in flight
    /// (in a rollout of fast steps, the whole first wave's health checks).
    /// Off is what anything unknown counts as: Ur, no `timeout`, safe
    /// whichever way CNAPI runs the command.
    pub async fn flag(&self) -> bool {
        if let Some(on) = self.fixed {
            return on;
        }
        let Some(sapi) = &self.sapi else {
            return false;
        };
        if let Some(on) = self.fresh() {
            return on;
        }
        let Ok(_reading) = self.reading.try_lock() else {
            return false;
        };
        // Another request may have finished its reading just before.
        if let Some(on) = self.fresh() {
            return on;
        }
        let on = match read_cn_agent_flag(sapi).await {
            Ok(on) => on,
            Err(e) => {
                tracing::warn!(
                    error = %error_chain(&e),
                    "cannot read CNAPI's {CN_AGENT_EXECUTE_FLAG} from SAPI; CNAPI execute is treated as going through Ur (no timeout sent)"
                );
                false
            }
        };
        *self.flag.lock().unwrap_or_else(|e| e.into_inner()) = Some(FlagReading {
            on,
            at: Instant::now(),
        });
        on
    }

    /// The running CNAPI's flag as last seen.
    fn seen(&self) -> Option<bool> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_seen(&self, on: Option<bool>) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = on;
    }

    /// The mode to use for `server` (read with its `agents`) now.
    pub async fn decide(&self, server: &Server) -> Decision {
        let new_enough = server
            .cn_agent_version()
            .is_some_and(|v| v >= EXECUTE_TIMEOUT_MIN_CN_AGENT);
        if !new_enough || !self.flag().await {
            return Decision::sure(ExecuteMode::Ur);
        }
        match self.seen() {
            Some(true) => Decision::sure(ExecuteMode::CnAgent),
            Some(false) => Decision::sure(ExecuteMode::Ur),
            None => Decision {
                mode: ExecuteMode::Ur,
                sure: false,
            },
        }
    }

    /// CNAPI answered an execute to `server` (read with its `agents`
    /// before the request): through cn-agent, its flag is on; through Ur
    /// from a server whose cn-agent CNAPI would have used, it is off.
    pub fn answered(&self, server: &Server, answer: &ExecuteAnswer) {
        let cnapi_would_use_cn_agent = server
            .cn_agent_version()
            .is_some_and(|v| v >= CNAPI_CN_AGENT_EXECUTE_MIN);
        match answer.path {
            ExecuteMode::CnAgent => self.set_seen(Some(true)),
            ExecuteMode::Ur if cnapi_would_use_cn_agent => self.set_seen(Some(false)),
            ExecuteMode::Ur => {}
        }
    }

    /// CNAPI failed a request (no answer, a dropped connection, a 5xx):
    /// it may have restarted, into either mode.
    pub fn failed(&self) {
        self.set_seen(None);
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

    fn server(cn_agent: &str) -> Server {
        serde_json::from_value(json!({
            "uuid": "44454c4c-4800-1034-804a-b2c04f354d31",
            "agents": [{"name": "cn-agent", "version": cn_agent}]
        }))
        .unwrap()
    }

    fn answer(path: ExecuteMode) -> ExecuteAnswer {
        ExecuteAnswer {
            path,
            ..ExecuteAnswer::default()
        }
    }

    #[tokio::test]
    async fn cn_agent_mode_only_once_the_running_cnapi_showed_it() {
        let (new, old) = (server("2.15.0"), server("2.7.0"));
        let modes = ExecuteModes::fixed(true);
        let unsure = Decision {
            mode: ExecuteMode::Ur,
            sure: false,
        };
        assert_eq!(modes.decide(&new).await, unsure);
        assert_eq!(modes.decide(&old).await, Decision::sure(ExecuteMode::Ur));
        // SAPI says on, the running CNAPI answers through Ur (the
        // config-agent window): no timeout.
        modes.answered(&new, &answer(ExecuteMode::Ur));
        assert_eq!(modes.decide(&new).await, Decision::sure(ExecuteMode::Ur));
        // It restarts into cn-agent mode and is seen so.
        modes.failed();
        assert_eq!(modes.decide(&new).await, unsure);
        modes.answered(&new, &answer(ExecuteMode::CnAgent));
        assert_eq!(
            modes.decide(&new).await,
            Decision::sure(ExecuteMode::CnAgent)
        );
        // A Ur answer from a cn-agent CNAPI would not use tells nothing.
        modes.answered(&server("2.5.0"), &answer(ExecuteMode::Ur));
        assert_eq!(
            modes.decide(&new).await,
            Decision::sure(ExecuteMode::CnAgent)
        );
        // SAPI off: Ur whatever was seen.
        let off = ExecuteModes::fixed(false);
        off.answered(&new, &answer(ExecuteMode::CnAgent));
        assert_eq!(off.decide(&new).await, Decision::sure(ExecuteMode::Ur));
    }

    #[tokio::test]
    async fn a_decision_does_not_wait_for_another_requests_reading_of_the_flag() {
        // A SAPI that takes connections and never answers: the first
        // reading waits on it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let sapi = SapiClient::new(&url, agentsadm_api::ApiConfig::default()).unwrap();
        let modes = ExecuteModes::from_sapi(sapi);
        let first = {
            let modes = modes.clone();
            tokio::spawn(async move { modes.flag().await })
        };
        while modes.reading.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        // The servers in flight meanwhile: Ur, at once, without a probe.
        let decided =
            tokio::time::timeout(Duration::from_secs(10), modes.decide(&server("2.15.0")))
                .await
                .expect("a decision waited for another request's reading of SAPI");
        assert_eq!(decided, Decision::sure(ExecuteMode::Ur));
        assert!(!first.is_finished());
        first.abort();
        silent.abort();
    }
}
