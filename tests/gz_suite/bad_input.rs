//! Bad input: each case gets a clear error naming the cause, and nothing on
//! the server changes (the previously installed version, its files, bins,
//! instance UUID and SMF services stay exactly as they were).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::gz_common::*;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_sim::standin::Fault;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::ids::ImageUuid;

/// What a case publishes and how the install is run.
struct Case {
    name: &'static str,
    image: BuiltImage,
    /// Publish the image (false: IMGAPI does not know it).
    publish: bool,
    fault: Option<Fault>,
    args: Vec<&'static str>,
    env: Vec<(&'static str, &'static str)>,
    /// Every one of these must appear in the error.
    expect: Vec<&'static str>,
}

fn case(name: &'static str, image: BuiltImage, expect: &[&'static str]) -> Case {
    Case {
        name,
        image,
        publish: true,
        fault: None,
        args: Vec::new(),
        env: Vec::new(),
        expect: expect.to_vec(),
    }
}

fn dir_entry(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

fn file_entry(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    if path.starts_with('/') || path.contains("..") {
        raw_path(&mut h, path);
        b.append(&h, data).unwrap();
    } else {
        b.append_data(&mut h, path, data).unwrap();
    }
}

fn raw(build: impl FnOnce(ImageUuid, &mut tar::Builder<Vec<u8>>)) -> BuiltImage {
    let uuid = ImageUuid::new_v4();
    raw_image("vm-agent", uuid, &vm_agent_tar(uuid, |b| build(uuid, b)))
}

fn cases() -> Vec<Case> {
    let good = || image("vm-agent", "2.0.0");
    let mut out = vec![
        case(
            "sha1 mismatch",
            manifest_with(&good(), |m| m.files[0].sha1 = "0".repeat(40)),
            &["sha1", "manifest says 0000"],
        ),
        case(
            "size mismatch",
            manifest_with(&good(), |m| m.files[0].size += 7),
            &["bytes but the manifest says"],
        ),
        Case {
            fault: Some(Fault::Truncate {
                bytes: 3000,
                times: 100,
            }),
            ..case("truncated download", good(), &["download"])
        },
        Case {
            publish: false,
            ..case("IMGAPI 404", good(), &["does not exist in IMGAPI"])
        },
        Case {
            fault: Some(Fault::ManifestStatus {
                status: 500,
                times: 100,
            }),
            ..case("IMGAPI 500", good(), &["cannot get image", "HTTP 500"])
        },
        Case {
            fault: Some(Fault::FileStatus {
                status: 503,
                times: 100,
            }),
            ..case("IMGAPI 503 on the file", good(), &["HTTP 503"])
        },
        Case {
            fault: Some(Fault::ManifestDelay(Duration::from_secs(5))),
            ..case("IMGAPI timeout", good(), &["timed out"])
        },
        Case {
            fault: Some(Fault::Stall { bytes: 1000 }),
            ..case("IMGAPI stalls mid-file", good(), &["sent no data"])
        },
        Case {
            fault: Some(Fault::WrongMd5),
            ..case("Content-MD5 mismatch", good(), &["Content-MD5"])
        },
        case(
            "more than one top-level directory",
            raw(|_, b| dir_entry(b, "other/")),
            &["more than one top-level entry", "other"],
        ),
        case(
            "dot-dot path",
            raw(|_, b| file_entry(b, "vm-agent/../../evil", b"x")),
            &["contains '..'"],
        ),
        case(
            "absolute path",
            raw(|_, b| file_entry(b, "/tmp/evil", b"x")),
            &["absolute path"],
        ),
        case(
            "symlink escaping the package",
            raw(|_, b| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                h.set_mode(0o777);
                b.append_link(&mut h, "vm-agent/etc", "../../../etc")
                    .unwrap();
            }),
            &["symbolic link", "points outside the package"],
        ),
        case(
            "hard link escaping the package",
            raw(|_, b| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                h.set_mode(0o644);
                b.append_link(&mut h, "vm-agent/passwd", "etc/passwd")
                    .unwrap();
            }),
            &["hard link", "points outside the package"],
        ),
        case(
            "device file",
            raw(|_, b| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Block);
                h.set_size(0);
                h.set_mode(0o600);
                b.append_data(&mut h, "vm-agent/disk", std::io::empty())
                    .unwrap();
            }),
            &["block device", "device files"],
        ),
        {
            let uuid = ImageUuid::new_v4();
            let mut b = tar::Builder::new(Vec::new());
            dir_entry(&mut b, "vm-agent/");
            file_entry(
                &mut b,
                "vm-agent/package.json",
                br#"{"name":"vm-agent","version":"2.0.0"}"#,
            );
            let tar = b.into_inner().unwrap();
            case(
                "missing image_uuid",
                raw_image("vm-agent", uuid, &tar),
                &["no vm-agent/image_uuid"],
            )
        },
        {
            let uuid = ImageUuid::new_v4();
            let tar = vm_agent_tar(ImageUuid::new_v4(), |_| {});
            case(
                "mismatched image_uuid",
                raw_image("vm-agent", uuid, &tar),
                &[
                    "vm-agent/image_uuid says",
                    &*Box::leak(uuid.to_string().into_boxed_str()),
                ],
            )
        },
        {
            let uuid = ImageUuid::new_v4();
            let mut b = tar::Builder::new(Vec::new());
            dir_entry(&mut b, "vm-agent/");
            file_entry(
                &mut b,
                "vm-agent/package.json",
                br#"{"name":"net-agent","version":"2.0.0"}"#,
            );
            file_entry(
                &mut b,
                "vm-agent/image_uuid",
                format!("{uuid}\n").as_bytes(),
            );
            let tar = b.into_inner().unwrap();
            case(
                "package.json name mismatch",
                raw_image("vm-agent", uuid, &tar),
                &["package.json name is \"net-agent\", expected \"vm-agent\""],
            )
        },
        case(
            "unknown component",
            manifest_with(&good(), |m| m.name = "nope-agent".into()),
            &["nope-agent", "not a component agentsadm manages"],
        ),
        case(
            "wrong image type",
            manifest_with(&good(), |m| m.image_type = "zone-dataset".into()),
            &["has type \"zone-dataset\""],
        ),
        case(
            "wrong compression",
            manifest_with(&good(), |m| {
                m.files[0].compression = agentsadm_types::image::Compression::Bzip2
            }),
            &["not a valid bzip2 tar stream"],
        ),
        {
            let mut s = spec("vm-agent", "2.0.0");
            s.hooks.postinstall =
                Some("echo about to fail; echo 'no such thing' >&2; exit 3".into());
            case(
                "failing postinstall",
                imagebuild::build(&s),
                &[
                    "postinstall",
                    "exit status: 3",
                    "no such thing",
                    "rolled back",
                ],
            )
        },
        {
            let mut s = spec("vm-agent", "2.0.0");
            s.hooks.preinstall = Some("echo waiting; sleep 600".into());
            Case {
                args: vec!["--hook-timeout", "1s"],
                ..case(
                    "hanging preinstall",
                    imagebuild::build(&s),
                    &["preinstall", "did not finish within 1s", "waiting"],
                )
            }
        },
        {
            let mut s = spec("vm-agent", "2.0.0");
            s.payload_bytes = 300_000;
            Case {
                env: vec![("AGENTSADM_TEST_UNPACK_LIMIT", "100000")],
                ..case(
                    "disk full during unpack",
                    imagebuild::build(&s),
                    &["disk full"],
                )
            }
        },
        {
            // Its postinstall writes a manifest SMF cannot read (agentsadm
            // imports what the package's own hook wrote).
            let mut s = spec("vm-agent", "2.0.0");
            s.postinstall_renders_smf = false;
            s.hooks.postinstall =
                Some("echo '<not-a-manifest/>' > \"$npm_config_smfdir/vm-agent.xml\"".into());
            case(
                "SMF import failure",
                imagebuild::build(&s),
                &["SMF", "vm-agent.xml"],
            )
        },
    ];
    // A failure after the new package's SMF import: its services must go.
    let mut s = spec("vm-agent", "2.0.0");
    s.smf_fmri = Some("svc:/smartdc/agent/vm-agent-two:default".into());
    s.hooks.postinstall = None;
    let img = imagebuild::build(&s);
    out.push(Case {
        env: vec![("AGENTSADM_TEST_UNPACK_LIMIT", "")],
        ..case("new service then SAPI down", img, &["sapi"])
    });
    out
}

/// v1 hooks with no side effects outside the package except the realistic
/// one: the postuninstall deletes its generated SMF manifest.
fn v1() -> BuiltImage {
    let mut s = spec("vm-agent", "1.0.0");
    s.hooks = Hooks {
        preinstall: Some("test -f ./package.json".into()),
        postinstall: Some("true".into()),
        preuninstall: Some("true".into()),
        postuninstall: Some("rm -f \"$npm_config_smfdir/vm-agent.xml\"".into()),
    };
    imagebuild::build(&s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_and_changes_nothing() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let srv = TestServer::new(false);
    let v1 = v1();
    imgapi.publish(&v1);
    let base_env = BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.url())]);
    ok(&srv
        .gz(
            &[
                "install",
                &v1.manifest.uuid.to_string(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &base_env,
        )
        .await);
    // The operator disabled it: a failed upgrade must leave it disabled.
    let fmri = "svc:/smartdc/agent/vm-agent:default";
    assert_eq!(srv.smf_state()[fmri], "online");
    agentsadm_platform::Platform::smf_disable(&agentsadm_platform::Rooted::new(srv.root()), fmri)
        .await
        .unwrap();
    let before = snapshot(srv.root());
    let instance = srv.instance("vm-agent").unwrap();

    for c in cases() {
        if c.publish {
            imgapi.publish(&c.image);
        }
        let uuid = c.image.manifest.uuid;
        if let Some(f) = c.fault.clone() {
            imgapi.set_fault(uuid, f);
        }
        let uuid_s = uuid.to_string();
        let mut args: Vec<&str> = vec![
            "install",
            &uuid_s,
            "--no-cnapi",
            "--api-timeout",
            "0.5s",
            "--api-retries",
            "1",
        ];
        let mut env = base_env.clone();
        if c.name == "new service then SAPI down" {
            apis.add_service("vm-agent");
            apis.state.lock().unwrap().sapi_down = true;
            env.insert("SAPI_URL".into(), apis.url.clone());
        } else {
            args.push("--no-sapi");
        }
        args.extend(c.args.iter().copied());
        for (k, v) in &c.env {
            env.insert(k.to_string(), v.to_string());
        }
        let out = srv.gz(&args, &env).await;
        let msg = failed(&out);
        eprintln!("CASE {}: {msg}", c.name);
        for want in &c.expect {
            assert!(
                msg.contains(want),
                "{}: error {msg:?} lacks {want:?}",
                c.name
            );
        }
        assert_same(&before, &snapshot(srv.root()), c.name);
        srv.assert_no_leftovers();
        assert_eq!(
            srv.installed_image("vm-agent"),
            Some(v1.manifest.uuid.to_string())
        );
        assert_eq!(srv.instance("vm-agent").unwrap(), instance);
        assert_eq!(srv.smf_state()[fmri], "disabled", "{}", c.name);
        // An unacceptable archive is not kept; a good one whose hook failed
        // is (the retry needs no download).
        if (msg.starts_with("unpack:") || msg.starts_with("validate:"))
            && !msg.contains("disk full")
        {
            assert!(
                !srv.at(&format!(
                    "opt/smartdc/agents/.agentsadm/downloads/{uuid}.file"
                ))
                .exists(),
                "{}: a bad image was kept in the download cache",
                c.name
            );
        }
        imgapi.clear_fault(uuid);
    }
}

#[tokio::test]
async fn transient_imgapi_errors_are_retried() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let srv = TestServer::new(false);
    let img = image("vm-agent", "1.0.0");
    imgapi.publish(&img);
    let u = img.manifest.uuid;
    imgapi.set_fault(
        u,
        Fault::ManifestStatus {
            status: 500,
            times: 2,
        },
    );
    let env = BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.url())]);
    ok(&srv
        .gz(
            &["install", &u.to_string(), "--no-sapi", "--no-cnapi"],
            &env,
        )
        .await);
    assert_eq!(imgapi.hits(u).0, 3);
    // A truncated transfer is downloaded again.
    let img2 = image("vm-agent", "1.0.1");
    imgapi.publish(&img2);
    let u2 = img2.manifest.uuid;
    imgapi.set_fault(
        u2,
        Fault::Truncate {
            bytes: 100,
            times: 1,
        },
    );
    ok(&srv
        .gz(
            &["install", &u2.to_string(), "--no-sapi", "--no-cnapi"],
            &env,
        )
        .await);
    assert_eq!(imgapi.hits(u2).1, 2);
    // The verified download of the installed image is reused (no new
    // request); the replaced image's is dropped.
    let downloads = srv.at("opt/smartdc/agents/.agentsadm/downloads");
    assert!(!downloads.join(format!("{u}.file")).exists());
    let u2s = u2.to_string();
    ok(&srv
        .gz(
            &["install", "--force", &u2s, "--no-sapi", "--no-cnapi"],
            &env,
        )
        .await);
    assert_eq!(imgapi.hits(u2).1, 2);
    ok(&srv
        .gz(&["remove", "vm-agent", "--no-sapi", "--no-cnapi"], &env)
        .await);
    assert!(!downloads.join(format!("{u2}.file")).exists());
}
