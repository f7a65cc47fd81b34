//! A deterministic example datacenter for planner tests, snapshots,
//! benchmarks and the fake transport (feature `example`; the planner's own
//! scenario tests use it, and the simulator re-exports it as
//! `agentsadm_sim::testkit`): CNAPI server records, SAPI agent
//! services and instances, and published image manifests, all with UUIDs
//! derived from names so output is stable.
//!
//! ```
//! use agentsadm_plan::example::ExampleDc;
//! let mut dc = ExampleDc::new(3); // headnode + 3 compute nodes, default set at 1.0.0
//! let target = dc.publish("vm-agent", "1.1.0");
//! let (intent, reality) = (dc.intent(), dc.reality());
//! # let _ = (target, intent, reality);
//! ```
//!
//! The intent and reality are built from the wire-shaped records by the
//! same code that indexes real SAPI and CNAPI answers.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ComponentSelection;
use crate::ImageRef;
use crate::Operation;
use crate::Request;
use crate::ResolvedImages;
use crate::ServerSelection;
use crate::intent::Intent;
use crate::reality::Reality;
use agentsadm_types::agents::AgentEntry;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::cnapi::Server;
use agentsadm_types::ids::ApplicationUuid;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;
use agentsadm_types::sapi::Instance;
use agentsadm_types::sapi::Service;
use agentsadm_types::sapi::ServiceType;
use agentsadm_types::sapi::instance_params;
use agentsadm_types::sapi::object;

/// The version every component starts at in [`ExampleDc::new`].
pub const BASE_VERSION: &str = "1.0.0";

/// A UUID (v4 layout) derived from a string.
pub fn derived_uuid(seed: &str) -> uuid::Uuid {
    let digest = Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// Server number `i` (0 is the headnode in [`ExampleDc::new`]).
pub fn server_uuid(i: usize) -> ServerUuid {
    ServerUuid::from_u128(0x5e000000_0000_4000_8000_000000000000 | i as u128)
}

/// The image of `component` at `version`.
pub fn image_uuid(component: &str, version: &str) -> ImageUuid {
    ImageUuid(derived_uuid(&format!("image/{component}/{version}")))
}

/// The instance a server keeps for a component.
pub fn instance_uuid(server: ServerUuid, component: &str) -> InstanceUuid {
    InstanceUuid(derived_uuid(&format!("instance/{server}/{component}")))
}

/// The SAPI service of a component.
pub fn service_uuid(component: &str) -> ServiceUuid {
    ServiceUuid(derived_uuid(&format!("service/{component}")))
}

/// The `sdc` application.
pub fn sdc_application() -> ApplicationUuid {
    ApplicationUuid(derived_uuid("application/sdc"))
}

/// agentsadm's own application ([`agentsadm_types::sapi::OWN_APPLICATION`]).
pub fn own_application() -> ApplicationUuid {
    ApplicationUuid(derived_uuid("application/agentsadm"))
}

/// The application a component's service is in.
pub fn application_of(component: &str) -> ApplicationUuid {
    if agentsadm_types::sapi::in_own_application(component) {
        own_application()
    } else {
        sdc_application()
    }
}

/// An example datacenter as wire-shaped records.
#[derive(Clone, Debug)]
pub struct ExampleDc {
    pub catalog: Catalog,
    /// CNAPI server records (with `agents`).
    pub servers: BTreeMap<ServerUuid, Server>,
    /// SAPI `type=agent` services.
    pub services: Vec<Service>,
    /// SAPI `type=agent` instances, by UUID.
    pub instances: BTreeMap<InstanceUuid, Instance>,
    /// Images in the datacenter IMGAPI.
    pub images: BTreeMap<ImageUuid, ImageManifest>,
}

impl ExampleDc {
    /// No servers, no services, no images.
    pub fn empty() -> ExampleDc {
        ExampleDc {
            catalog: Catalog::builtin(),
            servers: BTreeMap::new(),
            services: Vec::new(),
            instances: BTreeMap::new(),
            images: BTreeMap::new(),
        }
    }

    /// A headnode (`headnode`) and `compute_nodes` CNs (`cn001`...), set up
    /// and running, each with its default set at [`BASE_VERSION`], adopted
    /// into SAPI with params. Every component but marlin-agent has a SAPI
    /// service whose default is [`BASE_VERSION`].
    pub fn new(compute_nodes: usize) -> ExampleDc {
        let mut dc = ExampleDc::empty();
        let names: Vec<String> = dc.catalog.names().map(ToString::to_string).collect();
        for name in &names {
            dc.publish(name, BASE_VERSION);
            if name != "marlin-agent" {
                dc.manage(name);
            }
        }
        for i in 0..=compute_nodes {
            let headnode = i == 0;
            let hostname = if headnode {
                "headnode".to_string()
            } else {
                format!("cn{i:03}")
            };
            let uuid = dc.add_server_at(i, &hostname, headnode);
            let set: Vec<String> = dc
                .catalog
                .default_set(headnode)
                .iter()
                .map(|c| c.name.to_string())
                .collect();
            for name in set {
                dc.install(uuid, &name, BASE_VERSION);
            }
        }
        dc
    }

    /// Add a set-up, running server with nothing installed.
    pub fn add_server(&mut self, hostname: &str, headnode: bool) -> ServerUuid {
        let i = self.servers.len() + 1000;
        self.add_server_at(i, hostname, headnode)
    }

    fn add_server_at(&mut self, i: usize, hostname: &str, headnode: bool) -> ServerUuid {
        let uuid = server_uuid(i);
        let server: Server = serde_json::from_value(json!({
            "uuid": uuid, "hostname": hostname, "headnode": headnode,
            "setup": true, "status": "running", "agents": []
        }))
        .expect("server record");
        self.servers.insert(uuid, server);
        uuid
    }

    /// Servers by hostname.
    pub fn server_named(&self, hostname: &str) -> ServerUuid {
        self.servers
            .values()
            .find(|s| s.hostname == hostname)
            .map(|s| s.uuid)
            .unwrap_or_else(|| panic!("no server {hostname}"))
    }

    /// Add an image of `component` at `version` to the datacenter IMGAPI.
    pub fn publish(&mut self, component: &str, version: &str) -> ImageRef {
        let manifest = example_manifest(component, version);
        let r = image_ref(&manifest);
        self.images.insert(manifest.uuid, manifest);
        r
    }

    /// The [`ImageRef`] of a published image.
    pub fn image_ref(&self, component: &str, version: &str) -> ImageRef {
        image_ref(&example_manifest(component, version))
    }

    /// Give a component a SAPI service (default image at [`BASE_VERSION`]
    /// when published).
    pub fn manage(&mut self, component: &str) {
        if self.services.iter().any(|s| s.name == component) {
            return;
        }
        let default = image_uuid(component, BASE_VERSION);
        let mut params = object([(
            "tags",
            json!({"smartdc_role": component, "smartdc_type": "core"}),
        )]);
        if self.images.contains_key(&default) {
            params.insert("image_uuid".into(), Value::String(default.to_string()));
        }
        self.services.push(Service {
            uuid: service_uuid(component),
            name: component.to_string(),
            application_uuid: application_of(component),
            params: Some(params),
            metadata: Some(object([("SERVICE_NAME", component)])),
            manifests: Some(object(Vec::<(String, Value)>::new())),
            master: None,
            service_type: Some(ServiceType::Agent),
        });
    }

    /// Remove a component's service and its instances.
    pub fn unmanage(&mut self, component: &str) {
        let svc = service_uuid(component);
        self.services.retain(|s| s.uuid != svc);
        self.instances.retain(|_, i| i.service_uuid != svc);
    }

    /// Set (or clear) a service's default image.
    pub fn set_service_default(&mut self, component: &str, image: Option<ImageUuid>) {
        if let Some(s) = self.services.iter_mut().find(|s| s.name == component) {
            let params = s.params.get_or_insert_with(Default::default);
            match image {
                Some(i) => {
                    params.insert("image_uuid".into(), Value::String(i.to_string()));
                }
                None => {
                    params.remove("image_uuid");
                }
            }
        }
    }

    /// Install `component` at `version` on a server (publishing the image
    /// if needed) and adopt its instance with params, as agentsadm does.
    pub fn install(&mut self, server: ServerUuid, component: &str, version: &str) {
        let image = self.publish(component, version).uuid;
        let instance = instance_uuid(server, component);
        self.set_installed(server, component, image, Some(instance));
        if self.services.iter().any(|s| s.name == component) {
            self.sapi_put_instance(
                instance,
                service_uuid(component),
                Some(instance_params(server, image)),
            );
        }
    }

    /// Record in CNAPI that a server runs `image` for `component`.
    pub fn set_installed(
        &mut self,
        server: ServerUuid,
        component: &str,
        image: ImageUuid,
        instance: Option<InstanceUuid>,
    ) {
        let version = self
            .images
            .get(&image)
            .map(|m| m.version.clone())
            .unwrap_or_else(|| "0.0.0".to_string());
        let package = match self.catalog.get(component) {
            Some(c) => c.package_name().clone(),
            None => ComponentName::new(component).expect("a test names components by name"),
        };
        let version = ComponentVersion::new(version).expect("a test's version is a version");
        let s = self.servers.get_mut(&server).expect("known server");
        let agents = s.agents.get_or_insert_with(Vec::new);
        agents.retain(|a| a.name != package);
        agents.push(AgentEntry {
            name: package,
            version,
            image_uuid: Some(image),
            uuid: instance,
        });
        agents.sort();
    }

    /// What the server reports for a component.
    pub fn installed(&self, server: ServerUuid, component: &str) -> Option<&AgentEntry> {
        let package = self.catalog.get(component)?.package_name();
        self.servers
            .get(&server)?
            .agents
            .as_ref()?
            .iter()
            .find(|a| a.name == package)
    }

    /// Remove a component from a server's report (SAPI untouched).
    pub fn remove_installed(&mut self, server: ServerUuid, component: &str) {
        let package = match self.catalog.get(component) {
            Some(c) => c.package_name().clone(),
            None => ComponentName::new(component).expect("a test names components by name"),
        };
        if let Some(agents) = self
            .servers
            .get_mut(&server)
            .and_then(|s| s.agents.as_mut())
        {
            agents.retain(|a| a.name != package);
        }
    }

    /// Make a component's instance on a server legacy: no params, as the
    /// agents' own postinstall scripts adopt them.
    pub fn make_legacy(&mut self, server: ServerUuid, component: &str) {
        let uuid = instance_uuid(server, component);
        if let Some(i) = self.instances.get_mut(&uuid) {
            i.params = None;
        }
    }

    /// Delete a component's instance on a server from SAPI.
    pub fn drop_instance(&mut self, server: ServerUuid, component: &str) {
        let uuid = instance_uuid(server, component);
        self.instances.remove(&uuid);
    }

    pub fn set_setup(&mut self, server: ServerUuid, setup: bool) {
        if let Some(s) = self.servers.get_mut(&server) {
            s.setup = setup;
        }
    }

    /// CNAPI `rack_identifier`.
    pub fn set_rack(&mut self, server: ServerUuid, rack: &str) {
        if let Some(s) = self.servers.get_mut(&server) {
            s.extra.insert("rack_identifier".to_string(), json!(rack));
        }
    }

    pub fn set_status(&mut self, server: ServerUuid, status: &str) {
        if let Some(s) = self.servers.get_mut(&server) {
            s.status = Some(status.to_string());
        }
    }

    /// SAPI CreateInstance with an explicit UUID (overwrites).
    pub fn sapi_put_instance(
        &mut self,
        uuid: InstanceUuid,
        service: ServiceUuid,
        params: Option<agentsadm_types::sapi::Object>,
    ) {
        self.instances.insert(
            uuid,
            Instance {
                uuid,
                service_uuid: service,
                params,
                metadata: None,
                manifests: None,
                master: None,
                job_uuid: None,
                service_type: Some(ServiceType::Agent),
            },
        );
    }

    /// SAPI UpdateInstance merging params; `false` if there is no such instance.
    pub fn sapi_merge_params(
        &mut self,
        uuid: InstanceUuid,
        params: agentsadm_types::sapi::Object,
    ) -> bool {
        match self.instances.get_mut(&uuid) {
            Some(i) => {
                i.params.get_or_insert_with(Default::default).extend(params);
                true
            }
            None => false,
        }
    }

    /// SAPI DeleteInstance; `false` if there was no such instance.
    pub fn sapi_delete_instance(&mut self, uuid: InstanceUuid) -> bool {
        self.instances.remove(&uuid).is_some()
    }

    /// SAPI instances as a ListInstances answer.
    pub fn instance_list(&self) -> Vec<Instance> {
        self.instances.values().cloned().collect()
    }

    /// CNAPI records as a ServerList answer.
    pub fn server_list(&self) -> Vec<Server> {
        self.servers.values().cloned().collect()
    }

    pub fn reality(&self) -> Reality {
        Reality::from_servers(&self.catalog, &self.server_list())
    }

    pub fn intent(&self) -> Intent {
        Intent::build(
            &self.catalog,
            &self.services,
            &self.instance_list(),
            &self.reality(),
        )
    }

    /// What image resolution would find with no `--image`/`--latest`:
    /// every published image is known, and agentsadm's service default is
    /// what servers whose agentsadm is missing or too old get first.
    pub fn known_images(&self) -> ResolvedImages {
        let intent = self.intent();
        let agentsadm = self
            .catalog
            .iter()
            .find(|c| c.kind == agentsadm_types::catalog::ComponentKind::Agentsadm)
            .and_then(|c| intent.services.get(&c.name)?.default_image)
            .and_then(|i| self.images.get(&i))
            .map(image_ref);
        ResolvedImages {
            known: self
                .images
                .values()
                .map(|m| (m.uuid, image_ref(m)))
                .collect(),
            agentsadm,
            ..Default::default()
        }
    }

    /// [`ExampleDc::known_images`] plus explicit targets.
    pub fn images_with_targets(&self, targets: &[ImageRef]) -> ResolvedImages {
        let mut r = self.known_images();
        for t in targets {
            let name =
                ComponentName::new(t.name.as_str()).expect("a target is a component's image");
            r.targets.insert(name, t.clone());
        }
        r
    }
}

/// The plan's view of a manifest.
pub fn image_ref(m: &ImageManifest) -> ImageRef {
    ImageRef {
        uuid: m.uuid,
        name: m.name.clone(),
        version: m.version.clone(),
        import_from: None,
    }
}

/// A manifest of the shape agent images have (`type: other`, one file).
pub fn example_manifest(component: &str, version: &str) -> ImageManifest {
    let uuid = image_uuid(component, version);
    let sha = hex::encode_sha1(uuid.to_string().as_bytes());
    ImageManifest {
        v: 2,
        uuid,
        owner: agentsadm_types::image::ADMIN_OWNER.to_string(),
        name: component.to_string(),
        version: version.to_string(),
        state: ImageState::Active,
        disabled: false,
        public: false,
        published_at: Some(format!("2026-01-01T00:00:{:02}.000Z", version.len() % 60)),
        image_type: "other".to_string(),
        os: "other".to_string(),
        files: vec![ImageFile {
            sha1: sha,
            size: 1024,
            compression: Compression::Gzip,
            stor: None,
        }],
        description: None,
        tags: None,
        channels: None,
        extra: BTreeMap::new(),
    }
}

mod hex {
    use sha1::{Digest, Sha1};

    pub fn encode_sha1(data: &[u8]) -> String {
        format!("{:x}", Sha1::digest(data))
    }
}

/// A request as the command line would build it: `["--all"]` selects every
/// component, no servers selects every server.
pub fn request(operation: Operation, components: &[&str], servers: &[&str]) -> Request {
    Request {
        operation,
        components: if components == ["--all"] {
            ComponentSelection::All
        } else {
            ComponentSelection::Named(
                components
                    .iter()
                    .map(|c| ComponentName::new(*c).expect("a test names components by name"))
                    .collect(),
            )
        },
        servers: if servers.is_empty() {
            ServerSelection::All
        } else {
            ServerSelection::Named(servers.iter().map(ToString::to_string).collect())
        },
        exclude: Vec::new(),
    }
}
