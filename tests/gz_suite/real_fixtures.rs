//! Every real agent's SMF manifest and package.json in
//! `../shared/fixtures/real-agents/` read as the installer reads them.

use std::path::{Path, PathBuf};

use agentsadm_gz::package::PackageJson;
use agentsadm_platform::manifest_instances;
use agentsadm_platform::read_manifest_instances;
use agentsadm_types::component::ComponentVersion;

fn fixtures() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/real-agents");
    if dir.is_dir() {
        dir
    } else {
        PathBuf::from("/work/shared/fixtures/real-agents")
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn every_real_manifest_is_read() {
    let mut all = Vec::new();
    files(&fixtures(), &mut all);
    let mut found = Vec::new();
    for p in all.iter().filter(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        n.ends_with(".xml") || n.ends_with(".xml.in")
    }) {
        let list = read_manifest_instances(p).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
        assert!(!list.is_empty(), "{}", p.display());
        found.extend(list.into_iter().map(|i| (i.fmri, i.enabled)));
    }
    found.sort();
    let want: Vec<(String, bool)> = [
        ("svc:/smartdc/agent/cn-agent-setup:default", false),
        ("svc:/smartdc/agent/cn-agent-update:default", false),
        ("svc:/smartdc/agent/cn-agent:default", false),
        ("svc:/smartdc/agent/net-agent-setup:default", false),
        ("svc:/smartdc/agent/net-agent:default", false),
        ("svc:/smartdc/agent/vm-agent-setup:default", false),
        ("svc:/smartdc/agent/vm-agent:default", false),
        ("svc:/smartdc/application/config-agent:default", true),
        ("svc:/smartdc/sdcadm-setup:default", true),
    ]
    .iter()
    .map(|(f, e)| (f.to_string(), *e))
    .collect();
    assert_eq!(found, want);
}

#[test]
fn real_manifest_quirks() {
    let sdcadm =
        std::fs::read_to_string(fixtures().join("sdcadm/smf/manifests/sdcadm-setup.xml")).unwrap();
    // Single-quoted attributes.
    assert!(sdcadm.contains("name='smartdc/sdcadm-setup'"));
    // `<service` then a line break, and a `<service>` inside a comment.
    let vm = std::fs::read_to_string(fixtures().join("sdc-vm-agent/smf/manifests/vm-agent.xml.in"))
        .unwrap();
    let twisted = vm.replacen(
        "<service name=",
        "<!-- <service name=\"ghost\"> -->\n<service\n    name=",
        1,
    );
    let list = manifest_instances(&twisted).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].fmri, "svc:/smartdc/agent/vm-agent:default");
    // Truncated: refused, not skipped.
    assert!(manifest_instances(&vm[..vm.len() / 2]).is_err());
}

#[test]
fn every_real_package_json_is_read() {
    let mut all = Vec::new();
    files(&fixtures(), &mut all);
    let mut names = Vec::new();
    for p in all
        .iter()
        .filter(|p| p.file_name().unwrap() == "package.json")
    {
        let pkg = PackageJson::read(p.parent().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e:?}", p.display()))
            .unwrap();
        names.push((
            pkg.name.to_string(),
            pkg.bin.keys().cloned().collect::<Vec<_>>(),
        ));
        assert!(!pkg.version.is_empty(), "{}", p.display());
        // Every real package's name and version are what the wire types
        // carry: a name that is a path component, a version that orders.
        let version: ComponentVersion = pkg.version.parse().unwrap();
        assert!(version.key().is_some(), "{}: {version}", p.display());
    }
    names.sort();
    let bins = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        names,
        vec![
            (
                "agents_core".to_string(),
                bins(&["amqp-config", "apm", "ping-agent", "sdc-agents-healthcheck"])
            ),
            ("cn-agent".to_string(), bins(&[])),
            ("config-agent".to_string(), bins(&["config-agent"])),
            ("net-agent".to_string(), bins(&["net-agent"])),
            ("sdcadm".to_string(), bins(&[])),
            ("vm-agent".to_string(), bins(&["vm-agent"])),
        ]
    );
}
