//! The service instances an SMF manifest defines: what the rooted platform
//! imports and what the transaction snapshots before it changes services.
//!
//! A small scanner, not an XML parser: it reads `<service name=...>` and the
//! `<create_default_instance enabled=...>` / `<instance name=... enabled=...>`
//! elements inside it, which is all an agent manifest uses.

use std::path::Path;

use super::PlatformError;

/// One service instance a manifest defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestInstance {
    pub fmri: String,
    /// `create_default_instance enabled=` / `instance enabled=`.
    pub enabled: bool,
}

/// Why a manifest's text is not one the scanner understands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("no <service_bundle> element")]
    NoBundle,
    #[error("no <service> element")]
    NoService,
    #[error("unterminated <service> tag")]
    UnterminatedService,
    #[error("a <service> element has no name")]
    UnnamedService,
    #[error("create_default_instance has no enabled=")]
    DefaultInstanceWithoutEnabled,
    #[error("an <instance> element has no name")]
    UnnamedInstance,
}

/// Find the service instances an SMF manifest defines.
pub fn manifest_instances(xml: &str) -> Result<Vec<ManifestInstance>, ManifestError> {
    if !xml.contains("<service_bundle") {
        return Err(ManifestError::NoBundle);
    }
    let mut out = Vec::new();
    let mut rest = xml;
    let mut services = 0;
    while let Some(start) = rest.find("<service ") {
        let after = &rest[start..];
        let tag_end = after.find('>').ok_or(ManifestError::UnterminatedService)?;
        let tag = &after[..tag_end];
        let name = attr(tag, "name").ok_or(ManifestError::UnnamedService)?;
        let body_end = after.find("</service>").unwrap_or(after.len());
        let body = &after[tag_end..body_end];
        services += 1;
        if let Some(pos) = body.find("<create_default_instance") {
            let t = &body[pos..body[pos..].find('>').map(|e| pos + e).unwrap_or(body.len())];
            let enabled = attr(t, "enabled").ok_or(ManifestError::DefaultInstanceWithoutEnabled)?;
            out.push(ManifestInstance {
                fmri: format!("svc:/{name}:default"),
                enabled: enabled == "true",
            });
        }
        let mut b = body;
        while let Some(pos) = b.find("<instance ") {
            let t_end = b[pos..].find('>').map(|e| pos + e).unwrap_or(b.len());
            let t = &b[pos..t_end];
            let iname = attr(t, "name").ok_or(ManifestError::UnnamedInstance)?;
            let enabled = attr(t, "enabled").unwrap_or("false".to_string());
            out.push(ManifestInstance {
                fmri: format!("svc:/{name}:{iname}"),
                enabled: enabled == "true",
            });
            b = &b[t_end..];
        }
        rest = &after[body_end.min(after.len())..];
        if body_end == after.len() {
            break;
        }
    }
    if services == 0 {
        return Err(ManifestError::NoService);
    }
    Ok(out)
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!("{name}=\"");
    let mut search = tag;
    loop {
        let pos = search.find(&key)?;
        // Require a word boundary so `name=` does not match `xname=`.
        let boundary = pos == 0 || search.as_bytes()[pos - 1].is_ascii_whitespace();
        let after = &search[pos + key.len()..];
        if boundary {
            let end = after.find('"')?;
            return Some(after[..end].to_string());
        }
        search = after;
    }
}

/// Read a manifest file's instances (blocking: call it through
/// [`super::blocking`] from async code).
pub fn read_manifest_instances(path: &Path) -> Result<Vec<ManifestInstance>, PlatformError> {
    let xml = std::fs::read_to_string(path).map_err(|err| PlatformError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    manifest_instances(&xml).map_err(|err| PlatformError::BadManifest {
        path: path.to_path_buf(),
        err,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MANIFEST: &str = r#"<?xml version="1.0"?>
<service_bundle type="manifest" name="vm-agent">
    <service name="smartdc/agent/vm-agent" type="service" version="1.0">
        <create_default_instance enabled="true"/>
    </service>
    <service name="smartdc/agent/vm-agent-update" type="service" version="1.0">
        <instance name="default" enabled="false"/>
    </service>
</service_bundle>"#;

    #[test]
    fn scans_manifest_instances() {
        let i = manifest_instances(MANIFEST).unwrap();
        assert_eq!(
            i,
            vec![
                ManifestInstance {
                    fmri: "svc:/smartdc/agent/vm-agent:default".into(),
                    enabled: true
                },
                ManifestInstance {
                    fmri: "svc:/smartdc/agent/vm-agent-update:default".into(),
                    enabled: false
                },
            ]
        );
        assert!(manifest_instances("<nope/>").is_err());
    }
}
