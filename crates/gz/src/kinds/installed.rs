//! What is installed now for a component of a Triton GZ, read back: apm
//! agents from their tree, the other kinds from agentsadm's record, or, for
//! what Triton's own tools installed, from what can be told without one.

use agentsadm_types::component::ComponentName;
use std::fs;
use std::io;
use std::path::PathBuf;

use agentsadm_types::catalog::Component;

use agentsadm_types::catalog::ComponentKind;

use super::super::fsutil;
use super::super::package::PackageJson;
use super::super::paths::GzPaths;
use super::Footprint;
use super::InstalledRecord;
use super::Link;
use super::record_rel;
use super::template_outputs;

/// What is installed now for `component`, if anything.
pub fn current(paths: &GzPaths, component: &Component) -> Result<Option<Footprint>, CurrentError> {
    match component.kind {
        ComponentKind::ApmAgent => {
            let pkg = component.package_name();
            let dir = paths.node_modules().join(pkg);
            if !dir.is_dir() {
                return Ok(None);
            }
            let image = fsutil::read_trimmed(&dir.join("image_uuid"))
                .ok()
                .flatten()
                .and_then(|s| s.parse().ok());
            let package = PackageJson::read(&dir).ok().flatten();
            let links = package
                .as_ref()
                .map(|p| {
                    p.bin
                        .iter()
                        .map(|(name, path)| Link {
                            path: format!("opt/smartdc/agents/bin/{name}"),
                            target: format!(
                                "../lib/node_modules/{pkg}/{}",
                                super::super::package::clean_relative(path)
                            ),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut smf_manifests: Vec<String> = template_outputs(&dir)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, o)| o)
                .collect();
            smf_manifests.extend(named_manifests(paths, component));
            smf_manifests.sort();
            smf_manifests.dedup();
            Ok(Some(Footprint {
                image_uuid: image,
                version: package.map(|p| p.version).unwrap_or_default(),
                tree: Some(paths.rel(&dir)),
                overlay: Vec::new(),
                links,
                smf_manifests,
                apm: true,
            }))
        }
        _ => {
            if let Some(rec) = read_record(paths, &component.name)? {
                let replaced = replaced_by_sdcadm(paths, component.kind, &rec);
                return Ok(Some(replaced.unwrap_or(rec.footprint)));
            }
            // Installed by Triton's own tools: what we can tell without a record.
            match component.kind {
                ComponentKind::Sdcadm => {
                    let dir = paths.at("opt/smartdc/sdcadm");
                    if !dir.is_dir() {
                        return Ok(None);
                    }
                    let image = fsutil::read_trimmed(&dir.join("image_uuid"))
                        .ok()
                        .flatten()
                        .and_then(|s| s.parse().ok());
                    let version = fsutil::read_trimmed(&dir.join("etc/buildstamp"))
                        .ok()
                        .flatten()
                        .or_else(|| PackageJson::read(&dir).ok().flatten().map(|p| p.version))
                        .unwrap_or_default();
                    let mut links = Vec::new();
                    for (p, t) in [
                        ("opt/smartdc/bin/sdcadm", "../sdcadm/bin/sdcadm"),
                        (
                            "opt/smartdc/man/man1/sdcadm.1",
                            "../../sdcadm/man/man1/sdcadm.1",
                        ),
                    ] {
                        if fsutil::exists(&paths.at(p)) {
                            links.push(Link {
                                path: p.into(),
                                target: t.into(),
                            });
                        }
                    }
                    let mut overlay = Vec::new();
                    let site = "var/svc/manifest/site/sdcadm-setup.xml";
                    if paths.at(site).exists() {
                        overlay.push(site.to_string());
                    }
                    Ok(Some(Footprint {
                        image_uuid: image,
                        version,
                        tree: Some("opt/smartdc/sdcadm".into()),
                        smf_manifests: overlay.clone(),
                        overlay,
                        links,
                        apm: false,
                    }))
                }
                ComponentKind::GzTools => {
                    let marker = paths.at("opt/smartdc/etc/gz-tools.image");
                    let image = fsutil::read_trimmed(&marker).ok().flatten();
                    Ok(image.map(|i| Footprint {
                        image_uuid: i.parse().ok(),
                        ..Default::default()
                    }))
                }
                ComponentKind::Dockerlogger => {
                    let bin = paths.at("opt/smartdc/docker/bin/dockerlogger");
                    Ok(bin.exists().then(Footprint::default))
                }
                ComponentKind::Agentsadm => Ok(unrecorded_agentsadm(paths)),
                ComponentKind::ApmAgent => Ok(None),
            }
        }
    }
}

/// What sdcadm left in place of what agentsadm installed, when it replaced
/// it behind agentsadm's record: `sdcadm self-update` swaps
/// `opt/smartdc/sdcadm` (another `etc/buildstamp`), `sdcadm experimental
/// update-gz-tools` lays new files over `opt/smartdc` (another
/// `etc/gz-tools.image`). The disk wins over the record; the files are
/// the record's (the same paths). `None`: the record still holds. These
/// are one-line files read whole (issue 32 bounds every read).
fn replaced_by_sdcadm(
    paths: &GzPaths,
    kind: ComponentKind,
    rec: &InstalledRecord,
) -> Option<Footprint> {
    match kind {
        ComponentKind::GzTools => {
            let marker = paths.at("opt/smartdc/etc/gz-tools.image");
            let on_disk = fsutil::read_trimmed(&marker).ok()??.parse().ok()?;
            (on_disk != rec.image_uuid).then(|| Footprint {
                image_uuid: Some(on_disk),
                // What the new image's version is, the server cannot tell.
                version: String::new(),
                ..rec.footprint.clone()
            })
        }
        ComponentKind::Sdcadm => {
            let dir = paths.at("opt/smartdc/sdcadm");
            let stamp = fsutil::read_trimmed(&dir.join("etc/buildstamp"))
                .ok()
                .flatten()?;
            let replaced = match &rec.buildstamp {
                Some(installed) => *installed != stamp,
                // A record from before the stamp was kept: the package's
                // version is all there is to compare.
                None => PackageJson::read(&dir)
                    .ok()
                    .flatten()
                    .is_some_and(|p| !rec.version.starts_with(&p.version)),
            };
            replaced.then(|| Footprint {
                image_uuid: fsutil::read_trimmed(&dir.join("image_uuid"))
                    .ok()
                    .flatten()
                    .and_then(|s| s.parse().ok()),
                version: stamp,
                ..rec.footprint.clone()
            })
        }
        _ => None,
    }
}

/// The manifests in apm's SMF directory named after `component`
/// (`<pkg>.xml`, `<pkg>-*.xml`): the ones its postinstall wrote beyond its
/// templates are its own too, imported with it and removed with it
/// ([`super::claims::manifest_file_owner`]; a removal still leaves what
/// another installed component claims).
fn named_manifests(paths: &GzPaths, component: &Component) -> Vec<String> {
    let Ok(rd) = fs::read_dir(paths.smf_dir()) else {
        return Vec::new();
    };
    let mut out: Vec<String> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".xml")?;
            let ours = super::claims::named_after(stem, component.package_name())
                || super::claims::named_after(stem, &component.name);
            ours.then(|| paths.rel(&e.path()))
        })
        .collect();
    out.sort();
    out
}

/// agentsadm installed without a record: the binary CN setup
/// (`installer/agentsetup.sh`) fetched alone, or a copy put there by hand.
/// Its files are what the directory holds; its image and version are the
/// ones its `image_uuid` and `package.json` name, when it has them (a
/// release tarball unpacked there by hand), else unknown (an upgrade
/// replaces it all the same).
fn unrecorded_agentsadm(paths: &GzPaths) -> Option<Footprint> {
    let dir = paths.at(super::AGENTSADM_DIR);
    if !fsutil::exists(&paths.at(super::AGENTSADM_BIN)) {
        return None;
    }
    let image_uuid = fsutil::read_trimmed(&dir.join("image_uuid"))
        .ok()
        .flatten()
        .and_then(|s| s.parse().ok());
    let version = PackageJson::read(&dir)
        .ok()
        .flatten()
        .filter(|p| p.name == "agentsadm")
        .map(|p| p.version)
        .unwrap_or_default();
    let overlay = super::overlay_files(&dir)
        .unwrap_or_default()
        .into_iter()
        .map(|rel| format!("{}/{rel}", super::AGENTSADM_DIR))
        .collect();
    let (link, target) = super::AGENTSADM_LINK;
    let links = match fs::read_link(paths.at(link)) {
        Ok(t) if t == std::path::Path::new(target) => vec![Link {
            path: link.into(),
            target: target.into(),
        }],
        _ => Vec::new(),
    };
    Some(Footprint {
        image_uuid,
        version,
        overlay,
        links,
        ..Footprint::default()
    })
}

/// A record that exists but cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the install record {path} is unreadable; remove it and reinstall the component")]
pub struct CurrentError {
    pub path: PathBuf,
    #[source]
    pub err: io::Error,
}

/// Read `.agentsadm/installed/<name>.json`.
pub fn read_record(
    paths: &GzPaths,
    name: &ComponentName,
) -> Result<Option<InstalledRecord>, CurrentError> {
    let path = paths.at(record_rel(name));
    match crate::fsutil::read_small(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| CurrentError {
                path,
                err: io::Error::new(io::ErrorKind::InvalidData, e),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(CurrentError { path, err }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::catalog::Catalog;
    use agentsadm_types::ids::ImageUuid;

    fn image(n: u128) -> ImageUuid {
        ImageUuid::from_u128(n)
    }

    fn put(paths: &GzPaths, rel: &str, text: &str) {
        let p = paths.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A record as agentsadm's install writes it.
    fn record(paths: &GzPaths, name: &str, img: ImageUuid, version: &str, stamp: Option<&str>) {
        let catalog = Catalog::builtin();
        let c = catalog.get(name).unwrap();
        let rec = InstalledRecord {
            name: name.to_string(),
            kind: c.kind,
            image_uuid: img,
            version: version.to_string(),
            sha256: String::new(),
            footprint: Footprint {
                image_uuid: Some(img),
                version: version.to_string(),
                ..Default::default()
            },
            buildstamp: stamp.map(str::to_string),
        };
        put(
            paths,
            &record_rel(&c.name),
            &serde_json::to_string(&rec).unwrap(),
        );
    }

    fn now(paths: &GzPaths, name: &str) -> Footprint {
        let catalog = Catalog::builtin();
        current(paths, catalog.get(name).unwrap()).unwrap().unwrap()
    }

    #[test]
    fn gz_tools_replaced_by_sdcadm_is_reported_as_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(dir.path());
        record(&paths, "gz-tools", image(1), "1.0.0", None);
        put(
            &paths,
            "opt/smartdc/etc/gz-tools.image",
            &format!("{}\n", image(1)),
        );
        assert_eq!(now(&paths, "gz-tools").image_uuid, Some(image(1)));
        assert_eq!(now(&paths, "gz-tools").version, "1.0.0");
        // sdcadm experimental update-gz-tools: a new marker, same record.
        put(
            &paths,
            "opt/smartdc/etc/gz-tools.image",
            &format!("{}\n", image(2)),
        );
        let fp = now(&paths, "gz-tools");
        assert_eq!(fp.image_uuid, Some(image(2)));
        assert_eq!(
            fp.version, "",
            "the record's version is not the new image's"
        );
    }

    #[test]
    fn sdcadm_self_updated_is_reported_as_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(dir.path());
        let stamp = "1.39.0-20240424T000000Z-g7fb53d9";
        record(&paths, "sdcadm", image(1), "1.39.0", Some(stamp));
        put(
            &paths,
            "opt/smartdc/sdcadm/etc/buildstamp",
            &format!("{stamp}\n"),
        );
        put(
            &paths,
            "opt/smartdc/sdcadm/package.json",
            r#"{"name":"sdcadm","version":"1.39.0"}"#,
        );
        assert_eq!(now(&paths, "sdcadm").version, "1.39.0");
        assert_eq!(now(&paths, "sdcadm").image_uuid, Some(image(1)));
        // sdcadm self-update: same package version, a new build.
        let newer = "1.39.0-20240601T000000Z-gabcdef0";
        put(
            &paths,
            "opt/smartdc/sdcadm/etc/buildstamp",
            &format!("{newer}\n"),
        );
        let fp = now(&paths, "sdcadm");
        assert_eq!((fp.version.as_str(), fp.image_uuid), (newer, None));
    }

    #[test]
    fn a_record_without_a_stamp_tells_self_update_by_the_package_version() {
        let dir = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(dir.path());
        record(&paths, "sdcadm", image(1), "1.39.0", None);
        put(
            &paths,
            "opt/smartdc/sdcadm/etc/buildstamp",
            "1.39.0-20240424T000000Z-g7fb53d9\n",
        );
        put(
            &paths,
            "opt/smartdc/sdcadm/package.json",
            r#"{"name":"sdcadm","version":"1.39.0"}"#,
        );
        assert_eq!(now(&paths, "sdcadm").version, "1.39.0");
        put(
            &paths,
            "opt/smartdc/sdcadm/etc/buildstamp",
            "1.40.0-20240701T000000Z-g1111111\n",
        );
        put(
            &paths,
            "opt/smartdc/sdcadm/package.json",
            r#"{"name":"sdcadm","version":"1.40.0"}"#,
        );
        assert_eq!(
            now(&paths, "sdcadm").version,
            "1.40.0-20240701T000000Z-g1111111"
        );
    }
}
