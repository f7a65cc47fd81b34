//! The service instances an SMF manifest defines: what the rooted platform
//! imports and what the transaction snapshots before it changes services.
//!
//! Parsed with `roxmltree`, a real (read-only) XML parser: real manifests use
//! single-quoted attributes, break lines inside tags and carry comments that
//! mention `<service>`, none of which a text scanner reads correctly. Only the
//! `<service name=...>` elements directly under `<service_bundle>` and their
//! `<create_default_instance enabled=...>` / `<instance name=... enabled=...>`
//! children count.

use std::path::Path;

use super::PlatformError;

/// One service instance a manifest defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestInstance {
    pub fmri: String,
    /// `create_default_instance enabled=` / `instance enabled=`.
    pub enabled: bool,
}

/// Why a manifest's text is not a manifest this reader accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("not well-formed XML: {0}")]
    Xml(String),
    #[error("the root element is <{0}>, not <service_bundle>")]
    NoBundle(String),
    #[error("no <service> element")]
    NoService,
    #[error("a <service> element has no name")]
    UnnamedService,
    #[error("service {0}: create_default_instance has no enabled=")]
    DefaultInstanceWithoutEnabled(String),
    #[error("service {0}: an <instance> element has no name")]
    UnnamedInstance(String),
}

/// `enabled="true"`; anything else, including a template's unrendered
/// `@@ENABLED@@`, is not enabled (the import decides, not this reader).
fn enabled(value: &str) -> bool {
    value == "true"
}

/// Parse an SMF manifest whose root is a `service_bundle`.
fn parse_bundle(xml: &str) -> Result<roxmltree::Document<'_>, ManifestError> {
    let opts = roxmltree::ParsingOptions {
        // SMF manifests name the service_bundle DTD; it is never fetched.
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, opts)
        .map_err(|err| ManifestError::Xml(err.to_string()))?;
    let name = doc.root_element().tag_name().name();
    if name != "service_bundle" {
        return Err(ManifestError::NoBundle(name.to_string()));
    }
    Ok(doc)
}

/// Find the service instances an SMF manifest defines.
pub fn manifest_instances(xml: &str) -> Result<Vec<ManifestInstance>, ManifestError> {
    let doc = parse_bundle(xml)?;
    let root = doc.root_element();
    let mut out = Vec::new();
    let mut services = 0;
    for service in root.children().filter(|n| n.has_tag_name("service")) {
        services += 1;
        let name = service
            .attribute("name")
            .filter(|n| !n.is_empty())
            .ok_or(ManifestError::UnnamedService)?;
        for child in service.children().filter(|n| n.is_element()) {
            match child.tag_name().name() {
                "create_default_instance" => {
                    let value = child
                        .attribute("enabled")
                        .ok_or_else(|| ManifestError::DefaultInstanceWithoutEnabled(name.into()))?;
                    out.push(ManifestInstance {
                        fmri: format!("svc:/{name}:default"),
                        enabled: enabled(value),
                    });
                }
                "instance" => {
                    let iname = child
                        .attribute("name")
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| ManifestError::UnnamedInstance(name.into()))?;
                    out.push(ManifestInstance {
                        fmri: format!("svc:/{name}:{iname}"),
                        enabled: enabled(child.attribute("enabled").unwrap_or("false")),
                    });
                }
                _ => {}
            }
        }
    }
    if services == 0 {
        return Err(ManifestError::NoService);
    }
    Ok(out)
}

/// Read a manifest file's instances (blocking: call it through
/// [`super::blocking`] from async code).
pub fn read_manifest_instances(path: &Path) -> Result<Vec<ManifestInstance>, PlatformError> {
    let xml = super::read_bounded_text(path, agentsadm_types::bounded::MANIFEST)?;
    manifest_instances(&xml).map_err(|err| PlatformError::BadManifest {
        path: path.to_path_buf(),
        err,
    })
}

/// The services (`svc:/<name>`) an SMF manifest declares, with or without
/// instances: importing it touches each of them, so each is a name the
/// package claims.
pub fn read_manifest_services(path: &Path) -> Result<Vec<String>, PlatformError> {
    let xml = super::read_bounded_text(path, agentsadm_types::bounded::MANIFEST)?;
    manifest_services(&xml).map_err(|err| PlatformError::BadManifest {
        path: path.to_path_buf(),
        err,
    })
}

/// See [`read_manifest_services`].
pub fn manifest_services(xml: &str) -> Result<Vec<String>, ManifestError> {
    let doc = parse_bundle(xml)?;
    let root = doc.root_element();
    root.children()
        .filter(|n| n.has_tag_name("service"))
        .map(|s| {
            s.attribute("name")
                .filter(|n| !n.is_empty())
                .map(|n| format!("svc:/{n}"))
                .ok_or(ManifestError::UnnamedService)
        })
        .collect()
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

    #[test]
    fn reads_what_the_scanner_missed() {
        // Single quotes, a line break after `<service`, a commented-out
        // service and a DOCTYPE, as the real sdcadm-setup.xml has.
        let xml = "<?xml version='1.0'?>
<!DOCTYPE service_bundle SYSTEM '/usr/share/lib/xml/dtd/service_bundle.dtd.1'>
<!-- <service name='smartdc/ghost' type='service'> -->
<service_bundle type='manifest' name='x'>
  <service
      name='smartdc/x' type='service' version='0'>
    <create_default_instance enabled='true'/>
  </service>
</service_bundle>";
        assert_eq!(
            manifest_instances(xml).unwrap(),
            vec![ManifestInstance {
                fmri: "svc:/smartdc/x:default".into(),
                enabled: true
            }]
        );
        assert!(matches!(
            manifest_instances("<service_bundle><service name='a'>"),
            Err(ManifestError::Xml(_))
        ));
    }
}
