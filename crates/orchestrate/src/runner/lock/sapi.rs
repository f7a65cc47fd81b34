//! [`LockStore`] in the SAPI `sdc` application's metadata: UpdateApplication
//! with the default `update` action merges the keys it is given, and
//! `delete` removes them.

use futures::future::BoxFuture;
use serde_json::Value;

use super::LockBoard;
use super::LockError;
use super::LockRecord;
use super::LockStore;
use super::board::GENERATION_KEY;
use agentsadm_api::sapi::SapiClient;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::UpdateAction;
use agentsadm_api::sapi::object;
use agentsadm_types::ids::ApplicationUuid;

/// [`LockStore`] in the SAPI `sdc` application's metadata.
#[derive(Clone, Debug)]
pub struct SapiLockStore {
    sapi: SapiClient,
    app: ApplicationUuid,
}

impl SapiLockStore {
    /// Find the `sdc` application.
    pub async fn new(sapi: SapiClient) -> Result<SapiLockStore, LockError> {
        let app = sapi
            .sdc_application()
            .await
            .map_err(|err| LockError::Api {
                what: "find",
                err: Box::new(err),
            })?
            .ok_or(LockError::NoSdcApplication)?;
        Ok(SapiLockStore {
            sapi,
            app: app.uuid,
        })
    }

    async fn merge(&self, what: &'static str, key: String, value: Value) -> Result<(), LockError> {
        self.sapi
            .update_application(self.app, &Update::metadata(object([(key, value)])))
            .await
            .map(|_| ())
            .map_err(|err| LockError::Api {
                what,
                err: Box::new(err),
            })
    }
}

impl LockStore for SapiLockStore {
    fn read(&self) -> BoxFuture<'_, Result<LockBoard, LockError>> {
        Box::pin(async move {
            let app = self
                .sapi
                .get_application(self.app)
                .await
                .map_err(|err| LockError::Api {
                    what: "read",
                    err: Box::new(err),
                })?;
            Ok(LockBoard::from_metadata(&app.metadata))
        })
    }

    fn write<'a>(&'a self, record: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            let value = serde_json::to_value(record).unwrap_or(Value::Null);
            self.merge("write", record.key(), value).await
        })
    }

    fn remove<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            let update = Update {
                action: Some(UpdateAction::Delete),
                params: None,
                metadata: Some(object(keys.iter().map(|k| (k.clone(), Value::Null)))),
            };
            self.sapi
                .update_application(self.app, &update)
                .await
                .map(|_| ())
                .map_err(|err| LockError::Api {
                    what: "release",
                    err: Box::new(err),
                })
        })
    }

    fn mark_generation(&self, generation: u64) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            self.merge("write", GENERATION_KEY.to_string(), Value::from(generation))
                .await
        })
    }
}
