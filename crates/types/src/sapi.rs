//! SAPI's objects as agentsadm reads and writes them (docs/triton/apis.md
//! §2): applications, services and instances (with `type=agent`), the
//! bodies of Create*/Update*, and the params agentsadm keeps on every
//! agent instance ([`instance_params`]). The planner reads services and
//! instances (intent is built from them) and the SAPI client in
//! `agentsadm-api` carries them, so they sit here, below both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::ApplicationUuid;
use crate::ids::ImageUuid;
use crate::ids::InstanceUuid;
use crate::ids::ServerUuid;
use crate::ids::ServiceUuid;

/// A JSON object (params, metadata, manifests).
pub type Object = serde_json::Map<String, serde_json::Value>;

/// SAPI object type; only visible to v2 clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceType {
    Vm,
    Agent,
}

/// A SAPI application (returned as stored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Application {
    pub uuid: ApplicationUuid,
    pub name: String,
    #[serde(default)]
    pub owner_uuid: String,
    #[serde(default)]
    pub params: Object,
    #[serde(default)]
    pub metadata: Object,
    #[serde(flatten)]
    pub extra: Object,
}

/// A SAPI service, in SAPI's serialization order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Service {
    pub uuid: ServiceUuid,
    pub name: String,
    pub application_uuid: ApplicationUuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<bool>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
}

impl Service {
    /// `params.image_uuid`: for agent services, the image new servers get.
    pub fn image_uuid(&self) -> Option<ImageUuid> {
        param_uuid(self.params.as_ref(), "image_uuid")
    }

    pub fn is_agent(&self) -> bool {
        self.service_type == Some(ServiceType::Agent)
    }
}

/// A SAPI instance, in SAPI's serialization order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub uuid: InstanceUuid,
    pub service_uuid: ServiceUuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_uuid: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
}

impl Instance {
    /// `params.server_uuid` (set by agentsadm and by cn-agent's postinstall;
    /// absent on legacy instances).
    pub fn server_uuid(&self) -> Option<ServerUuid> {
        param_str(self.params.as_ref(), "server_uuid").and_then(|s| s.parse().ok())
    }

    /// `params.image_uuid`: the image intended for this instance.
    pub fn image_uuid(&self) -> Option<ImageUuid> {
        param_uuid(self.params.as_ref(), "image_uuid")
    }
}

fn param_str<'a>(params: Option<&'a Object>, key: &str) -> Option<&'a str> {
    params?.get(key)?.as_str()
}

fn param_uuid(params: Option<&Object>, key: &str) -> Option<ImageUuid> {
    param_str(params, key).and_then(|s| s.parse().ok())
}

/// CreateInstance body. SAPI overwrites an existing `uuid`, and deletes
/// the instance when that re-create fails: an existing instance is changed
/// with UpdateInstance, never re-posted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateInstance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<InstanceUuid>,
    /// Omitted rather than sent as `null` when unset (SAPI validates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_uuid: Option<ServiceUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
}

/// CreateService body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateService {
    pub name: String,
    pub application_uuid: ApplicationUuid,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<ServiceUuid>,
}

/// The `action` of an Update* call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdateAction {
    /// Merge top-level keys (SAPI's default).
    #[default]
    Update,
    /// Replace each given field wholesale.
    Replace,
    /// Delete the listed keys.
    Delete,
}

/// UpdateApplication / UpdateService / UpdateInstance body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Update {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<UpdateAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
}

impl Update {
    /// Merge these params.
    pub fn params(params: Object) -> Update {
        Update {
            action: Some(UpdateAction::Update),
            params: Some(params),
            metadata: None,
        }
    }

    /// Merge these metadata keys.
    pub fn metadata(metadata: Object) -> Update {
        Update {
            action: Some(UpdateAction::Update),
            params: None,
            metadata: Some(metadata),
        }
    }
}

/// Build an [`Object`] from pairs.
pub fn object<I, K, V>(pairs: I) -> Object
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<serde_json::Value>,
{
    pairs
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// The SAPI application that holds the services of agentsadm's components
/// that are not apm agents ([`OWN_SERVICES`]). sdcadm 1.39.0 takes every
/// `type=agent` service of `sdc` for an SMF agent it can health-check,
/// plan and update: in `sdc` these services make `sdcadm check-health`
/// fail for good, `experimental avail` conflict on `sdcadm` and
/// `experimental update agentsadm@V` crash; and sdcadm lists the instances
/// of `sdc`'s `dockerlogger` service besides `server.agents`, where
/// agentsadm's registration already puts dockerlogger, so `sdcadm insts`
/// showed it twice (docs/triton/sdcadm.md §10). sdcadm reads only `sdc`
/// and `manta`; agentsadm lists agent services of every application.
pub const OWN_APPLICATION: &str = "agentsadm";

/// The services kept in [`OWN_APPLICATION`] rather than `sdc`.
pub const OWN_SERVICES: [&str; 4] = ["agentsadm", "dockerlogger", "gz-tools", "sdcadm"];

/// Whether a component's SAPI service belongs in [`OWN_APPLICATION`].
pub fn in_own_application(component: &str) -> bool {
    OWN_SERVICES.contains(&component)
}

/// The params agentsadm keeps on every agent instance.
pub fn instance_params(server: ServerUuid, image: ImageUuid) -> Object {
    object([
        ("server_uuid", Value::String(server.to_string())),
        ("image_uuid", Value::String(image.to_string())),
    ])
}
