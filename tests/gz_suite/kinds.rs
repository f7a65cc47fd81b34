//! What each component kind stages: the footprint of every kind, from
//! images built in the test.

use std::fs;

use agentsadm_gz::kinds::LayoutError;
use agentsadm_gz::kinds::StagedVersion;
use agentsadm_gz::kinds::record_rel;
use agentsadm_gz::kinds::stage;
use agentsadm_gz::unpack;
use agentsadm_gz::unpack::UnpackOptions;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_sim::imagebuild::build;
use agentsadm_types::catalog::Catalog;

fn staged(name: &str, headnode: bool) -> (tempfile::TempDir, Result<StagedVersion, LayoutError>) {
    let cat = Catalog::builtin();
    let c = cat.get(name).unwrap();
    let img = build(&ImageSpec::for_component(c, "1.0.0"));
    let d = tempfile::tempdir().unwrap();
    let new = d.path().join("new");
    fs::create_dir_all(&new).unwrap();
    unpack::unpack(
        &img.file[..],
        img.manifest.files[0].compression,
        &new,
        &UnpackOptions {
            expected_top: Some(c.package_name().to_string()),
            ..Default::default()
        },
    )
    .unwrap();
    let r = stage(c, &img.manifest, d.path(), headnode, "abc");
    (d, r)
}

#[test]
fn every_kind_stages() {
    let (_d, r) = staged("vm-agent", false);
    let v = r.unwrap();
    assert_eq!(
        v.footprint.tree.as_deref(),
        Some("opt/smartdc/agents/lib/node_modules/vm-agent")
    );
    assert_eq!(v.footprint.links[0].path, "opt/smartdc/agents/bin/vm-agent");
    assert_eq!(
        v.footprint.smf_manifests,
        vec!["opt/smartdc/agents/smf/vm-agent.xml"]
    );
    let (_d, r) = staged("gz-tools", true);
    let v = r.unwrap();
    assert!(
        v.footprint
            .overlay
            .contains(&"opt/smartdc/bin/sdc-server".to_string())
    );
    assert!(
        v.footprint
            .overlay
            .contains(&record_rel(&"gz-tools".parse().unwrap()))
    );
    let (_d, r) = staged("gz-tools", false);
    assert!(
        !r.unwrap()
            .footprint
            .overlay
            .contains(&"opt/smartdc/bin/sdc-server".to_string())
    );
    let (_d, r) = staged("dockerlogger", false);
    let v = r.unwrap();
    assert!(
        v.footprint
            .overlay
            .contains(&"opt/smartdc/docker/bin/dockerlogger".to_string())
    );
    assert_eq!(
        v.footprint.smf_manifests,
        vec!["var/svc/manifest/site/dockerlogger.xml"]
    );
    let (_d, r) = staged("sdcadm", true);
    let v = r.unwrap();
    assert_eq!(v.footprint.tree.as_deref(), Some("opt/smartdc/sdcadm"));
    assert_eq!(v.footprint.links.len(), 2);
}
