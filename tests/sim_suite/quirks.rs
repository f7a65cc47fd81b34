//! Client-level tests of every wire quirk the simulator reproduces
//! (docs/triton/apis.md §5, the simulator checklist), through the real
//! clients where they can express the call and raw HTTP where a client
//! deliberately never does it (no Accept-Version, UpgradeInstance...).

use crate::sim_common;

use std::time::Duration;

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::cnapi::ServerListFilter;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_api::imgapi::ListImagesFilter;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_api::sapi::CreateInstance;
use agentsadm_api::sapi::ServiceType;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::UpdateAction;
use agentsadm_api::sapi::object;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::image_spec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::publish_via_client;
use agentsadm_sim::sim_api_config;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageState;
use reqwest::Method;
use serde_json::json;
use sim_common::{get, get_v2, raw, small_dc};

fn code_of(e: &ApiError) -> (Option<u16>, Option<String>) {
    (e.status(), e.code().map(str::to_string))
}

// ---------------------------------------------------------------- IMGAPI

#[tokio::test]
async fn imgapi_channels_only_for_v2_and_on_channel_servers() {
    let dc = small_dc(1).await;
    let u = &dc.urls().updates;
    let v1 = get(&format!("{u}/images?name=vm-agent")).await.json();
    let v2 = get_v2(&format!("{u}/images?name=vm-agent")).await.json();
    assert!(v1[0].get("channels").is_none(), "no channels for v1");
    assert_eq!(v2[0]["channels"], json!(["dev", "staging", "release"]));
    // The DC IMGAPI has no channels at all, even for v2.
    let dc_v2 = get_v2(&format!("{}/images?name=vm-agent", dc.urls().imgapi))
        .await
        .json();
    assert!(dc_v2[0].get("channels").is_none());
    // The client always asks for v2.
    let img = dc.updates_client().latest_image("vm-agent").await.unwrap();
    assert!(img.unwrap().channels.is_some());
    // An unsupported version is refused.
    let r = raw(
        Method::GET,
        &format!("{u}/images"),
        &[("accept-version", "~3")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("InvalidVersion"))
    );
}

#[tokio::test]
async fn imgapi_default_all_and_unknown_channels() {
    let dc = SimDc::start(SimConfig::default().servers(0).populate(SeedSpec {
        updates_newer: Some("1.2.0".into()),
        ..SeedSpec::default()
    }))
    .await
    .unwrap();
    let updates = dc.updates_client();
    let names = |imgs: &[agentsadm_types::image::ImageManifest]| {
        imgs.iter().filter(|i| i.name == "cn-agent").count()
    };
    // Default channel (dev) has both versions, release only the first.
    let dev = updates
        .list_images(&ListImagesFilter::default())
        .await
        .unwrap();
    assert_eq!(names(&dev), 2);
    let release = updates
        .clone()
        .with_channel(Some("release".into()))
        .list_images(&ListImagesFilter::default())
        .await
        .unwrap();
    assert_eq!(names(&release), 1);
    let experimental_only = ListImagesFilter {
        channel: Some("experimental".into()),
        ..Default::default()
    };
    assert_eq!(
        names(&updates.list_images(&experimental_only).await.unwrap()),
        1
    );
    let all = ListImagesFilter {
        channel: Some("*".into()),
        ..Default::default()
    };
    assert_eq!(names(&updates.list_images(&all).await.unwrap()), 2);
    let bad = ListImagesFilter {
        channel: Some("nope".into()),
        ..Default::default()
    };
    let err = updates.list_images(&bad).await.unwrap_err();
    assert_eq!(code_of(&err), (Some(422), Some("ValidationFailed".into())));
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(body.message, "unknown channel: nope");
    assert_eq!(body.errors[0].field, "channel");
    // GetImage of an image outside the requested channel: 404.
    let newer = dev
        .iter()
        .filter(|i| i.name == "cn-agent")
        .max_by_key(|i| i.published_at.clone())
        .unwrap();
    let in_release = updates
        .clone()
        .with_channel(Some("release".into()))
        .get_image(newer.uuid)
        .await
        .unwrap_err();
    assert!(in_release.is_not_found());
    let channels = updates.list_channels().await.unwrap();
    assert_eq!(channels.len(), 5);
    assert!(channels.iter().any(|c| c.name == "dev" && c.default));
    let dc_channels = dc.apis().imgapi.list_channels().await.unwrap_err();
    assert!(dc_channels.is_not_found(), "no /channels without channels");
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_list_filters_order_and_state() {
    let dc = small_dc(0).await;
    let img = dc.apis().imgapi;
    let f = |name: Option<&str>, t: Option<&str>| ListImagesFilter {
        name: name.map(str::to_string),
        image_type: t.map(str::to_string),
        ..Default::default()
    };
    let sub = img.list_images(&f(Some("~agent"), None)).await.unwrap();
    assert!(sub.iter().all(|i| i.name.contains("agent")));
    assert!(sub.iter().any(|i| i.name == "cn-agent"));
    assert!(sub.iter().all(|i| i.name != "gz-tools"));
    // `~` is case-sensitive.
    assert!(
        img.list_images(&f(Some("~AGENT"), None))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        img.list_images(&f(None, Some("!other")))
            .await
            .unwrap()
            .is_empty()
    );
    let tagged = ListImagesFilter {
        tags: vec![("smartdc_service".into(), "true".into())],
        ..Default::default()
    };
    let all = img.list_images(&tagged).await.unwrap();
    assert_eq!(all.len(), dc.catalog().len());
    let sorted: Vec<_> = all.iter().map(|i| i.published_at.clone()).collect();
    let mut expect = sorted.clone();
    expect.sort();
    assert_eq!(sorted, expect, "ascending published_at");
    // An unactivated image: only with state=unactivated or all, first.
    let c = dc.catalog().get("vm-agent").unwrap();
    let built = build(&image_spec(c, &BuildOptions::new("9.9.9")));
    let mut manifest = built.manifest.clone();
    manifest.files.clear();
    img.import_manifest(&manifest).await.unwrap();
    let listed = img.list_images(&f(Some("vm-agent"), None)).await.unwrap();
    assert!(listed.iter().all(|i| i.uuid != manifest.uuid));
    let st = |s: &str| ListImagesFilter {
        name: Some("vm-agent".into()),
        state: Some(s.into()),
        ..Default::default()
    };
    let un = img.list_images(&st("unactivated")).await.unwrap();
    assert_eq!(un.len(), 1);
    assert_eq!(un[0].state, ImageState::Unactivated);
    let every = img.list_images(&st("all")).await.unwrap();
    assert_eq!(every[0].uuid, manifest.uuid, "unactivated sorts first");
    let err = img.list_images(&st("bogus")).await.unwrap_err();
    assert_eq!(code_of(&err), (Some(422), Some("InvalidParameter".into())));
    // limit NaN: IMGAPI names the `state` field (its bug).
    let r = get(&format!("{}/images?limit=abc", dc.urls().imgapi)).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["field"], "state");
    let r = get(&format!("{}/images?sort=name", dc.urls().imgapi)).await;
    assert_eq!(r.status, 422);
    let r = get(&format!("{}/images?marker=yesterday", dc.urls().imgapi)).await;
    assert_eq!(r.status, 422);
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_marker_is_inclusive_and_the_client_pages_past_1000() {
    let dc = SimDc::start(SimConfig::default().servers(0).empty())
        .await
        .unwrap();
    let c = dc.catalog().get("amon-agent").unwrap();
    let mut opts = BuildOptions::new("1.0.0");
    opts.payload_bytes = 0;
    let mut uuids = Vec::new();
    for _ in 0..1003 {
        let m = dc.publish(build(&image_spec(c, &opts)), PublishTarget::Dc);
        uuids.push(m.uuid);
    }
    let img = dc.apis().imgapi;
    // Raw: the marker image itself comes back first.
    let page = get(&format!(
        "{}/images?limit=2&marker={}",
        dc.urls().imgapi,
        uuids[10]
    ))
    .await
    .json();
    assert_eq!(page[0]["uuid"], json!(uuids[10]));
    assert_eq!(page[1]["uuid"], json!(uuids[11]));
    let all = img.list_images(&ListImagesFilter::default()).await.unwrap();
    let got: Vec<ImageUuid> = all.iter().map(|i| i.uuid).collect();
    assert_eq!(got, uuids, "every image once, in published order");
    let from = ListImagesFilter {
        marker: Some(uuids[1000].to_string()),
        ..Default::default()
    };
    assert_eq!(img.list_images(&from).await.unwrap().len(), 3);
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_pretty_json_key_order_and_etag() {
    let dc = small_dc(0).await;
    let r = get(&format!("{}/images?name=cn-agent", dc.urls().imgapi)).await;
    assert!(
        r.text.starts_with("[\n  {\n    \"v\": 2,\n    \"uuid\": "),
        "{}",
        &r.text[..60]
    );
    let keys: Vec<String> = r.json()[0].as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "v",
            "uuid",
            "owner",
            "name",
            "version",
            "state",
            "disabled",
            "public",
            "published_at",
            "type",
            "os",
            "files",
            "description",
            "tags"
        ]
    );
    assert_eq!(r.header("server").as_deref(), Some("imgapi/4.13.1"));
    assert!(r.header("x-request-id").is_some());
    let uuid = r.json()[0]["uuid"].as_str().unwrap().to_string();
    let one = get(&format!("{}/images/{uuid}", dc.urls().imgapi)).await;
    let etag = one.header("etag").unwrap();
    let again = raw(
        Method::GET,
        &format!("{}/images/{uuid}", dc.urls().imgapi),
        &[("if-none-match", &etag)],
        None,
    )
    .await
    .unwrap();
    assert_eq!(again.status, 304);
    // SAPI and CNAPI are compact.
    let s = get(&format!("{}/ping", dc.urls().sapi)).await;
    assert!(!s.text.contains('\n'));
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_file_headers_head_and_missing_file() {
    let dc = small_dc(0).await;
    let img = dc.apis().imgapi;
    // (vm-agent's and cn-agent's files are seeded without Content-MD5.)
    let m = img.latest_image("cmon-agent").await.unwrap().unwrap();
    let url = format!("{}/images/{}/file", dc.urls().imgapi, m.uuid);
    let r = get(&url).await;
    let file = m.file().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("etag").as_deref(), Some(file.sha1.as_str()));
    assert_eq!(r.header("content-length"), Some(file.size.to_string()));
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    let dl = img.get_image_file(m.uuid).await.unwrap();
    assert_eq!(dl.content_length, Some(file.size));
    use base64::Engine;
    use md5::Digest;
    let bytes = dl.response.bytes().await.unwrap();
    let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&bytes));
    assert_eq!(dl.content_md5.as_deref(), Some(md5.as_str()));
    // HEAD is not routed: 405 with the methods that are.
    let head = raw(Method::HEAD, &url, &[], None).await.unwrap();
    assert_eq!(head.status, 405);
    assert_eq!(head.header("allow").as_deref(), Some("PUT, GET"));
    // An image without a file.
    let c = dc.catalog().get("vm-agent").unwrap();
    let mut manifest = build(&image_spec(c, &BuildOptions::new("3.0.0"))).manifest;
    manifest.files.clear();
    img.import_manifest(&manifest).await.unwrap();
    let err = img.get_image_file(manifest.uuid).await.unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*status, 404);
    assert_eq!(
        body.message,
        format!("image \"{}\" has no file", manifest.uuid)
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_errors_and_create_lifecycle() {
    let dc = SimDc::start(SimConfig::default().servers(0).empty())
        .await
        .unwrap();
    let img = dc.apis().imgapi;
    let u = &dc.urls().imgapi;
    let r = get(&format!("{u}/images/foo")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "/images/foo does not exist");
    let r = get(&format!("{u}/nope")).await;
    assert_eq!(r.json()["message"], "/nope does not exist");
    let missing = ImageUuid::from_u128(42);
    let err = img.get_image(missing).await.unwrap_err();
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(body.message, format!("image {missing} not found"));
    // CreateImage answers 200 with an unactivated image.
    let created = raw(
        Method::POST,
        &format!("{u}/images"),
        &[("accept-version", "~2")],
        Some(
            json!({"name": "cn-agent", "version": "1.0.0", "type": "other", "os": "other",
                    "owner": "00000000-0000-0000-0000-000000000000", "public": false}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 200);
    assert_eq!(created.json()["state"], "unactivated");
    assert_eq!(created.json()["files"], json!([]));
    let uuid: ImageUuid = created.json()["uuid"].as_str().unwrap().parse().unwrap();
    let err = img.activate_image(uuid).await.unwrap_err();
    assert_eq!(
        code_of(&err),
        (Some(422), Some("NoActivationNoFile".into()))
    );
    let err = img
        .add_image_file(
            uuid,
            Compression::Gzip,
            "0000",
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(400), Some("Download".into())));
    img.add_image_file(
        uuid,
        Compression::Gzip,
        "11f6ad8ec52a2984abaafd7c3b516503785c2072",
        bytes::Bytes::from_static(b"x"),
    )
    .await
    .unwrap();
    let active = img.activate_image(uuid).await.unwrap();
    assert_eq!(active.state, ImageState::Active);
    assert!(active.published_at.is_some());
    let err = img.activate_image(uuid).await.unwrap_err();
    assert_eq!(
        code_of(&err),
        (Some(422), Some("ImageAlreadyActivated".into()))
    );
    let err = img
        .add_image_file(
            uuid,
            Compression::Gzip,
            "x",
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&err),
        (Some(422), Some("ImageFilesImmutable".into()))
    );
    // Import keeps the UUID; importing it again conflicts.
    let c = dc.catalog().get("net-agent").unwrap();
    let built = build(&image_spec(c, &BuildOptions::new("1.0.0")));
    let m = publish_via_client(&img, &built, None).await.unwrap();
    assert_eq!(m.uuid, built.manifest.uuid);
    assert_eq!(m.files[0].sha1, built.manifest.files[0].sha1);
    let err = img.import_manifest(&built.manifest).await.unwrap_err();
    assert_eq!(
        code_of(&err),
        (Some(409), Some("ImageUuidAlreadyExists".into()))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_admin_import_from_the_updates_server() {
    let dc = SimDc::start(SimConfig::default().servers(0).populate(SeedSpec {
        updates_newer: Some("1.2.0".into()),
        ..SeedSpec::default()
    }))
    .await
    .unwrap();
    let updates = dc.updates_client();
    let newest = updates
        .clone()
        .with_channel(Some("dev".into()))
        .latest_image("vm-agent")
        .await
        .unwrap()
        .unwrap();
    let dc_img = dc.apis().imgapi;
    assert!(
        dc_img
            .get_image(newest.uuid)
            .await
            .unwrap_err()
            .is_not_found()
    );
    let source = format!("{}?channel=dev", dc.urls().updates);
    let imported = dc_img
        .import_from_source(newest.uuid, &source)
        .await
        .unwrap();
    assert_eq!(imported.uuid, newest.uuid);
    assert_eq!(imported.state, ImageState::Active);
    assert_eq!(
        imported.published_at, newest.published_at,
        "published_at kept"
    );
    assert_eq!(imported.files[0].sha1, newest.files[0].sha1);
    assert!(imported.channels.is_none(), "the DC IMGAPI has no channels");
    let bytes = dc_img
        .get_image_file(newest.uuid)
        .await
        .unwrap()
        .response
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.len() as u64, newest.files[0].size);
    // Importing again is a no-op for the client (the image is there).
    let again = dc_img
        .import_from_source(newest.uuid, &source)
        .await
        .unwrap();
    assert_eq!(again.uuid, newest.uuid);
    // The raw import endpoint itself conflicts.
    let r = raw(
        Method::POST,
        &format!(
            "{}/images/{}?action=import&source={}",
            dc.urls().imgapi,
            newest.uuid,
            dc.urls().updates
        ),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 409);
    // A source without the image: RemoteSourceError.
    let missing = ImageUuid::from_u128(5);
    let err = dc_img
        .import_from_source(missing, &source)
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(503), Some("RemoteSourceError".into())));
    dc.shutdown().await;
}

// ---------------------------------------------------------------- SAPI

#[tokio::test]
async fn sapi_v1_hides_agents_and_type() {
    let dc = small_dc(1).await;
    let s = &dc.urls().sapi;
    // v1 sees only vm objects: CNAPI's service and instance.
    let names = |v: serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|o| {
                o["params"]["alias"]
                    .as_str()
                    .or(o["name"].as_str())
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        names(get(&format!("{s}/instances")).await.json()),
        ["cnapi0"]
    );
    assert_eq!(names(get(&format!("{s}/services")).await.json()), ["cnapi"]);
    let explicit = get(&format!("{s}/instances?type=agent")).await.json();
    assert!(!explicit.as_array().unwrap().is_empty());
    assert!(explicit[0].get("type").is_none(), "no type for v1");
    let v2 = get_v2(&format!("{s}/instances")).await.json();
    let types: Vec<&str> = v2
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types.iter().filter(|t| **t == "vm").count(), 1);
    assert!(types.contains(&"agent"));
    // The client sends ~2 and sees types.
    let svcs = dc.apis().sapi.list_agent_services().await.unwrap();
    assert_eq!(svcs.len(), dc.catalog().len());
    assert!(svcs.iter().all(|s| s.is_agent()));
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_list_instances_ignores_server_filter() {
    let dc = small_dc(2).await;
    let sapi = dc.apis().sapi;
    let all = sapi.list_agent_instances().await.unwrap();
    let cn = dc.server("cn0001").unwrap();
    let r = get_v2(&format!(
        "{}/instances?type=agent&server_uuid={}",
        dc.urls().sapi,
        cn.uuid
    ))
    .await
    .json();
    assert_eq!(
        r.as_array().unwrap().len(),
        all.len(),
        "server_uuid ignored"
    );
    // The server's instances: by params.server_uuid, or, for those adopted
    // without params (vm-agent, net-agent), by what the server reports.
    let reported: Vec<InstanceUuid> = dc
        .server_agents(cn.uuid)
        .iter()
        .filter_map(|a| a.uuid)
        .collect();
    let mine = all
        .iter()
        .filter(|i| match &i.params {
            Some(_) => i.server_uuid() == Some(cn.uuid),
            None => reported.contains(&i.uuid),
        })
        .count();
    assert_eq!(mine, dc.catalog().default_set(false).len());
    let svc = sapi
        .list_services(Some("vm-agent"), None, Some(ServiceType::Agent))
        .await
        .unwrap()
        .remove(0);
    let of_svc = sapi.list_service_instances(svc.uuid).await.unwrap();
    assert_eq!(of_svc.len(), 3, "one per server");
    // service_uuid wins over type.
    let r = get_v2(&format!(
        "{}/instances?service_uuid={}&type=vm",
        dc.urls().sapi,
        svc.uuid
    ))
    .await
    .json();
    assert_eq!(r.as_array().unwrap().len(), 3);
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_create_copies_type_overwrites_and_validates() {
    let dc = small_dc(0).await;
    let sapi = dc.apis().sapi;
    let svc = sapi
        .list_services(Some("net-agent"), None, None)
        .await
        .unwrap()
        .remove(0);
    let uuid = InstanceUuid::from_u128(77);
    let mk = |tag: &str| CreateInstance {
        uuid: Some(uuid),
        service_uuid: Some(svc.uuid),
        params: Some(object([("tag", json!(tag))])),
        metadata: None,
        exists: Some(true),
    };
    let a = sapi.create_instance(&mk("a")).await.unwrap();
    assert_eq!(a.service_type, Some(ServiceType::Agent));
    let b = sapi.create_instance(&mk("b")).await.unwrap();
    assert_eq!(b.uuid, uuid);
    let got = sapi.get_instance(uuid).await.unwrap();
    assert_eq!(got.params.unwrap()["tag"], "b", "re-POST overwrites");
    let err = sapi
        .create_instance(&CreateInstance {
            service_uuid: Some(ServiceUuid::from_u128(1)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    let r = raw(
        Method::POST,
        &format!("{}/instances", dc.urls().sapi),
        &[],
        Some(json!({})),
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.json()),
        (
            409,
            json!({"code": "MissingParameter", "message": "missing required keys: service_uuid"})
        )
    );
    // The client leaves an unset service out, so SAPI answers that it is
    // missing.
    let err = sapi
        .create_instance(&CreateInstance::default())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(409), "{err}");
    // `"service_uuid": null` would be present, so not missing: SAPI's
    // assertion on its type throws and the process dies.
    let r = raw(
        Method::POST,
        &format!("{}/instances", dc.urls().sapi),
        &[],
        Some(json!({"service_uuid": null})),
    )
    .await;
    assert!(r.is_err(), "SAPI answered a null service_uuid");
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_update_actions_and_missing_object_500() {
    let dc = small_dc(1).await;
    let sapi = dc.apis().sapi;
    // (vm-agent and net-agent instances are seeded without params.)
    let inst = sapi
        .list_agent_instances()
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.params.is_some())
        .unwrap();
    let up = sapi
        .update_instance(inst.uuid, &Update::params(object([("extra", json!(1))])))
        .await
        .unwrap();
    let p = up.params.unwrap();
    assert_eq!(p["extra"], 1);
    assert!(p.contains_key("server_uuid"), "update merges");
    let del = sapi
        .update_instance(
            inst.uuid,
            &Update {
                action: Some(UpdateAction::Delete),
                params: Some(object([("extra", json!(null))])),
                metadata: None,
            },
        )
        .await
        .unwrap();
    assert!(!del.params.unwrap().contains_key("extra"));
    let rep = sapi
        .update_instance(
            inst.uuid,
            &Update {
                action: Some(UpdateAction::Replace),
                params: Some(object([("only", json!(true))])),
                metadata: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(rep.params.unwrap().len(), 1);
    let bad = raw(
        Method::PUT,
        &format!("{}/instances/{}", dc.urls().sapi, inst.uuid),
        &[],
        Some(json!({"action": "frob"})),
    )
    .await
    .unwrap();
    assert_eq!(
        (bad.status, bad.json()),
        (409, json!({"code": "InvalidArgument", "message": ""}))
    );
    // A missing object: a plain 500 with only a message, not retried.
    let missing = InstanceUuid::from_u128(3);
    let started = std::time::Instant::now();
    let err = sapi
        .update_instance(missing, &Update::params(object([("a", json!(1))])))
        .await
        .unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*status, 500);
    assert_eq!(body.code, None);
    assert_eq!(
        body.message,
        format!("updateObject failed: no record for bucket sapi_instances object {missing}")
    );
    assert!(!err.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_delete_semantics() {
    let dc = small_dc(0).await;
    let sapi = dc.apis().sapi;
    let app = sapi
        .create_application(
            "other",
            "930896af-bf8c-48d4-885c-6573a94b1853",
            object([("a", json!(1))]),
        )
        .await
        .unwrap();
    assert_eq!(sapi.get_application(app.uuid).await.unwrap(), app);
    sapi.delete_application(app.uuid).await.unwrap();
    let err = sapi.delete_application(app.uuid).await.unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!((*status, body.message.as_str()), (404, ""));
    let inst = sapi.list_agent_instances().await.unwrap().remove(0);
    sapi.delete_instance(inst.uuid).await.unwrap();
    let err = sapi.delete_instance(inst.uuid).await.unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!(*status, 404);
    assert_eq!(body.message, format!("no such instance: {}", inst.uuid));
    // Services and applications: 404 with an empty body.
    let r = raw(
        Method::DELETE,
        &format!("{}/services/{}", dc.urls().sapi, ServiceUuid::from_u128(1)),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!((r.status, r.text.as_str()), (404, ""));
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_upgrade_instance_on_agent_drops_the_connection() {
    let dc = small_dc(0).await;
    let inst = dc
        .apis()
        .sapi
        .list_agent_instances()
        .await
        .unwrap()
        .remove(0);
    let url = format!("{}/instances/{}/upgrade", dc.urls().sapi, inst.uuid);
    let missing = raw(Method::PUT, &url, &[], Some(json!({}))).await.unwrap();
    assert_eq!(
        (missing.status, missing.json()["message"].clone()),
        (409, json!("missing image_uuid"))
    );
    let crash = raw(
        Method::PUT,
        &url,
        &[],
        Some(json!({"image_uuid": "11111111-2222-3333-4444-555555555555"})),
    )
    .await;
    let err = crash.expect_err("no reply at all");
    assert!(!err.is_timeout(), "{err}");
    // SAPI keeps serving afterwards (SMF restarted it), and the instance is
    // unchanged.
    let after = dc.apis().sapi.get_instance(inst.uuid).await.unwrap();
    assert_eq!(after, inst);
    dc.shutdown().await;
}

// ---------------------------------------------------------------- CNAPI

#[tokio::test]
async fn cnapi_strict_params_validation_and_limits() {
    let dc = small_dc(1).await;
    let c = &dc.urls().cnapi;
    let r = get(&format!("{c}/servers?foo=1")).await;
    assert_eq!(
        (r.status, r.json()),
        (
            409,
            json!({"code": "InvalidArgument", "message": "foo is not an explicitly defined parameter"})
        )
    );
    let hn = dc.headnode();
    let r = get(&format!("{c}/servers/{}?extras=agents", hn.uuid)).await;
    assert_eq!(r.status, 409, "ServerGet takes no extras");
    for l in ["0", "1001"] {
        let r = get(&format!("{c}/servers?limit={l}")).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json()["errors"][0]["message"],
            "limit must be in the range 1-1000 (inclusive)"
        );
    }
    let r = get(&format!("{c}/servers?setup=maybe")).await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (500, json!("InvalidParameters"))
    );
    let cnapi = dc.apis().cnapi;
    let err = cnapi
        .update_server(hn.uuid, &json!({"reserved": "yes"}))
        .await
        .unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!(
        (*status, body.code.as_deref()),
        (500, Some("InvalidParameters"))
    );
    assert_eq!(body.errors[0].field, "reserved");
    assert_eq!(
        body.errors[0].message.as_deref(),
        Some("value was not true or false")
    );
    assert!(!err.is_transient(), "validation 500s are not retried");
    let err = cnapi
        .update_server(hn.uuid, &json!({"hostname": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(409), Some("InvalidArgument".into())));
    let r = get(&format!("{c}/servers/not-a-uuid")).await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (409, json!("Invalid server_uuid"))
    );
    let r = get(&format!("{c}/servers/{}", InstanceUuid::from_u128(9))).await;
    assert_eq!(r.status, 404);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_list_projection_order_and_paging() {
    let dc = small_dc(5).await;
    let c = &dc.urls().cnapi;
    let bare = get(&format!("{c}/servers")).await.json();
    let first = bare[0].as_object().unwrap();
    assert!(first.contains_key("status"));
    for k in [
        "sysinfo",
        "agents",
        "vms",
        "last_heartbeat",
        "memory_total_bytes",
    ] {
        assert!(!first.contains_key(k), "{k} without extras");
    }
    let uuids: Vec<String> = bare
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["uuid"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = uuids.clone();
    sorted.sort();
    assert_eq!(uuids, sorted, "uuid order");
    let agents = get(&format!("{c}/servers?extras=agents")).await.json();
    let s0 = agents[0].as_object().unwrap();
    assert!(s0.contains_key("agents") && s0.contains_key("last_heartbeat"));
    assert!(!s0.contains_key("sysinfo"));
    let sys = get(&format!("{c}/servers?extras=sysinfo&fields=uuid,sysinfo"))
        .await
        .json();
    assert_eq!(sys[0].as_object().unwrap().len(), 2);
    assert!(sys[0]["sysinfo"]["UUID"].is_string());
    let page = get(&format!("{c}/servers?limit=2&offset=4")).await.json();
    assert_eq!(page.as_array().unwrap().len(), 2);
    assert_eq!(page[0]["uuid"], json!(uuids[4]));
    let filtered = dc
        .apis()
        .cnapi
        .list_servers(&ServerListFilter {
            headnode: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].hostname, "headnode");
    let by_host = dc
        .apis()
        .cnapi
        .list_servers(&ServerListFilter {
            hostname: Some("cn0003".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_host.len(), 1);
    // ServerGet has every group.
    let one = dc
        .apis()
        .cnapi
        .get_server(dc.headnode().uuid)
        .await
        .unwrap();
    assert!(one.sysinfo.is_some() && one.agents.is_some() && one.vms.is_some());
    assert_eq!(one.sysinfo.unwrap()["Boot Parameters"]["headnode"], "true");
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_install_agent_task_lifecycle_and_failure_history() {
    let dc = small_dc(2).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let img = dc
        .publish_component("net-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    dc.faults()
        .set_install_latency(agentsadm_sim::LatencySpec::fixed(300));
    let id = cnapi.install_agent(cn.uuid, img.uuid).await.unwrap();
    let t = cnapi.get_task(id).await.unwrap();
    assert_eq!(t.status, TaskStatus::Active);
    assert!(t.history.is_none(), "no history while active");
    let done = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, TaskStatus::Complete);
    assert_eq!(done.history.as_ref().unwrap()[0].name, "finish");
    let agents = dc.server_agents(cn.uuid);
    assert!(
        agents
            .iter()
            .any(|a| a.name == "net-agent" && a.image_uuid == Some(img.uuid))
    );
    // Adopted in SAPI with server and image.
    let inst = agents
        .iter()
        .find(|a| a.name == "net-agent")
        .unwrap()
        .uuid
        .unwrap();
    let si = dc.apis().sapi.get_instance(inst).await.unwrap();
    assert_eq!(si.image_uuid(), Some(img.uuid));
    assert_eq!(si.server_uuid(), Some(cn.uuid));
    // Failure: history [error, finish], message where sdcadm reads it.
    dc.faults().set_install_latency(Default::default());
    let cn2 = dc.server("cn0002").unwrap();
    dc.faults().fail_installs_on(cn2.uuid);
    let id = cnapi.install_agent(cn2.uuid, img.uuid).await.unwrap();
    let failed = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failure);
    let h = failed.history.as_ref().unwrap();
    assert_eq!(
        (h[0].name.as_str(), h[1].name.as_str()),
        ("error", "finish")
    );
    assert!(
        failed
            .error_message()
            .unwrap()
            .starts_with("AgentInstall error: ")
    );
    // A missing image fails the task the way cn-agent does.
    dc.faults().clear();
    let id = cnapi
        .install_agent(cn2.uuid, ImageUuid::from_u128(1))
        .await
        .unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert!(
        t.error_message().unwrap().contains("Image not found at"),
        "{t:?}"
    );
    let err = cnapi
        .get_task(agentsadm_types::ids::TaskId::from_u128(1))
        .await
        .unwrap_err();
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(body.message, "no such task found");
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_wait_returns_the_active_task_on_timeout() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    dc.faults().hang_tasks_on(cn.uuid);
    let img = cnapi
        .get_server(cn.uuid)
        .await
        .unwrap()
        .agents
        .unwrap()
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap()
        .image_uuid
        .unwrap();
    let id = cnapi.install_agent(cn.uuid, img).await.unwrap();
    let started = std::time::Instant::now();
    let t = cnapi.wait_task(id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Active, "timeout is not an error");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let t = cnapi
        .wait_task_done(id, Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Active);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_cn_agent_task_completes_before_agents_change() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .cn_agent_restart(Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let img = dc
        .publish_component("cn-agent", &BuildOptions::new("2.15.0"), PublishTarget::Dc)
        .unwrap();
    let id = cnapi.install_agent(cn.uuid, img.uuid).await.unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete);
    let cn_agent = |dc: &SimDc| {
        dc.server_agents(cn.uuid)
            .into_iter()
            .find(|a| a.name == "cn-agent")
            .unwrap()
    };
    assert_ne!(cn_agent(&dc).image_uuid, Some(img.uuid), "not yet reported");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cn_agent(&dc).image_uuid != Some(img.uuid) {
        assert!(
            std::time::Instant::now() < deadline,
            "cn-agent never reported"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_setup_reset_delete_update_and_not_running() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(3)
            .not_setup(["cn0003"])
            .with_vms("cn0002", 2),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn1 = dc.server("cn0001").unwrap();
    let cn2 = dc.server("cn0002").unwrap();
    let cn3 = dc.server("cn0003").unwrap();
    // Setup: 204 when set up, 202 + job otherwise; the job installs the
    // default set from SAPI and marks the server set up.
    assert_eq!(cnapi.setup_server(cn1.uuid, None).await.unwrap(), None);
    let s3 = cnapi.get_server(cn3.uuid).await.unwrap();
    assert!(!s3.setup && s3.agents.as_ref().unwrap().is_empty());
    // No cn-agent on a server that is not set up: tasks fail to connect.
    let image = dc.default_image("vm-agent").unwrap();
    let id = cnapi.install_agent(cn3.uuid, image).await.unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert!(t.error_message().unwrap().contains("ECONNREFUSED"), "{t:?}");
    assert!(
        cnapi
            .setup_server(cn3.uuid, Some("cn0003"))
            .await
            .unwrap()
            .is_some()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = cnapi.get_server(cn3.uuid).await.unwrap();
        if s.setup {
            assert_eq!(
                s.agents.unwrap().len(),
                dc.catalog().default_set(false).len()
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "setup never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Factory reset: 409 with a bare string body when the server has VMs.
    let err = cnapi.factory_reset(cn2.uuid).await.unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!(*status, 409);
    assert_eq!(body.code, None);
    assert_eq!(body.message, "Server may not be reset because it has 2 vms");
    let r = raw(
        Method::PUT,
        &format!("{}/servers/{}/factory-reset", dc.urls().cnapi, cn2.uuid),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.text, "\"Server may not be reset because it has 2 vms\"");
    let instances_before = dc.apis().sapi.list_agent_instances().await.unwrap().len();
    cnapi.factory_reset(cn1.uuid).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cnapi.get_server(cn1.uuid).await.unwrap().setup {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = dc.apis().sapi.list_agent_instances().await.unwrap().len();
    assert_eq!(after, instances_before, "factory reset leaves SAPI alone");
    // ServerUpdate answers 204; ServerDelete 200 with an empty body and
    // leaves SAPI alone too.
    cnapi
        .update_server(cn1.uuid, &json!({"comments": "hello", "reserved": true}))
        .await
        .unwrap();
    let s = cnapi.get_server(cn1.uuid).await.unwrap();
    assert_eq!(s.extra["comments"], "hello");
    let del = raw(
        Method::DELETE,
        &format!("{}/servers/{}", dc.urls().cnapi, cn2.uuid),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!((del.status, del.text.as_str()), (200, ""));
    assert!(cnapi.get_server(cn2.uuid).await.unwrap_err().is_not_found());
    assert_eq!(
        dc.apis().sapi.list_agent_instances().await.unwrap().len(),
        instances_before
    );
    cnapi.delete_server(cn3.uuid).await.unwrap();
    // A cn-agent still running on a deleted server registers it again.
    dc.reregister(cn2.uuid).await.unwrap();
    let back = cnapi.get_server(cn2.uuid).await.unwrap();
    assert!(back.setup);
    assert_eq!(
        back.agents.unwrap().len(),
        dc.catalog().default_set(false).len()
    );
    // Not running: task routes refuse with ServerNotRunning.
    dc.set_running(cn1.uuid, false);
    let err = cnapi
        .install_agent(cn1.uuid, ImageUuid::from_u128(1))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(409), Some("ServerNotRunning".into())));
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(
        body.message,
        "Operation attempted on server which is not running"
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_execute_runs_gz_commands_and_nothing_else() {
    // Through cn-agent (`timeout` honoured); Ur is in strict.rs.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::CnAgent),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let req = gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    let report: AgentsReport = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report.server_uuid, cn.uuid);
    assert_eq!(report.agents, dc.server_agents(cn.uuid));
    // gz install through execute: GzResult on stdout, CNAPI updated.
    let img = dc
        .publish_component("smartlogin", &BuildOptions::new("1.3.0"), PublishTarget::Dc)
        .unwrap();
    let req = gz_execute_request(
        &[
            "gz".into(),
            "install".into(),
            img.uuid.to_string(),
            "--json".into(),
        ],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    let result: GzResult = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(result.components[0].image_uuid, Some(img.uuid));
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .any(|a| a.image_uuid == Some(img.uuid))
    );
    // The real installer put it in the server's rooted GZ.
    let installed = cn
        .root
        .join("opt/smartdc/agents/lib/node_modules/smartlogin/image_uuid");
    assert_eq!(
        std::fs::read_to_string(installed).unwrap().trim(),
        img.uuid.to_string()
    );
    // gz setup --source imgapi on a factory-reset server installs the
    // default set at the SAPI services' images.
    cnapi.factory_reset(cn.uuid).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cnapi.get_server(cn.uuid).await.unwrap().setup {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        dc.gz_report(cn.uuid).await.unwrap().agents.is_empty(),
        "wiped"
    );
    let req = gz_execute_request(
        &[
            "gz".into(),
            "setup".into(),
            "--source".into(),
            "imgapi".into(),
            "--json".into(),
            "--inside-cn-agent".into(),
        ],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    // The set includes cn-agent, and the command line says it runs inside
    // cn-agent's SMF contract (`--inside-cn-agent`, as the orchestrator
    // says): the whole job goes to the agentsadm-install service,
    // which runs it after cn-agent's restart delay and reports to CNAPI.
    let setup: GzResult = serde_json::from_str(&r.stdout).unwrap();
    assert!(setup.error.is_none(), "{setup:?}");
    assert!(
        setup
            .warnings
            .iter()
            .any(|w| w.contains("agentsadm-install")),
        "{setup:?}"
    );
    // (A factory reset leaves server.agents as it was: watch the GZ.)
    let want = dc.catalog().default_set(false).len();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let report = dc.gz_report(cn.uuid).await.unwrap();
        if report.agents.len() == want && dc.server_agents(cn.uuid) == report.agents {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "setup job never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Any other script is not run: exit 127.
    let other = ExecuteRequest {
        script: "#!/bin/bash\nrm -rf /\n".into(),
        ..Default::default()
    };
    let r = cnapi
        .execute(cn.uuid, &other, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 127);
    assert!(r.stderr.contains("only run agentsadm command lines"));
    // Raw shape: exitCode/stdout/stderr with json, stdout only without.
    let url = format!("{}/servers/{}/execute", dc.urls().cnapi, cn.uuid);
    let body = serde_json::to_value(gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    ))
    .unwrap();
    let j = raw(Method::POST, &url, &[], Some(body.clone()))
        .await
        .unwrap();
    assert_eq!(j.json()["exitCode"], 0);
    let mut plain = body.clone();
    plain["json"] = json!(false);
    let p = raw(Method::POST, &url, &[], Some(plain)).await.unwrap();
    assert!(p.json().as_str().unwrap().starts_with('{'), "stdout only");
    let mut failing = body;
    failing["json"] = json!(false);
    failing["args"] = json!(["gz", "frobnicate"]);
    let f = raw(Method::POST, &url, &[], Some(failing)).await.unwrap();
    assert_eq!(
        (f.status, f.json()["message"].clone()),
        (500, json!("Error executing on remote system"))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_execute_through_ur_with_timeout_kills_cnapi_and_the_client_never_sends_it() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::Ur)
            .cnapi_restart(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let mut req = gz_execute_request(&["gz".into(), "report".into()], Default::default());
    req.timeout = Some(30_000);
    let raw_r = raw(
        Method::POST,
        &format!("{}/servers/{}/execute", dc.urls().cnapi, cn.uuid),
        &[],
        Some(serde_json::to_value(&req).unwrap()),
    )
    .await;
    assert!(raw_r.is_err(), "the connection drops: {raw_r:?}");
    assert_eq!(dc.cnapi_crashes(), 1);
    // The client's execute never sends `timeout` unless told the server is
    // in cn-agent mode, whatever the request says.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dc.cnapi_down() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = dc
        .apis()
        .cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0);
    assert_eq!(dc.cnapi_crashes(), 1);
    assert_eq!(dc.executes().last().unwrap().timeout, None);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_uninstall_agents_and_old_cn_agent_precondition() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let relay = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "amon-relay")
        .unwrap();
    let id = cnapi
        .uninstall_agents(cn.uuid, &["amon-relay".to_string()])
        .await
        .unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete);
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .all(|a| a.name != "amon-relay")
    );
    // SAPI is not touched by agents_uninstall.
    dc.apis()
        .sapi
        .get_instance(relay.uuid.unwrap())
        .await
        .unwrap();
    // The seeded cn-agent is on the real 2.x line, at the floor.
    let cn_agent = |dc: &SimDc| {
        dc.server_agents(cn.uuid)
            .into_iter()
            .find(|a| a.name == "cn-agent")
    };
    assert!(cn_agent(&dc).unwrap().version.starts_with("2.8.0-"));
    // An older cn-agent: 412.
    let mut agents = dc.server_agents(cn.uuid);
    for a in agents.iter_mut().filter(|a| a.name == "cn-agent") {
        a.version = "2.7.1".into();
    }
    cnapi.update_server_agents(cn.uuid, &agents).await.unwrap();
    let err = cnapi
        .uninstall_agents(cn.uuid, &["vm-agent".to_string()])
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&err),
        (Some(412), Some("PreconditionFailed".into()))
    );
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert!(
        body.message.contains("require at least cn-agent v2.8.0"),
        "{body:?}"
    );
    assert_eq!(dc.cnapi_crashes(), 0);
    // No cn-agent entry at all: formatting the refusal throws, CNAPI dies.
    agents.retain(|a| a.name != "cn-agent");
    cnapi.update_server_agents(cn.uuid, &agents).await.unwrap();
    let err = cnapi
        .uninstall_agents(cn.uuid, &["vm-agent".to_string()])
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert_eq!(dc.cnapi_crashes(), 1);
    dc.shutdown().await;
}

#[tokio::test]
async fn corrupt_and_truncated_files_fail_installs() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let good = dc
        .publish_component("firewaller", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    dc.faults().corrupt_image(&good.uuid.to_string());
    let id = cnapi.install_agent(cn.uuid, good.uuid).await.unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Failure);
    // The installer's verifier: the sha1 the manifest records.
    let message = t.error_message().unwrap();
    assert!(message.contains("sha1"), "{t:?}");
    assert!(message.contains("nothing changed"), "{t:?}");
    dc.faults().clear();
    dc.faults().truncate_image("firewaller");
    // The client sees the download break mid-body.
    let dl = dc.apis().imgapi.get_image_file(good.uuid).await.unwrap();
    assert_eq!(dl.content_length, Some(good.files[0].size));
    assert!(dl.response.bytes().await.is_err());
    let id = cnapi.install_agent(cn.uuid, good.uuid).await.unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Failure);
    // Nothing changed on the server.
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .all(|a| a.image_uuid != Some(good.uuid))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn publish_via_client_to_the_updates_server_channel() {
    let dc = SimDc::start(SimConfig::default().servers(0).empty())
        .await
        .unwrap();
    let c = dc.catalog().get("vm-agent").unwrap();
    let built = build(&image_spec(c, &BuildOptions::new("4.0.0")));
    let client = ImgapiClient::new(&dc.urls().updates, sim_api_config()).unwrap();
    let m = publish_via_client(&client, &built, Some("staging"))
        .await
        .unwrap();
    assert_eq!(m.channels, Some(vec!["staging".to_string()]));
    assert!(m.version.starts_with("4.0.0-master-"));
    let in_dev = client.get_image(m.uuid).await.unwrap_err();
    assert!(in_dev.is_not_found(), "not in the default channel");
    // A private (non-dc) IMGAPI lists only active images to anonymous
    // clients, whatever `state` asks for.
    let mut unfinished = build(&image_spec(c, &BuildOptions::new("4.1.0"))).manifest;
    unfinished.files.clear();
    client.import_manifest(&unfinished).await.unwrap();
    for state in ["unactivated", "all"] {
        let listed = client
            .list_images(&ListImagesFilter {
                state: Some(state.into()),
                channel: Some("*".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(listed.iter().all(|i| i.uuid != unfinished.uuid), "{state}");
    }
    dc.shutdown().await;
}
