//! The names a package claims on the server: its `bin` links, the SMF
//! manifest files it writes and the SMF services those manifests declare.
//! A package runs as root; one that claimed another component's bin,
//! manifest or service (or a system service such as
//! `svc:/system/filesystem/local`) would replace or, at its removal,
//! delete what it does not own. So a staged version may claim only:
//! - names no other installed component claims;
//! - services in its own namespace: a service of its catalog entry, or one
//!   named after it with a `-suffix` (`smartdc/agent/vm-agent-setup`),
//!   unless a longer catalog name claims that (cn-agent-update belongs to
//!   cn-agent, never to a component named `cn`).
//!
//! Removal uses the same rules the other way round: it deletes only the
//! names its own footprint holds and no other installed component claims.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use agentsadm_types::catalog::Catalog;

use agentsadm_platform::PlatformError;
use agentsadm_platform::manifest::read_manifest_services;
use agentsadm_types::catalog::Component;

use super::super::paths::GzPaths;
use super::Footprint;
use super::StagedVersion;
use super::template_outputs;

/// Names a version claims (root-relative paths, `svc:/` service names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    pub bins: BTreeSet<String>,
    pub manifests: BTreeSet<String>,
    pub services: BTreeSet<String>,
}

/// A name a staged package may not claim.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "the {component} package claims the {what} {name}, which {owner} owns; use an image built for {component}"
    )]
    Taken {
        component: String,
        what: &'static str,
        name: String,
        owner: String,
    },
    #[error(
        "the {component} package{} declares the SMF service {service}, outside {component}'s services ({allowed}); use an image built for {component}",
        file.as_deref().map(|f| format!("'s SMF manifest {f}")).unwrap_or_default()
    )]
    OutsideNamespace {
        component: String,
        /// The manifest that declares it, when one file is checked.
        file: Option<String>,
        service: String,
        allowed: String,
    },
    #[error("the {component} package's SMF manifest {file} cannot be read")]
    Manifest {
        component: String,
        file: String,
        #[source]
        err: PlatformError,
    },
    #[error(
        "the {component} package's SMF manifest {file} is not a regular file (a link, or a directory); use an image built for {component}"
    )]
    NotAFile { component: String, file: String },
    #[error(
        "the {component} package's postinstall wrote {file}, {}; a manifest of {component} is named {package}.xml or {package}-*.xml in that directory, whose manifests are imported at every boot; use an image built for {component}",
        match owner { Some(o) => format!("which is {o}'s"), None => "which belongs to no component".to_string() }
    )]
    ForeignFile {
        component: String,
        package: String,
        file: String,
        owner: Option<String>,
    },
}

/// `svc:/smartdc/agent/vm-agent:default` -> `smartdc/agent/vm-agent`.
pub fn service_of(fmri: &str) -> &str {
    let s = fmri.strip_prefix("svc:/").unwrap_or(fmri);
    let s = s.strip_prefix('/').unwrap_or(s);
    match s.rfind(':') {
        Some(i) => &s[..i],
        None => s,
    }
}

/// The component whose namespace holds `service` (module docs), if any.
pub fn namespace_owner<'a>(catalog: &'a Catalog, service: &str) -> Option<&'a Component> {
    let service = service_of(service);
    let mut best: Option<(usize, &Component)> = None;
    for c in catalog.iter() {
        for own in &c.smf_services {
            let own = service_of(own);
            let hit = service == own
                || service
                    .strip_prefix(own)
                    .is_some_and(|rest| rest.starts_with('-'));
            if hit && best.is_none_or(|(len, _)| own.len() > len) {
                best = Some((own.len(), c));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// The component a manifest file in apm's SMF directory belongs to, by
/// its name: `<pkg>.xml` or `<pkg>-<anything>.xml` for a component's
/// package (or component) name, the longest such name winning, as for
/// services (`cn-agent-update.xml` is cn-agent's).
pub fn manifest_file_owner<'a>(catalog: &'a Catalog, file_name: &str) -> Option<&'a Component> {
    let stem = file_name.strip_suffix(".xml")?;
    let mut best: Option<(usize, &Component)> = None;
    for c in catalog.iter() {
        for own in [c.package_name(), c.name.as_str()] {
            if named_after(stem, own) && best.is_none_or(|(len, _)| own.len() > len) {
                best = Some((own.len(), c));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// Whether a manifest file stem is `name` or `name-<something>`.
pub fn named_after(stem: &str, name: &str) -> bool {
    !name.is_empty()
        && (stem == name
            || stem
                .strip_prefix(name)
                .is_some_and(|rest| rest.len() > 1 && rest.starts_with('-')))
}

/// Check one manifest that is about to be imported for `component`: a
/// regular file (never a link to another's), whose every service is in
/// `component`'s namespace and claimed by no other installed component.
/// Blocking (reads the file).
pub fn check_manifest(
    catalog: &Catalog,
    component: &Component,
    file: &std::path::Path,
    shown: &str,
    others: Option<&BTreeMap<String, Claims>>,
) -> Result<(), ClaimError> {
    let regular = std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_file());
    if !regular {
        return Err(ClaimError::NotAFile {
            component: component.name.to_string(),
            file: shown.to_string(),
        });
    }
    let services = read_manifest_services(file).map_err(|err| ClaimError::Manifest {
        component: component.name.to_string(),
        file: shown.to_string(),
        err,
    })?;
    let mine = Claims {
        services: services.into_iter().collect(),
        ..Claims::default()
    };
    check_services(catalog, component, &mine, Some(shown))?;
    check_taken(component, &mine, others.unwrap_or(&BTreeMap::new()))
}

/// Whether `fmri` is in `component`'s namespace.
pub fn in_namespace(catalog: &Catalog, component: &Component, fmri: &str) -> bool {
    namespace_owner(catalog, fmri).is_some_and(|c| c.name == component.name)
}

/// The services the manifest files `files` declare; a missing file
/// declares none.
fn services_in(
    files: impl IntoIterator<Item = PathBuf>,
) -> Result<BTreeSet<String>, (PathBuf, PlatformError)> {
    let mut out = BTreeSet::new();
    for file in files {
        match read_manifest_services(&file) {
            Ok(list) => out.extend(list),
            Err(PlatformError::Read { err, .. }) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err((file, err)),
        }
    }
    Ok(out)
}

/// What an installed version claims (its manifests as they are on disk; an
/// unreadable one claims nothing more than its file).
pub fn installed_claims(paths: &GzPaths, fp: &Footprint) -> Claims {
    Claims {
        bins: fp.links.iter().map(|l| l.path.clone()).collect(),
        manifests: fp.smf_manifests.iter().cloned().collect(),
        services: fp
            .smf_manifests
            .iter()
            .flat_map(|rel| services_in([paths.at(rel)]).unwrap_or_default())
            .collect(),
    }
}

/// What a staged version claims: for an apm package its templates (what
/// its manifests are rendered from), else the manifest files it lays.
fn staged_claims(component: &Component, staged: &StagedVersion) -> Result<Claims, ClaimError> {
    let fp = &staged.footprint;
    let mut files: Vec<PathBuf> = Vec::new();
    if let (true, Some(tree)) = (fp.apm, &staged.tree_src) {
        files.extend(
            template_outputs(tree)
                .unwrap_or_default()
                .into_iter()
                .map(|(t, _)| t),
        );
    }
    if let Some(root) = &staged.overlay_src {
        files.extend(fp.smf_manifests.iter().map(|rel| root.join(rel)));
    }
    let services = services_in(files).map_err(|(file, err)| ClaimError::Manifest {
        component: component.name.to_string(),
        file: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        err,
    })?;
    Ok(Claims {
        bins: fp.links.iter().map(|l| l.path.clone()).collect(),
        manifests: fp.smf_manifests.iter().cloned().collect(),
        services,
    })
}

/// Refuse a staged version of `component` that claims a name outside its
/// namespace or one that another installed component (`others`: name and
/// claims) holds.
pub fn check_staged(
    catalog: &Catalog,
    component: &Component,
    staged: &StagedVersion,
    others: &BTreeMap<String, Claims>,
) -> Result<(), ClaimError> {
    let mine = staged_claims(component, staged)?;
    check_services(catalog, component, &mine, None)?;
    check_taken(component, &mine, others)
}

/// Every service of `mine` is in `component`'s namespace.
fn check_services(
    catalog: &Catalog,
    component: &Component,
    mine: &Claims,
    file: Option<&str>,
) -> Result<(), ClaimError> {
    for service in &mine.services {
        if !in_namespace(catalog, component, service) {
            let allowed = component
                .smf_services
                .iter()
                .map(|s| format!("svc:/{}[-*]", service_of(s)))
                .collect::<Vec<_>>();
            return Err(ClaimError::OutsideNamespace {
                component: component.name.to_string(),
                file: file.map(str::to_string),
                service: service.clone(),
                allowed: if allowed.is_empty() {
                    "it has none".to_string()
                } else {
                    allowed.join(", ")
                },
            });
        }
    }
    Ok(())
}

/// No name of `mine` is another installed component's.
fn check_taken(
    component: &Component,
    mine: &Claims,
    others: &BTreeMap<String, Claims>,
) -> Result<(), ClaimError> {
    let taken = |what: &'static str, name: &String, owner: &String| ClaimError::Taken {
        component: component.name.to_string(),
        what,
        name: name.clone(),
        owner: owner.clone(),
    };
    for (owner, theirs) in others.iter().filter(|(n, _)| **n != component.name) {
        if let Some(b) = mine.bins.intersection(&theirs.bins).next() {
            return Err(taken("bin", b, owner));
        }
        if let Some(m) = mine.manifests.intersection(&theirs.manifests).next() {
            return Err(taken("SMF manifest", m, owner));
        }
        if let Some(s) = mine.services.intersection(&theirs.services).next() {
            return Err(taken("SMF service", s, owner));
        }
    }
    Ok(())
}

/// `fp` without the names another installed component claims (what a
/// removal or an upgrade of `fp`'s component may delete).
pub fn own_part(fp: &Footprint, others: &BTreeMap<String, Claims>) -> Footprint {
    let claimed = |pick: fn(&Claims) -> &BTreeSet<String>, name: &str| {
        others.values().any(|c| pick(c).contains(name))
    };
    let mut out = fp.clone();
    out.links.retain(|l| !claimed(|c| &c.bins, &l.path));
    out.smf_manifests.retain(|m| !claimed(|c| &c.manifests, m));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_follow_the_catalog() {
        let cat = Catalog::builtin();
        let vm = cat.get("vm-agent").unwrap();
        let cn = cat.get("cn-agent").unwrap();
        assert!(in_namespace(
            &cat,
            vm,
            "svc:/smartdc/agent/vm-agent:default"
        ));
        assert!(in_namespace(
            &cat,
            vm,
            "svc:/smartdc/agent/vm-agent-setup:default"
        ));
        assert!(in_namespace(&cat, vm, "svc:/smartdc/agent/vm-agent-setup"));
        assert!(!in_namespace(
            &cat,
            vm,
            "svc:/smartdc/agent/vm-agentx:default"
        ));
        assert!(!in_namespace(
            &cat,
            vm,
            "svc:/system/filesystem/local:default"
        ));
        assert!(!in_namespace(
            &cat,
            vm,
            "svc:/smartdc/agent/net-agent:default"
        ));
        assert!(in_namespace(
            &cat,
            cn,
            "svc:/smartdc/agent/cn-agent-update:default"
        ));
        assert!(!in_namespace(
            &cat,
            cat.get("gz-tools").unwrap(),
            "svc:/smartdc/agent/gz-tools:default"
        ));
    }

    #[test]
    fn versions_are_validated() {
        use super::super::valid_version;
        assert!(valid_version("1.2.3-master-20261122T000000Z-g1234567"));
        for bad in ["", "1\"/><x", "1 2", "1&2", &"9".repeat(129)] {
            assert!(!valid_version(bad), "{bad}");
        }
    }
}
