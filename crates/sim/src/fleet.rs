//! The mock servers themselves (the "hardware"): identity, admin IP and the
//! directory holding each one's global zone. Deterministic from a seed:
//! the headnode first (`headnode`), then compute nodes `cn0001`, `cn0002`...
//! with UUIDs drawn from the seeded RNG.
//!
//! A server's directory is created lazily ([`MockServer::ensure_prepared`])
//! the first time a task or command touches it, with whatever a seeded
//! datacenter recorded as installed, so thousands of idle servers cost
//! only their in-memory records.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use super::gz::GzOpError;

use super::gz::GzOps;

use super::gz::GzTarget;

use super::gz::ImageLookup;

use super::gz::SeededComponent;
use agentsadm_types::ids::ServerUuid;

/// The persisted description of one mock server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockServerSpec {
    pub uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    /// 0 for the headnode, then 1.. for compute nodes.
    pub index: usize,
    pub admin_ip: String,
    /// Installed on the server but not yet written to its directory.
    #[serde(default)]
    pub seeded: Vec<SeededComponent>,
}

/// One mock server at run time.
#[derive(Debug)]
pub struct MockServer {
    pub uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    pub index: usize,
    pub admin_ip: String,
    pub root: PathBuf,
    /// `None` once the directory has been prepared; until then, what to
    /// write into it.
    pending: Mutex<Option<Vec<SeededComponent>>>,
}

impl MockServer {
    pub(crate) fn from_spec(spec: MockServerSpec, servers_dir: &Path) -> MockServer {
        let root = servers_dir.join(spec.uuid.to_string());
        // A directory left by an earlier run is already prepared.
        let pending = if root.join("sysinfo.json").exists() {
            None
        } else {
            Some(spec.seeded)
        };
        MockServer {
            uuid: spec.uuid,
            hostname: spec.hostname,
            headnode: spec.headnode,
            index: spec.index,
            admin_ip: spec.admin_ip,
            root,
            pending: Mutex::new(pending),
        }
    }

    pub(crate) fn spec(&self) -> MockServerSpec {
        MockServerSpec {
            uuid: self.uuid,
            hostname: self.hostname.clone(),
            headnode: self.headnode,
            index: self.index,
            admin_ip: self.admin_ip.clone(),
            seeded: self.pending().unwrap_or_default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<SeededComponent>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a seed recorded and is not yet on disk (`None` once prepared).
    pub(crate) fn pending(&self) -> Option<Vec<SeededComponent>> {
        self.lock().clone()
    }

    /// Record components as installed (seeding); written on first use.
    /// Returns false when the directory already exists.
    pub(crate) fn set_seeded(&self, seeded: Vec<SeededComponent>) -> bool {
        let mut p = self.lock();
        match p.as_mut() {
            Some(v) => {
                *v = seeded;
                true
            }
            None => false,
        }
    }

    pub fn target(&self, datacenter: &str) -> GzTarget {
        GzTarget {
            server_uuid: self.uuid,
            hostname: self.hostname.clone(),
            headnode: self.headnode,
            datacenter: datacenter.to_string(),
            admin_ip: self.admin_ip.clone(),
            root: self.root.clone(),
        }
    }

    /// Create the server's GZ directory if this is its first use.
    pub(crate) fn ensure_prepared(
        &self,
        gz: &dyn GzOps,
        datacenter: &str,
        images: ImageLookup<'_>,
    ) -> Result<(), GzOpError> {
        let mut p = self.lock();
        if let Some(seeded) = p.as_ref() {
            gz.prepare(&self.target(datacenter), seeded, images)?;
            *p = None;
        }
        Ok(())
    }

    /// Wipe the GZ (factory reset): the next use starts from an empty
    /// directory.
    pub(crate) fn wipe(&self) -> std::io::Result<()> {
        let mut p = self.lock();
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        *p = Some(Vec::new());
        Ok(())
    }
}

/// Generate the servers of a new datacenter: the headnode and `cns`
/// compute nodes.
pub(crate) fn generate(seed: u64, cns: usize) -> Vec<MockServerSpec> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let width = cns.to_string().len().max(4);
    (0..=cns)
        .map(|index| {
            let mut bytes = [0u8; 16];
            rng.fill_bytes(&mut bytes);
            let uuid = ServerUuid(uuid::Builder::from_random_bytes(bytes).into_uuid());
            let headnode = index == 0;
            let hostname = if headnode {
                "headnode".to_string()
            } else {
                format!("cn{index:0width$}")
            };
            let admin_ip = if headnode {
                "10.99.99.7".to_string()
            } else {
                let i = index - 1;
                format!("10.99.{}.{}", 100 + i / 250, i % 250 + 2)
            };
            MockServerSpec {
                uuid,
                hostname,
                headnode,
                index,
                admin_ip,
                seeded: Vec::new(),
            }
        })
        .collect()
}

/// The rack a seeded server is in: compute node `index` (1-based) is in
/// `rack-NN` with `rack_size` compute nodes per rack, except every 25th
/// compute node and the headnode (index 0), which have none, as servers
/// whose rack was never recorded.
pub fn seeded_rack(index: usize, rack_size: usize) -> Option<String> {
    if index == 0 || rack_size == 0 || index.is_multiple_of(25) {
        return None;
    }
    Some(format!("rack-{:02}", (index - 1) / rack_size + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic() {
        let a = generate(7, 3);
        let b = generate(7, 3);
        assert_eq!(a, b);
        assert_eq!(a.len(), 4);
        assert!(a[0].headnode);
        assert_eq!(a[0].hostname, "headnode");
        assert_eq!(a[1].hostname, "cn0001");
        assert_ne!(generate(8, 3)[1].uuid, a[1].uuid);
        assert_eq!(generate(1, 12000)[12000].hostname, "cn12000");
        let ips: std::collections::BTreeSet<_> =
            generate(1, 2000).into_iter().map(|s| s.admin_ip).collect();
        assert_eq!(ips.len(), 2001);
    }
}
