//! Registrations: how the components that are not apm agents (agentsadm,
//! gz-tools, dockerlogger, sdcadm) stay in CNAPI's `server.agents` when
//! the real cn-agent rewrites it.
//!
//! cn-agent's `refreshAgents` (after every `agent_install` and
//! `agents_uninstall` task, and when it starts) replaces `server.agents`
//! with what it finds under `/opt/smartdc/agents/lib/node_modules`
//! (docs/triton/agent-install.md §3.6): every directory there with its
//! `image_uuid`, its `package.json` version (through sysinfo's
//! `SDC Agents`) and the instance UUID in `etc/<dir>`. A component
//! installed anywhere else drops out of `server.agents` at the next task,
//! and the headnode then takes a server that has agentsadm for one that
//! has none. RFD 82 asks for these components in `server.agents` without
//! a change to cn-agent; this module gives each one a directory there
//! that cn-agent, sysinfo and sdcadm read as they read an agent's:
//! `node_modules/<name>/{package.json,image_uuid}`, nothing else (no
//! scripts, no bins: apm and cn-agent have nothing to run in it).
//!
//! Rules the readers impose:
//! - cn-agent fails the whole refresh if one directory there has no
//!   readable `image_uuid`, so a new registration appears whole: it is
//!   written in agentsadm's staging directory (same filesystem) and renamed
//!   in; a component whose image is unknown gets none.
//! - cn-agent lists `node_modules` first and reads each entry afterwards,
//!   so an entry that is absent for an instant (renamed aside, the new one
//!   not yet in) fails a refresh that listed it. Replacing one therefore
//!   keeps its directory and renames each file over the old one (atomic on
//!   illumos and Linux alike): a reader gets the old file or the new one,
//!   never none (0 failed refreshes in 20,000 beside a swapping loop,
//!   where renaming the directory aside and a new one in failed 87). A
//!   reader may pair the new `package.json` with the old `image_uuid` for
//!   an instant, as cn-agent itself pairs sysinfo's earlier read of the
//!   versions with its later read of the images. Not a symlink flip:
//!   sysinfo's `find node_modules -maxdepth 2 -name package.json` does not
//!   descend into a link, so the component would drop out of `SDC
//!   Agents`, and then out of `server.agents`. A run killed between the
//!   two renames leaves a registration the next sync rewrites. Removing
//!   one is still a rename aside: an entry that goes away can always meet
//!   a refresh that listed it (as apm's own removals do).
//! - Only a directory carrying [`MARKER`] is agentsadm's to replace or
//!   remove; anything else of that name is left alone and said.
//!
//! The registration follows the installed state, not the other way round:
//! [`sync`] runs after every locked run that may have changed what is
//! installed, so a registration a killed run left stale is corrected by
//! the next one. `gz report` reads the installed state itself (the
//! records), never the registrations.

use agentsadm_types::component::ComponentName;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::json;

use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;

use super::fsutil;
use super::kinds;
use super::paths::GzPaths;

/// The `package.json` key that marks a registration as agentsadm's.
pub const MARKER: &str = "agentsadm_registration";

/// The version a registration carries when the server cannot tell it
/// (never empty: see [`wanted`]).
pub const UNKNOWN_VERSION: &str = "unknown";

/// What a registration says of its component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub name: ComponentName,
    pub version: String,
    pub image_uuid: ImageUuid,
}

/// Why a registration could not be brought in line with what is installed
/// (the install itself stands; `server.agents` may lack the component
/// until the next locked run).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error(
        "{path} is not agentsadm's registration of {component} (its package.json has no {MARKER}); left as it is, so cn-agent reports what it holds"
    )]
    NotOurs { component: String, path: PathBuf },
    #[error("cannot {action} the registration of {component} at {path}")]
    Io {
        component: String,
        action: &'static str,
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

/// Whether `dir` (a `node_modules` entry) is the registration of a
/// component the catalog knows is not an apm agent: such an entry is
/// reported from the installed state, not as an agent.
pub fn is_registration(catalog: &Catalog, dir_name: &str) -> bool {
    catalog
        .get(dir_name)
        .is_some_and(|c| c.kind != ComponentKind::ApmAgent)
}

/// The registration `component` should have now: one when it is installed
/// from a known image, none otherwise. Blocking.
pub fn wanted(paths: &GzPaths, component: &Component) -> Option<Registration> {
    let fp = kinds::current(paths, component).ok().flatten()?;
    // An empty version makes `sdcadm insts` run `imgadm get` on every such
    // server at once to find it (sdcadm.md §4.4): gz-tools installed or
    // replaced by Triton's tools has a known image and no readable version.
    let version = match fp.version.is_empty() {
        true => UNKNOWN_VERSION.to_string(),
        false => fp.version,
    };
    Some(Registration {
        name: component.name.clone(),
        version,
        image_uuid: fp.image_uuid?,
    })
}

/// What the registration directory of `name` holds, if it is agentsadm's
/// and whole. Blocking.
pub fn read(paths: &GzPaths, name: &str) -> Option<Registration> {
    let dir = paths.node_modules().join(name);
    if !is_ours(&dir) {
        return None;
    }
    let package = read_package(&dir)?;
    Some(Registration {
        name: package.get("name")?.as_str()?.parse().ok()?,
        version: package
            .get("version")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        image_uuid: fsutil::read_trimmed(&dir.join("image_uuid"))
            .ok()??
            .parse()
            .ok()?,
    })
}

/// Bring every non-apm component's registration in line with what is
/// installed. Blocking; the caller holds the server lock. Returns what it
/// could not do (each one a warning for the run's result).
pub fn sync(paths: &GzPaths, catalog: &Catalog) -> Vec<RegistrationError> {
    let mut problems = Vec::new();
    for c in catalog.iter().filter(|c| c.kind != ComponentKind::ApmAgent) {
        let wanted = wanted(paths, c);
        let dir = paths.node_modules().join(&c.name);
        let present = fs::symlink_metadata(&dir).is_ok();
        if present && !is_ours(&dir) {
            // Not ours: say so only when we would have written one.
            if wanted.is_some() {
                problems.push(RegistrationError::NotOurs {
                    component: c.name.to_string(),
                    path: dir,
                });
            }
            continue;
        }
        let result = match (&wanted, present) {
            (Some(w), _) if read(paths, &c.name).as_ref() == Some(w) => Ok(()),
            (Some(w), _) => write(paths, w),
            (None, true) => remove(paths, &c.name),
            (None, false) => Ok(()),
        };
        if let Err(e) = result {
            problems.push(e);
        }
    }
    problems
}

/// Write `reg`: staged beside `node_modules` (same filesystem), then a new
/// registration's directory is renamed in whole, and an existing one keeps
/// its directory while each of its two files is renamed over the old one
/// (module docs: a reader never meets it absent or partial).
fn write(paths: &GzPaths, reg: &Registration) -> Result<(), RegistrationError> {
    let io_err = |action: &'static str, path: &Path| {
        let (component, path) = (reg.name.to_string(), path.to_path_buf());
        move |err| RegistrationError::Io {
            component,
            action,
            path,
            err,
        }
    };
    let staged = paths
        .staging_dir()
        .join(format!("registration-{}", reg.name));
    fsutil::remove_any(&staged).map_err(io_err("clear the staged copy of", &staged))?;
    fs::create_dir_all(&staged).map_err(io_err("stage", &staged))?;
    let package = json!({
        "name": reg.name,
        "version": reg.version,
        "description": format!(
            "{} as agentsadm installed it, registered here so that cn-agent and sysinfo report it; not an apm package",
            reg.name
        ),
        "private": true,
        MARKER: {"component": reg.name, "see": "agentsadm gz report"},
    });
    let body = serde_json::to_vec_pretty(&package).expect("a JSON value serialises");
    fs::write(staged.join("package.json"), body).map_err(io_err("stage", &staged))?;
    fs::write(staged.join("image_uuid"), format!("{}\n", reg.image_uuid))
        .map_err(io_err("stage", &staged))?;
    let dir = paths.node_modules().join(&reg.name);
    if is_ours(&dir) {
        // The image first: a run killed between the two renames leaves a
        // registration that differs from the wanted one, which the next
        // sync rewrites; never one without a file.
        for file in ["image_uuid", "package.json"] {
            let to = dir.join(file);
            fs::rename(staged.join(file), &to).map_err(io_err("replace", &to))?;
        }
        let _ = fsutil::fsync_dir(&dir);
        let _ = fs::remove_dir(&staged);
    } else {
        fs::create_dir_all(paths.node_modules())
            .map_err(io_err("create", &paths.node_modules()))?;
        fs::rename(&staged, &dir).map_err(io_err("rename into place", &dir))?;
        let _ = fsutil::fsync_dir(&paths.node_modules());
    }
    // Leave no empty staging directory behind (one a transaction uses is
    // not empty, and stays).
    let _ = fs::remove_dir(paths.staging_dir());
    Ok(())
}

/// Remove the registration of `name` (renamed out first, so no half-removed
/// directory is ever seen there).
fn remove(paths: &GzPaths, name: &str) -> Result<(), RegistrationError> {
    let dir = paths.node_modules().join(name);
    set_aside(paths, name, &dir)
}

/// Rename `dir` into the trash and delete it there.
fn set_aside(paths: &GzPaths, name: &str, dir: &Path) -> Result<(), RegistrationError> {
    let aside = paths.trash_dir().join(format!(
        "registration-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let err = |action: &'static str, path: &Path| {
        let (component, path) = (name.to_string(), path.to_path_buf());
        move |err| RegistrationError::Io {
            component,
            action,
            path,
            err,
        }
    };
    fs::create_dir_all(paths.trash_dir()).map_err(err("create", &paths.trash_dir()))?;
    fs::rename(dir, &aside).map_err(err("set aside", dir))?;
    // Out of cn-agent's sight now; a failure to delete only leaves trash.
    let _ = fsutil::remove_any(&aside);
    Ok(())
}

/// A registration of ours is a real directory (never a link, which the
/// readers would follow and agentsadm must not) whose package.json carries
/// [`MARKER`].
fn is_ours(dir: &Path) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && read_package(dir).is_some_and(|p| p.get(MARKER).is_some())
}

fn read_package(dir: &Path) -> Option<serde_json::Value> {
    let bytes = crate::fsutil::read_small(dir.join("package.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::catalog::Catalog;

    fn agentsadm_installed(root: &Path, image: ImageUuid, version: &str) {
        let dir = root.join(kinds::AGENTSADM_DIR);
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::write(dir.join("bin/agentsadm"), b"#!/bin/sh\n").unwrap();
        fs::write(dir.join("image_uuid"), format!("{image}\n")).unwrap();
        fs::write(
            dir.join("package.json"),
            format!(r#"{{"name":"agentsadm","version":"{version}"}}"#),
        )
        .unwrap();
    }

    /// gz-tools as Triton's tools leave it (only `etc/gz-tools.image`):
    /// registered with its image and a version that is not empty (sdcadm
    /// would otherwise run `imgadm get` on every such server at once).
    #[test]
    fn gz_tools_of_unknown_version_is_never_registered_with_an_empty_one() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(tmp.path());
        let marker = paths.at("opt/smartdc/etc/gz-tools.image");
        fs::create_dir_all(marker.parent().unwrap()).unwrap();
        let image = ImageUuid::from_u128(7);
        fs::write(&marker, format!("{image}\n")).unwrap();
        assert!(sync(&paths, &Catalog::builtin()).is_empty());
        let reg = read(&paths, "gz-tools").unwrap();
        assert_eq!(
            (reg.version.as_str(), reg.image_uuid),
            (UNKNOWN_VERSION, image)
        );
    }

    #[test]
    fn sync_registers_replaces_and_removes_whole_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(tmp.path());
        let catalog = Catalog::builtin();
        let one = ImageUuid::from_u128(1);
        agentsadm_installed(tmp.path(), one, "1.0.0");
        assert!(sync(&paths, &catalog).is_empty());
        let reg = read(&paths, "agentsadm").unwrap();
        assert_eq!((reg.version.as_str(), reg.image_uuid), ("1.0.0", one));
        // Exactly what cn-agent and sysinfo read, nothing to run.
        let mut files: Vec<String> = fs::read_dir(paths.node_modules().join("agentsadm"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["image_uuid", "package.json"]);

        let two = ImageUuid::from_u128(2);
        agentsadm_installed(tmp.path(), two, "1.1.0");
        assert!(sync(&paths, &catalog).is_empty());
        assert_eq!(read(&paths, "agentsadm").unwrap().image_uuid, two);

        fs::remove_dir_all(tmp.path().join(kinds::AGENTSADM_DIR)).unwrap();
        assert!(sync(&paths, &catalog).is_empty());
        assert!(!paths.node_modules().join("agentsadm").exists());
        // Nothing staged or set aside is left in node_modules, nor an
        // empty staging directory.
        assert_eq!(fs::read_dir(paths.node_modules()).unwrap().count(), 0);
        assert!(!paths.staging_dir().exists());
    }

    #[test]
    fn a_directory_that_is_not_ours_is_left_alone_and_said() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(tmp.path());
        agentsadm_installed(tmp.path(), ImageUuid::from_u128(1), "1.0.0");
        let theirs = paths.node_modules().join("agentsadm");
        fs::create_dir_all(&theirs).unwrap();
        fs::write(theirs.join("package.json"), br#"{"name":"agentsadm"}"#).unwrap();
        let problems = sync(&paths, &Catalog::builtin());
        assert!(
            matches!(&problems[..], [RegistrationError::NotOurs { component, .. }] if component == "agentsadm"),
            "{problems:?}"
        );
        assert_eq!(
            fs::read(theirs.join("package.json")).unwrap(),
            br#"{"name":"agentsadm"}"#
        );
        assert!(!theirs.join("image_uuid").exists());
    }

    #[test]
    fn a_link_in_its_place_is_left_alone_and_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&outside).unwrap();
        // Even one that looks like a registration of ours.
        let planted = format!(r#"{{"name":"agentsadm","version":"0.0.1","{MARKER}":{{}}}}"#);
        fs::write(outside.join("package.json"), &planted).unwrap();
        fs::write(outside.join("image_uuid"), "nope\n").unwrap();
        let paths = GzPaths::new(&root);
        agentsadm_installed(&root, ImageUuid::from_u128(1), "1.0.0");
        fs::create_dir_all(paths.node_modules()).unwrap();
        let link = paths.node_modules().join("agentsadm");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        for installed in [true, false] {
            if !installed {
                fs::remove_dir_all(root.join(kinds::AGENTSADM_DIR)).unwrap();
            }
            let problems = sync(&paths, &Catalog::builtin());
            assert_eq!(
                problems.len(),
                usize::from(installed),
                "said only when one was wanted: {problems:?}"
            );
            assert_eq!(read(&paths, "agentsadm"), None);
            assert_eq!(fs::read_link(&link).unwrap(), outside);
            assert_eq!(
                fs::read_to_string(outside.join("package.json")).unwrap(),
                planted
            );
            assert_eq!(
                fs::read_to_string(outside.join("image_uuid")).unwrap(),
                "nope\n"
            );
            assert_eq!(fs::read_dir(&outside).unwrap().count(), 2);
        }
    }

    /// One refresh as cn-agent's `refreshAgents` and sysinfo read
    /// `node_modules`: the entries, then each one's `package.json` and
    /// `image_uuid`. Any entry that cannot be read fails the whole refresh.
    pub(crate) fn refresh_like_cn_agent(node_modules: &Path) -> Result<usize, String> {
        let names: Vec<_> = fs::read_dir(node_modules)
            .map_err(|e| format!("readdir: {e}"))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("readdir: {e}"))?;
        for name in &names {
            let dir = node_modules.join(name);
            let package = fs::read(dir.join("package.json"))
                .map_err(|e| format!("{}/package.json: {e}", dir.display()))?;
            serde_json::from_slice::<serde_json::Value>(&package)
                .map_err(|e| format!("{}/package.json: {e}", dir.display()))?;
            let image = fs::read_to_string(dir.join("image_uuid"))
                .map_err(|e| format!("{}/image_uuid: {e}", dir.display()))?;
            image
                .trim()
                .parse::<ImageUuid>()
                .map_err(|e| format!("{}/image_uuid: {e}", dir.display()))?;
        }
        Ok(names.len())
    }

    /// `refreshes` refreshes while `swap` runs in a loop beside them:
    /// (failed refreshes, swaps done meanwhile, the first failure).
    pub(crate) fn stress(
        node_modules: &Path,
        refreshes: usize,
        mut swap: impl FnMut(u64) + Send,
    ) -> (usize, u64, Option<String>) {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let swapper = scope.spawn(|| {
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    swap(n);
                    n += 1;
                }
                n
            });
            let mut failures = 0;
            let mut first = None;
            for _ in 0..refreshes {
                if let Err(e) = refresh_like_cn_agent(node_modules) {
                    failures += 1;
                    first.get_or_insert(e);
                }
            }
            done.store(true, Ordering::Relaxed);
            (failures, swapper.join().unwrap(), first)
        })
    }

    #[test]
    fn a_concurrent_cn_agent_refresh_never_sees_a_registration_mid_swap() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(tmp.path());
        // Two apm agents beside the registration, as on a server.
        for (name, n) in [("vm-agent", 10), ("cn-agent", 11)] {
            let dir = paths.node_modules().join(name);
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("package.json"),
                format!(r#"{{"name":"{name}","version":"1.0.0"}}"#),
            )
            .unwrap();
            fs::write(
                dir.join("image_uuid"),
                format!("{}\n", ImageUuid::from_u128(n)),
            )
            .unwrap();
        }
        let reg = |n: u64| Registration {
            name: "agentsadm".parse().unwrap(),
            version: format!("1.{}.0", n % 2),
            image_uuid: ImageUuid::from_u128(u128::from(n % 2) + 1),
        };
        write(&paths, &reg(0)).unwrap();
        let (failures, swaps, first) = stress(&paths.node_modules(), 20_000, |n| {
            write(&paths, &reg(n + 1)).unwrap()
        });
        println!("registration swaps: {failures} of 20000 refreshes failed during {swaps} swaps");
        assert!(swaps > 0);
        assert_eq!(failures, 0, "{swaps} swaps; first failure: {first:?}");
        assert_eq!(
            read(&paths, "agentsadm").unwrap().image_uuid,
            reg(swaps).image_uuid
        );
    }

    #[test]
    fn a_component_of_unknown_image_gets_no_registration() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = GzPaths::new(tmp.path());
        // A copy CN setup fetched alone: a binary, no image_uuid.
        let bin = tmp.path().join(kinds::AGENTSADM_BIN);
        fs::create_dir_all(bin.parent().unwrap()).unwrap();
        fs::write(&bin, b"#!/bin/sh\n").unwrap();
        assert!(sync(&paths, &Catalog::builtin()).is_empty());
        assert!(!paths.node_modules().join("agentsadm").exists());
    }
}
