//! Client-level tests of IMGAPI's wire quirks that the simulator reproduces
//! (docs/triton/apis.md §5, the simulator checklist): channels, listing,
//! paging, headers, errors, the create lifecycle and admin import.

use crate::sim_common;

use agentsadm_api::ApiError;
use agentsadm_api::imgapi::ListImagesFilter;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::image_spec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::publish_via_client;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageState;
use reqwest::Method;
use serde_json::json;
use sim_common::{get, get_v2, raw, small_dc};

use crate::quirks::code_of;

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
