//! The fast path to a realistic datacenter, by direct calls (no HTTP):
//!
//! 1. Build a format-correct image of every catalog component at the seed
//!    version and publish it to the DC IMGAPI and the updates server
//!    (channels `dev`, `staging`, `release`); optionally a newer version in
//!    the DC and a newer still on the updates server only (`dev`,
//!    `experimental`).
//! 2. Create the SAPI `sdc` application (`metadata.update_channel`,
//!    `datacenter_name`..., and the `metadata_schema` sdcadm sets on real
//!    ones) and one `type=agent` service per component with
//!    `params.image_uuid` = the seed image (the default for new servers).
//! 3. Set up every server not listed as not-set-up: record the default set
//!    (headnode or compute node) as installed (written to its directory on
//!    first use, exactly as the installer leaves it: see
//!    [`super::gz`] "Seeding"), create one SAPI instance per component with
//!    `params.server_uuid` and `params.image_uuid`, and set `server.agents`
//!    to what the installer reports for that set.
//!
//! As in real datacenters, some of it is less tidy ([`SeedSpec`]): the
//! instances of [`SeedSpec::agents_without_params`] (vm-agent and net-agent
//! by default) have no `params` at all, as those agents' postinstalls
//! adopt themselves with only `{uuid, service_uuid}`; and the image files
//! of [`SeedSpec::files_without_md5`] are served without `Content-MD5`.
//!
//! cn-agent's images are published on cn-agent's real release line, 2.x
//! ([`release_version`]): the seed's 1.0.0 is cn-agent 2.9.0, whose
//! builds (`2.9.0-master-<stamp>-g<sha>`) CNAPI's uninstall-agents
//! accepts, so simulated removals take the path the real CNAPI takes (a
//! build of 2.8.0 would not: CNAPI compares with node-semver, where the
//! build's suffix is a pre-release, below its 2.8.0 floor). The SAPI
//! `cnapi` service (and its instance on the headnode) carries
//! `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` when the simulated CNAPI runs
//! commands through cn-agent ([`crate::SimConfig::execute_transport`]),
//! as a real CNAPI's config is rendered from there.
//!
//! Everything comes from a seeded RNG, so the same seed gives the same
//! UUIDs.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::SimError;
use super::config::SeedSpec;
use super::core::DcCore;
use super::gz::SeededComponent;
use super::imgapi::StoredFile;
use crate::imagebuild::BuiltImage;
use crate::imagebuild::ImageSpec;
use crate::imagebuild::build;
use agentsadm_api::sapi::Application;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Service;
use agentsadm_api::sapi::ServiceType;
use agentsadm_api::sapi::object;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ApplicationUuid;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;
use agentsadm_types::image::ImageManifest;

/// What seeding created, for tests and the demo.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeedReport {
    pub application: Option<ApplicationUuid>,
    /// Agent service per component name.
    pub services: BTreeMap<String, ServiceUuid>,
    /// The installed (default) image per component.
    pub images: BTreeMap<String, ImageManifest>,
    /// The newer image per component in the DC IMGAPI, if any.
    pub dc_newer: BTreeMap<String, ImageManifest>,
    /// The newer image per component on the updates server only, if any.
    pub updates_newer: BTreeMap<String, ImageManifest>,
    /// Servers set up by the seed.
    pub servers_set_up: usize,
}

/// The version a component's image gets for the simulator's `semver`:
/// the same, except cn-agent's below 2.0.0 (the simulator's own 1.x line),
/// which move onto cn-agent's real 2.x line (major + 1, minor + 9: 1.0.0 is
/// 2.9.0, 1.1.0 is 2.10.0), keeping their order. A cn-agent version already
/// on the real line (2.15.0, or a 2.7.0 below CNAPI's uninstall floor) is
/// taken as asked: `sim publish --version 2.15.0 cn-agent` publishes 2.15.0,
/// not 3.23.0.
pub fn release_version(component: &str, semver: &str) -> String {
    if component != "cn-agent" {
        return semver.to_string();
    }
    match semver::Version::parse(semver) {
        Ok(v) if v.major < 2 => semver::Version {
            major: v.major + 1,
            minor: v.minor + 9,
            ..v
        }
        .to_string(),
        _ => semver.to_string(),
    }
}

fn uuid_from(rng: &mut SmallRng) -> uuid::Uuid {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    uuid::Builder::from_random_bytes(b).into_uuid()
}

/// Build an image of `c` at `semver` with a UUID from `rng` and a version in
/// the real `<semver>-<branch>-<stamp>-g<sha>` form.
pub(crate) fn seeded_image(
    c: &Component,
    semver: &str,
    stamp: &str,
    payload_bytes: usize,
    rng: &mut SmallRng,
) -> BuiltImage {
    let semver = release_version(&c.name, semver);
    let mut spec = ImageSpec::for_component(c, &semver);
    spec.uuid = ImageUuid(uuid_from(rng));
    let sha = spec.uuid.to_string()[..7].to_string();
    spec.version = agentsadm_types::image::agent_version_string(&semver, "master", stamp, &sha);
    spec.payload_bytes = payload_bytes;
    build(&spec)
}

/// Insert a built image into an IMGAPI store (activated now).
pub(crate) fn insert_image(
    core: &DcCore,
    updates: bool,
    img: BuiltImage,
    channels: &[&str],
) -> ImageManifest {
    insert_image_md5(core, updates, img, channels, true)
}

/// [`insert_image`], the file's record with or without its `contentMD5`.
fn insert_image_md5(
    core: &DcCore,
    updates: bool,
    mut img: BuiltImage,
    channels: &[&str],
    with_md5: bool,
) -> ImageManifest {
    if img.manifest.published_at.is_none() {
        img.manifest.published_at = Some(core.clock.next());
    }
    let mut file = StoredFile::new(img.file.into(), img.manifest.files[0].compression);
    if !with_md5 {
        file.md5_b64 = None;
    }
    let svc = if updates { &core.updates } else { &core.imgapi };
    let channels: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
    let mut store = svc.lock();
    store.insert(img.manifest.clone(), file, channels);
    let stored = &store.images[&img.manifest.uuid];
    stored.current_manifest()
}

/// The `metadata_schema` sdcadm keeps on the `sdc` application
/// (joyent-schemas `sdc.sdc_app`, updated by `sdcadm update other`): only
/// `fabric_cfg` is constrained.
fn sdc_app_metadata_schema() -> serde_json::Value {
    let mtu = |default: u64| {
        json!({"type": "integer", "minimum": 576, "maximum": 9000,
               "required": true, "default": default})
    };
    json!({"type": "object", "properties": {"fabric_cfg": {
        "type": "object",
        "properties": {
            "default_underlay_mtu": mtu(9000),
            "default_overlay_mtu": mtu(8500),
            "sdc_nat_pool": {"type": "string"},
            "sdc_underlay_assignment": {"type": "string", "required": true,
                                        "enum": ["manual", "automatic"]},
            "sdc_underlay_tag": {"type": "string", "required": true},
            "sdc_underlay_pool": {"type": "string"}
        }
    }}})
}

/// The SAPI `cnapi` service (type vm) and its instance on the headnode,
/// with `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` in the service's metadata
/// when the simulated CNAPI runs commands through cn-agent.
fn put_cnapi_service(
    core: &DcCore,
    sapi: &mut super::sapi::SapiStore,
    app: ApplicationUuid,
    rng: &mut SmallRng,
) {
    let uuid = ServiceUuid(uuid_from(rng));
    let mut metadata = object([("SERVICE_NAME", json!("cnapi"))]);
    if core.config.execute_transport == crate::ExecuteTransport::CnAgent {
        metadata.insert(
            "FEATURE_USE_CNAGENT_COMMAND_EXECUTE".to_string(),
            json!(true),
        );
    }
    sapi.services.push(Service {
        uuid,
        name: "cnapi".to_string(),
        application_uuid: app,
        params: Some(object([(
            "tags",
            json!({"smartdc_role": "cnapi", "smartdc_type": "core"}),
        )])),
        metadata: Some(metadata),
        manifests: Some(Default::default()),
        master: None,
        service_type: Some(ServiceType::Vm),
    });
    let headnode = core.fleet.values().find(|s| s.headnode).map(|s| s.uuid);
    sapi.put_instance(Instance {
        uuid: InstanceUuid(uuid_from(rng)),
        service_uuid: uuid,
        params: Some(object([
            ("alias", json!("cnapi0")),
            ("server_uuid", json!(headnode)),
        ])),
        metadata: Some(Default::default()),
        manifests: None,
        master: None,
        job_uuid: None,
        service_type: Some(ServiceType::Vm),
    });
}

pub(crate) fn populate(core: &DcCore, spec: &SeedSpec) -> Result<SeedReport, SimError> {
    if core
        .sapi
        .lock()
        .applications
        .iter()
        .any(|a| a.name == "sdc")
    {
        return Err(SimError::AlreadySeeded);
    }
    if let Some(s) = core.fleet.values().find(|s| s.pending().is_none()) {
        return Err(SimError::SeedTooLate {
            server: s.hostname.clone(),
        });
    }
    let mut rng = SmallRng::seed_from_u64(core.config.rng_seed ^ 0x5eed_da7a);
    let mut report = SeedReport::default();
    let components: Vec<&Component> = core.catalog.iter().collect();
    let md5 = |c: &Component| !spec.files_without_md5.iter().any(|n| c.name == *n);

    // 1. Images.
    for c in &components {
        let img = seeded_image(
            c,
            &spec.version,
            "20260101T000000Z",
            spec.payload_bytes,
            &mut rng,
        );
        let m = insert_image_md5(core, false, img.clone(), &[], md5(c));
        insert_image_md5(core, true, img, &["dev", "staging", "release"], md5(c));
        report.images.insert(c.name.to_string(), m);
    }
    if let Some(v) = &spec.dc_newer {
        for c in &components {
            let img = seeded_image(c, v, "20260201T000000Z", spec.payload_bytes, &mut rng);
            let m = insert_image_md5(core, false, img.clone(), &[], md5(c));
            insert_image_md5(core, true, img, &["dev", "staging", "release"], md5(c));
            report.dc_newer.insert(c.name.to_string(), m);
        }
    }
    if let Some(v) = &spec.updates_newer {
        for c in &components {
            let img = seeded_image(c, v, "20260301T000000Z", spec.payload_bytes, &mut rng);
            let m = insert_image_md5(core, true, img, &["dev", "experimental"], md5(c));
            report.updates_newer.insert(c.name.to_string(), m);
        }
    }

    // 2. SAPI application and agent services.
    let app_uuid = ApplicationUuid(uuid_from(&mut rng));
    let admin_uuid = uuid_from(&mut rng);
    {
        let mut sapi = core.sapi.lock();
        sapi.applications.push(Application {
            uuid: app_uuid,
            name: "sdc".to_string(),
            owner_uuid: admin_uuid.to_string(),
            params: object([("image_uuid", json!("00000000-0000-0000-0000-000000000000"))]),
            metadata: object([
                ("datacenter_name", json!(core.config.datacenter)),
                ("dns_domain", json!(core.config.dns_domain)),
                ("update_channel", json!(core.config.update_channel)),
                ("ufds_admin_uuid", json!(admin_uuid)),
                (
                    "sapi_domain",
                    json!(format!(
                        "sapi.{}.{}",
                        core.config.datacenter, core.config.dns_domain
                    )),
                ),
            ]),
            extra: object([("metadata_schema", sdc_app_metadata_schema())]),
        });
        // agentsadm's own components live in its own application, which
        // sdcadm never reads (issue 29).
        // Not drawn from `rng`: every UUID seeded after stays as it was.
        let own_uuid = ApplicationUuid(uuid::Uuid::from_u128(
            app_uuid.0.as_u128() ^ 0x0a9e_075a_d000_0000_0000_0000_0000_0001,
        ));
        if components
            .iter()
            .any(|c| agentsadm_api::sapi::in_own_application(&c.name))
        {
            sapi.applications.push(Application {
                uuid: own_uuid,
                name: agentsadm_api::sapi::OWN_APPLICATION.to_string(),
                owner_uuid: admin_uuid.to_string(),
                params: Default::default(),
                metadata: Default::default(),
                extra: Default::default(),
            });
        }
        for c in &components {
            let uuid = ServiceUuid(uuid_from(&mut rng));
            let in_own = agentsadm_api::sapi::in_own_application(&c.name);
            sapi.services.push(Service {
                uuid,
                name: c.name.to_string(),
                application_uuid: if in_own { own_uuid } else { app_uuid },
                params: Some(object([
                    ("image_uuid", json!(report.images[c.name.as_str()].uuid)),
                    (
                        "tags",
                        json!({"smartdc_role": c.name, "smartdc_type": "core"}),
                    ),
                ])),
                metadata: Some(object([("SERVICE_NAME", json!(c.name))])),
                manifests: Some(Default::default()),
                master: None,
                service_type: Some(ServiceType::Agent),
            });
            report.services.insert(c.name.to_string(), uuid);
        }
        put_cnapi_service(core, &mut sapi, app_uuid, &mut rng);
    }
    report.application = Some(app_uuid);

    // 3. Servers.
    let not_setup: Vec<agentsadm_types::ids::ServerUuid> = core
        .config
        .not_setup
        .iter()
        .map(|sel| {
            super::resolve_selector(core, sel).ok_or_else(|| SimError::UnknownServer {
                selector: sel.clone(),
            })
        })
        .collect::<Result<_, _>>()?;
    // What each server has and reports, from a real install of its role's
    // set (built once per role, before any store is locked).
    let lookup = |i| core.seed_image(i);
    let mut planned = Vec::new();
    for server in core.fleet.values() {
        if not_setup.contains(&server.uuid) {
            continue;
        }
        let seeded: Vec<SeededComponent> = core
            .catalog
            .default_set(server.headnode)
            .into_iter()
            .map(|c| SeededComponent {
                name: c.name.to_string(),
                image_uuid: report.images[c.name.as_str()].uuid,
                instance_uuid: InstanceUuid(uuid_from(&mut rng)),
            })
            .collect();
        let agents = core
            .gz
            .seeded_agents(server.headnode, &seeded, &lookup)
            .map_err(|err| SimError::Seed { err })?;
        planned.push((server.clone(), seeded, agents));
    }
    let mut sapi = core.sapi.lock();
    let mut records = core.cnapi.servers();
    for (server, seeded, agents) in planned {
        for c in &seeded {
            // Adopted by its own postinstall, as vm-agent's and net-agent's
            // do: `{uuid, service_uuid}` and nothing else.
            let bare = spec.agents_without_params.contains(&c.name);
            sapi.put_instance(Instance {
                uuid: c.instance_uuid,
                service_uuid: report.services[&c.name],
                params: (!bare).then(|| {
                    object([
                        ("server_uuid", json!(server.uuid)),
                        ("image_uuid", json!(c.image_uuid)),
                    ])
                }),
                metadata: None,
                manifests: None,
                master: None,
                job_uuid: None,
                service_type: Some(ServiceType::Agent),
            });
        }
        server.set_seeded(seeded);
        if let Some(r) = records.get_mut(&server.uuid) {
            r.setup = true;
            r.agents = agents;
        }
        report.servers_set_up += 1;
    }
    drop(records);
    drop(sapi);
    *core.seed_report.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
    core.touch();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::release_version;

    #[test]
    fn cn_agent_release_line() {
        // The simulator's 1.x line moves onto cn-agent's 2.x line, in order.
        assert_eq!(release_version("cn-agent", "1.0.0"), "2.9.0");
        assert_eq!(release_version("cn-agent", "1.1.0"), "2.10.0");
        // A version already on the real line is published as asked
        // (harnesses ask for 2.15.0, or 2.7.0 below the uninstall floor).
        assert_eq!(release_version("cn-agent", "2.15.0"), "2.15.0");
        assert_eq!(release_version("cn-agent", "2.7.0"), "2.7.0");
        assert_eq!(release_version("cn-agent", "3.1.4"), "3.1.4");
        // Other components keep theirs.
        assert_eq!(release_version("vm-agent", "1.0.0"), "1.0.0");
        assert_eq!(release_version("cn-agent", "not-semver"), "not-semver");
    }
}
