//! SAPI's objects as the simulator stores them: applications, services
//! and instances in creation order, with an index from instance UUID.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use agentsadm_api::sapi::Application;

use agentsadm_api::sapi::Instance;

use agentsadm_api::sapi::Service;
use agentsadm_types::ids::ApplicationUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;

/// SAPI's objects, in creation order (what Moray's `_id` order gives).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SapiStore {
    pub applications: Vec<Application>,
    pub services: Vec<Service>,
    /// Keyed by a creation sequence number, so lists come out in creation
    /// order and an overwrite keeps its place.
    pub instances: BTreeMap<u64, Instance>,
    #[serde(skip)]
    instance_index: HashMap<InstanceUuid, u64>,
    pub next_seq: u64,
}

impl SapiStore {
    /// Rebuild the uuid index after loading.
    pub(crate) fn reindex(&mut self) {
        self.instance_index = self.instances.iter().map(|(s, i)| (i.uuid, *s)).collect();
    }

    pub fn instance(&self, uuid: InstanceUuid) -> Option<&Instance> {
        self.instance_index
            .get(&uuid)
            .and_then(|s| self.instances.get(s))
    }

    /// Create or overwrite an instance (SAPI has no conflict check).
    pub fn put_instance(&mut self, inst: Instance) {
        match self.instance_index.get(&inst.uuid) {
            Some(seq) => {
                self.instances.insert(*seq, inst);
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.instance_index.insert(inst.uuid, seq);
                self.instances.insert(seq, inst);
            }
        }
    }

    pub fn remove_instance(&mut self, uuid: InstanceUuid) -> Option<Instance> {
        let seq = self.instance_index.remove(&uuid)?;
        self.instances.remove(&seq)
    }

    pub fn service(&self, uuid: ServiceUuid) -> Option<&Service> {
        self.services.iter().find(|s| s.uuid == uuid)
    }

    pub fn application(&self, uuid: ApplicationUuid) -> Option<&Application> {
        self.applications.iter().find(|a| a.uuid == uuid)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use agentsadm_api::sapi::ServiceType;

    #[test]
    fn store_overwrites_in_place() {
        let mut s = SapiStore::default();
        let svc = ServiceUuid::from_u128(9);
        let mk = |n: u128, tag: &str| Instance {
            uuid: InstanceUuid::from_u128(n),
            service_uuid: svc,
            params: Some(Map::from_iter([("t".to_string(), json!(tag))])),
            metadata: None,
            manifests: None,
            master: None,
            job_uuid: None,
            service_type: Some(ServiceType::Agent),
        };
        s.put_instance(mk(1, "a"));
        s.put_instance(mk(2, "b"));
        s.put_instance(mk(1, "c"));
        let order: Vec<u128> = s.instances.values().map(|i| i.uuid.0.as_u128()).collect();
        assert_eq!(order, vec![1, 2]);
        assert_eq!(
            s.instance(InstanceUuid::from_u128(1))
                .unwrap()
                .params
                .as_ref()
                .unwrap()["t"],
            "c"
        );
        assert!(s.remove_instance(InstanceUuid::from_u128(1)).is_some());
        assert!(s.instance(InstanceUuid::from_u128(1)).is_none());
    }
}
