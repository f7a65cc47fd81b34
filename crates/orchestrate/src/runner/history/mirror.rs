//! The history in SAPI, so that any headnode session (another operator,
//! a rebuilt headnode, `agentsadm revert` from elsewhere) sees every run.
//!
//! Where: the metadata of a SAPI application of its own, `agentsadm`
//! (owned by the `sdc` application's owner, with no services and no
//! instances), one key per run (`run-<uuid>`) holding the entry. Why
//! there:
//!
//! - sdcadm mirrored its history to SAPI's `/history` endpoint, which SAPI
//!   removed in 2018 (TRITON-400, with `sdcadm history` itself,
//!   TRITON-391): today's SAPI (2.x) answers 404 there.
//! - Not the `sdc` application's metadata (where the datacenter lock
//!   lives): SAPI merges it into the configuration of every core zone,
//!   which config-agent polls; a history there would grow every zone's
//!   configuration and change its etag at each write.
//! - Applications are listed by nothing else; metadata keys are merged by
//!   UpdateApplication (`action: update`), so writing one run never
//!   rewrites (or races with) another, and old runs go with
//!   `action: delete` of their keys.
//! - Bounded: SAPI keeps the newest [`MIRROR_KEEP`] runs within
//!   [`MIRROR_MAX_BYTES`] (the application is one Moray object), the
//!   headnode's files keep more.
//!
//! Everything here is best effort: a SAPI that is down or refuses leaves
//! the headnode's copy, which catches SAPI up on a later run.

use serde_json::Value;

use super::entry::HistoryEntry;
use agentsadm_api::ApiError;
use agentsadm_api::sapi::{Application, SapiClient, Update, UpdateAction, object};
use agentsadm_types::ids::ApplicationUuid;

/// The SAPI application holding the history: agentsadm's own, where its
/// services are too.
pub const APPLICATION: &str = agentsadm_api::sapi::OWN_APPLICATION;
/// The prefix of a run's metadata key.
pub const KEY_PREFIX: &str = "run-";
/// Runs kept in SAPI.
pub const MIRROR_KEEP: usize = 100;
/// Bytes of entries kept in SAPI, in all.
pub const MIRROR_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Why SAPI could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("cannot {what} the run history in SAPI (application {APPLICATION:?})")]
    Api {
        what: &'static str,
        #[source]
        err: ApiError,
    },
    #[error(
        "no SAPI application named \"sdc\": cannot keep the run history in SAPI (is this a Triton datacenter?)"
    )]
    NoSdcApplication,
}

fn api(what: &'static str) -> impl FnOnce(ApiError) -> MirrorError {
    move |err| MirrorError::Api { what, err }
}

/// The history's SAPI application.
#[derive(Clone, Debug)]
pub struct SapiHistory {
    pub sapi: SapiClient,
}

impl SapiHistory {
    pub fn new(sapi: SapiClient) -> SapiHistory {
        SapiHistory { sapi }
    }

    /// The application, if it exists: the one agentsadm's services use
    /// ([`SapiClient::own_application`]: of two, the smallest UUID), so
    /// that the history and the services never split between two
    /// applications (SAPI lists them in no promised order).
    async fn find(&self) -> Result<Option<Application>, MirrorError> {
        self.sapi.own_application().await.map_err(api("read"))
    }

    /// The application, created (owned as `sdc` is) when missing. Called
    /// under the datacenter lock, so no two runs create it at once.
    async fn ensure(&self) -> Result<ApplicationUuid, MirrorError> {
        if let Some(app) = self.find().await? {
            return Ok(app.uuid);
        }
        let sdc = self
            .sapi
            .sdc_application()
            .await
            .map_err(api("read"))?
            .ok_or(MirrorError::NoSdcApplication)?;
        let app = self
            .sapi
            .create_application(APPLICATION, &sdc.owner_uuid, Default::default())
            .await
            .map_err(api("create"))?;
        Ok(app.uuid)
    }

    /// Write one run's entry (replacing what SAPI had for it).
    pub async fn put(&self, entry: &HistoryEntry) -> Result<(), MirrorError> {
        let Some(id) = entry.id else { return Ok(()) };
        let app = self.ensure().await?;
        let value = serde_json::to_value(entry).unwrap_or(Value::Null);
        self.sapi
            .update_application(
                app,
                &Update::metadata(object([(format!("{KEY_PREFIX}{id}"), value)])),
            )
            .await
            .map_err(api("write"))?;
        Ok(())
    }

    /// Every entry SAPI has (those that do not parse are left out),
    /// oldest first. No application: none.
    pub async fn list(&self) -> Result<Vec<HistoryEntry>, MirrorError> {
        let Some(app) = self.find().await? else {
            return Ok(Vec::new());
        };
        let mut out: Vec<HistoryEntry> = app
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with(KEY_PREFIX))
            .filter_map(|(_, v)| serde_json::from_value(v.clone()).ok())
            .filter(|e: &HistoryEntry| e.id.is_some())
            .collect();
        out.sort_by(|a, b| a.started.cmp(&b.started));
        Ok(out)
    }

    /// Delete the oldest runs beyond the bounds; returns how many.
    pub async fn prune(&self) -> Result<usize, MirrorError> {
        let Some(app) = self.find().await? else {
            return Ok(0);
        };
        let mut runs: Vec<(String, String, usize)> = app
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with(KEY_PREFIX))
            .map(|(k, v)| {
                let started = v.get("started").and_then(Value::as_str).unwrap_or("");
                (started.to_string(), k.clone(), v.to_string().len())
            })
            .collect();
        runs.sort_by(|a, b| b.0.cmp(&a.0));
        let mut total = 0;
        let mut gone = Vec::new();
        for (i, (_, key, len)) in runs.into_iter().enumerate() {
            total += len;
            if i > 0 && (i >= MIRROR_KEEP || total > MIRROR_MAX_BYTES) {
                gone.push((key, Value::Null));
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        let n = gone.len();
        let update = Update {
            action: Some(UpdateAction::Delete),
            params: None,
            metadata: Some(object(gone)),
        };
        self.sapi
            .update_application(app.uuid, &update)
            .await
            .map_err(api("prune"))?;
        Ok(n)
    }
}
