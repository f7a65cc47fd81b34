//! Where the simulator is as strict, and as quirky, as the real services
//! (issue 13): SAPI's CreateInstance overwriting and deleting on a failed
//! re-create, agent instances without `params` and image files without
//! `Content-MD5` in a seeded datacenter, SAPI's `metadata_schema`,
//! `action=delete` with an array and form-encoded bodies, IMGAPI's owner
//! rewrite, `type`/`version` validation and `If-None-Match`, and CNAPI's
//! execute through Ur by default with exactly the request's environment,
//! refused on mockcloud servers.

use crate::sim_common;

use std::time::{Duration, Instant};

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_api::sapi::CreateInstance;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::object;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::GzLayout;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::Strictness;
use agentsadm_sim::image_spec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::publish_via_client;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;
use reqwest::Method;
use serde_json::{Value, json};
use sim_common::{Raw, raw, small_dc};

/// A request with exactly this body and `Content-Type` (none if `None`).
async fn send(method: Method, url: &str, content_type: Option<&str>, body: &str) -> Raw {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut rb = client
        .request(method, url)
        .header("accept-version", "~2")
        .body(body.to_string());
    if let Some(t) = content_type {
        rb = rb.header("content-type", t);
    }
    let resp = rb.send().await.unwrap();
    Raw {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        text: resp.text().await.unwrap(),
    }
}

fn api_error(e: &ApiError) -> (u16, Option<String>, String) {
    match e {
        ApiError::Status { status, body, .. } => (*status, body.code.clone(), body.message.clone()),
        other => panic!("not a status error: {other}"),
    }
}

/// An agent instance of `component` (seeded with params).
async fn instance_of(dc: &SimDc, component: &str) -> Instance {
    let sapi = dc.apis().sapi;
    let svc = sapi
        .list_services(Some(component), None, None)
        .await
        .unwrap()
        .remove(0);
    sapi.list_service_instances(svc.uuid)
        .await
        .unwrap()
        .remove(0)
}

// ---------------------------------------------------------------- SAPI

#[tokio::test]
async fn sapi_create_instance_overwrites_and_a_failed_recreate_deletes_it() {
    let dc = small_dc(1).await;
    let sapi = dc.apis().sapi;
    let url = format!("{}/instances", dc.urls().sapi);

    // Re-POSTing an existing UUID overwrites it: params replaced whole.
    let inst = instance_of(&dc, "cmon-agent").await;
    assert!(inst.server_uuid().is_some());
    let again = sapi
        .create_instance(&CreateInstance {
            uuid: Some(inst.uuid),
            service_uuid: Some(inst.service_uuid),
            params: Some(object([("only", json!("this"))])),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.uuid, inst.uuid);
    let got = sapi.get_instance(inst.uuid).await.unwrap();
    assert_eq!(
        Value::Object(got.params.unwrap()),
        json!({"only": "this"}),
        "overwritten, not merged"
    );

    // An unknown service: 404, and the existing instance is gone.
    let bogus = ServiceUuid::from_u128(0xdead);
    let err = sapi
        .create_instance(&CreateInstance {
            uuid: Some(inst.uuid),
            service_uuid: Some(bogus),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        api_error(&err),
        (
            404,
            Some("ResourceNotFound".into()),
            format!("no such service: {bogus}")
        )
    );
    assert!(
        sapi.get_instance(inst.uuid)
            .await
            .unwrap_err()
            .is_not_found()
    );

    // An unknown manifest: a plain 500 (a vasync MultiError), gone too.
    let inst = instance_of(&dc, "firewaller").await;
    let manifest = "a0000000-0000-4000-8000-000000000001";
    let r = raw(
        Method::POST,
        &url,
        &[("accept-version", "~2")],
        Some(json!({"uuid": inst.uuid, "service_uuid": inst.service_uuid,
                    "manifests": {"conf": manifest}})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json(),
        json!({"message": format!("first of 1 error: no such manifest: {manifest}")})
    );
    assert!(
        sapi.get_instance(inst.uuid)
            .await
            .unwrap_err()
            .is_not_found()
    );

    // A storage error while writing: gone as well.
    let inst = instance_of(&dc, "smartlogin").await;
    dc.faults().fail_sapi_writes(1);
    let r = raw(
        Method::POST,
        &url,
        &[("accept-version", "~2")],
        Some(json!({"uuid": inst.uuid, "service_uuid": inst.service_uuid})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 500);
    assert!(r.json().get("code").is_none(), "{}", r.text);
    assert!(
        sapi.get_instance(inst.uuid)
            .await
            .unwrap_err()
            .is_not_found()
    );

    // An argument of the wrong type: SAPI's assertion throws, the process
    // dies before touching storage; the instance survives.
    let inst = instance_of(&dc, "amon-agent").await;
    let crashed = raw(
        Method::POST,
        &url,
        &[],
        Some(json!({"uuid": inst.uuid, "service_uuid": inst.service_uuid, "params": "x"})),
    )
    .await;
    assert!(crashed.is_err(), "connection dropped: {crashed:?}");
    assert_eq!(sapi.get_instance(inst.uuid).await.unwrap(), inst);
    dc.shutdown().await;

    // The switch: the existing instance survives a failed re-create.
    let dc = SimDc::start(SimConfig::default().servers(1).strictness(Strictness {
        sapi_delete_on_failed_create: false,
        ..Strictness::default()
    }))
    .await
    .unwrap();
    let sapi = dc.apis().sapi;
    let inst = instance_of(&dc, "cmon-agent").await;
    let err = sapi
        .create_instance(&CreateInstance {
            uuid: Some(inst.uuid),
            service_uuid: Some(bogus),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(sapi.get_instance(inst.uuid).await.unwrap(), inst);
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_metadata_schema_is_enforced() {
    let dc = small_dc(0).await;
    let sapi = dc.apis().sapi;
    // The seeded sdc application carries sdcadm's schema (fabric_cfg).
    let app = sapi.sdc_application().await.unwrap().unwrap();
    assert!(app.extra.contains_key("metadata_schema"));
    let bad = Update {
        metadata: Some(object([(
            "fabric_cfg",
            json!({"sdc_underlay_tag": "sdc_underlay"}),
        )])),
        ..Default::default()
    };
    let err = sapi.update_application(app.uuid, &bad).await.unwrap_err();
    assert_eq!(
        api_error(&err),
        (
            409,
            Some("SchemaValidationError".into()),
            "property \"fabric_cfg.sdc_underlay_assignment\": is missing and it is required".into()
        )
    );
    assert_eq!(
        sapi.get_application(app.uuid).await.unwrap(),
        app,
        "nothing stored"
    );
    // A valid change is stored, with the schema's defaults filled in.
    let good = Update {
        metadata: Some(object([(
            "fabric_cfg",
            json!({"sdc_underlay_tag": "sdc_underlay", "sdc_underlay_assignment": "manual"}),
        )])),
        ..Default::default()
    };
    let updated = sapi.update_application(app.uuid, &good).await.unwrap();
    assert_eq!(updated.metadata["fabric_cfg"]["default_underlay_mtu"], 9000);
    assert_eq!(updated.metadata["fabric_cfg"]["default_overlay_mtu"], 8500);
    assert_eq!(
        updated.metadata["update_channel"], app.metadata["update_channel"],
        "other keys are not constrained"
    );
    let wrong_enum = Update {
        metadata: Some(object([(
            "fabric_cfg",
            json!({"sdc_underlay_tag": "t", "sdc_underlay_assignment": "Sometimes"}),
        )])),
        ..Default::default()
    };
    let (status, code, message) = api_error(
        &sapi
            .update_application(app.uuid, &wrong_enum)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (status, code.as_deref()),
        (409, Some("SchemaValidationError"))
    );
    assert_eq!(
        message,
        "property \"fabric_cfg.sdc_underlay_assignment\": does not have a value in the enumeration manual, automatic"
    );

    // CreateApplication checks too (sdc-sapi's own test schema).
    let url = format!("{}/applications", dc.urls().sapi);
    let soft = json!({"type": "object", "properties": {
        "foo": {"type": "string", "minLength": 1, "required": true}}});
    let r = raw(
        Method::POST,
        &url,
        &[],
        Some(json!({"name": "badschema", "owner_uuid": app.owner_uuid,
                    "metadata": {}, "metadata_schema": soft})),
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.json()),
        (
            409,
            json!({"code": "SchemaValidationError",
                   "message": "property \"foo\": is missing and it is required"})
        )
    );
    let r = raw(
        Method::POST,
        &url,
        &[],
        Some(json!({"name": "schema", "owner_uuid": app.owner_uuid,
                    "metadata": {"foo": "bar"}, "metadata_schema": soft})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let uuid = r.json()["uuid"].as_str().unwrap().to_string();
    let r = raw(
        Method::PUT,
        &format!("{url}/{uuid}"),
        &[],
        Some(json!({"action": "replace", "metadata": {"bad_key": "baz"}})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["code"], "SchemaValidationError");
    dc.shutdown().await;
}

#[tokio::test]
async fn sapi_delete_with_an_array_and_form_encoded_bodies() {
    let dc = small_dc(1).await;
    let sapi = dc.apis().sapi;
    let inst = instance_of(&dc, "cmon-agent").await;
    let url = format!("{}/instances/{}", dc.urls().sapi, inst.uuid);
    sapi.update_instance(
        inst.uuid,
        &Update::params(object([("extra", json!(1)), ("0", json!("zero"))])),
    )
    .await
    .unwrap();
    // action=delete with an array walks Object.keys: "0", not "extra".
    let r = raw(
        Method::PUT,
        &url,
        &[("accept-version", "~2")],
        Some(json!({"action": "delete", "params": ["extra", "server_uuid"]})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let params = &r.json()["params"];
    assert_eq!(params["extra"], 1, "{params}");
    assert!(params.get("server_uuid").is_some(), "{params}");
    assert!(params.get("0").is_none(), "the key \"0\" went: {params}");

    // A form-encoded body, nested the qs way.
    let svc = inst.service_uuid;
    let new = InstanceUuid::from_u128(0xf0f0);
    let form = format!("service_uuid={svc}&uuid={new}&params[server_uuid]=abc&params[tags][]=x");
    let r = send(
        Method::POST,
        &format!("{}/instances", dc.urls().sapi),
        Some("application/x-www-form-urlencoded"),
        &form,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = sapi.get_instance(new).await.unwrap();
    assert_eq!(
        Value::Object(got.params.unwrap()),
        json!({"server_uuid": "abc", "tags": ["x"]})
    );
    // ...and the same delete as a form: `params[]=extra` is an array too.
    let r = send(
        Method::PUT,
        &format!("{}/instances/{new}", dc.urls().sapi),
        Some("application/x-www-form-urlencoded; charset=utf-8"),
        "action=delete&params[]=server_uuid",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["params"]["server_uuid"], "abc");
    // The query string wins over the body.
    let r = send(
        Method::PUT,
        &format!("{}/instances/{new}?action=delete", dc.urls().sapi),
        Some("application/x-www-form-urlencoded"),
        "action=update&params[server_uuid]=",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.json()["params"].get("server_uuid").is_none(),
        "{}",
        r.text
    );
    // A body without a Content-Type restify parses is not read at all.
    let r = send(
        Method::POST,
        &format!("{}/instances", dc.urls().sapi),
        Some("text/plain"),
        &json!({"service_uuid": svc}).to_string(),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (409, json!("missing required keys: service_uuid"))
    );
    dc.shutdown().await;
}

// ------------------------------------------------------- seeded untidiness

#[tokio::test]
async fn seeded_datacenters_have_bare_instances_and_files_without_md5() {
    let dc = SimDc::start(SimConfig::default().servers(1).populate(SeedSpec {
        dc_newer: Some("1.1.0".into()),
        agents_without_params: vec!["vm-agent".into(), "net-agent".into()],
        ..SeedSpec::default()
    }))
    .await
    .unwrap();
    let sapi = dc.apis().sapi;
    let services = sapi.list_agent_services().await.unwrap();
    let name_of = |i: &Instance| {
        services
            .iter()
            .find(|s| s.uuid == i.service_uuid)
            .map(|s| s.name.clone())
            .unwrap()
    };
    let instances = sapi.list_agent_instances().await.unwrap();
    let mut bare: Vec<String> = instances
        .iter()
        .filter(|i| i.params.is_none())
        .map(name_of)
        .collect();
    bare.sort();
    bare.dedup();
    assert_eq!(bare, ["net-agent", "vm-agent"]);
    assert!(
        instances
            .iter()
            .filter(|i| i.params.is_some())
            .all(|i| i.server_uuid().is_some())
    );
    // vm-agent's and cn-agent's files come without Content-MD5, others
    // with; the client still verifies what it can.
    let img = dc.apis().imgapi;
    let report = dc.seed_report().unwrap();
    for (name, md5) in [
        ("vm-agent", false),
        ("cn-agent", false),
        ("cmon-agent", true),
    ] {
        for m in [&report.images[name], &report.dc_newer[name]] {
            let d = img.get_image_file(m.uuid).await.unwrap();
            assert_eq!(d.content_md5.is_some(), md5, "{name} {}", m.version);
            let bytes = d.verified_bytes().await.unwrap();
            assert_eq!(bytes.len() as u64, m.files[0].size);
        }
        let r = dc
            .updates_client()
            .get_image_file(report.images[name].uuid)
            .await
            .unwrap();
        assert_eq!(r.content_md5.is_some(), md5, "updates server, {name}");
    }
    // The product's install path takes such a file (cn-agent's task runs
    // the installer, which checks size and sha1).
    let cn = dc.server("cn0001").unwrap();
    let cnapi = dc.apis().cnapi;
    let id = cnapi
        .install_agent(cn.uuid, report.dc_newer["vm-agent"].uuid)
        .await
        .unwrap();
    let t = cnapi.wait_task(id, Duration::from_secs(30)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete, "{:?}", t.error_message());
    dc.shutdown().await;

    // The switches: every instance with params, every file with MD5.
    let dc = SimDc::start(SimConfig::default().servers(1).populate(SeedSpec {
        agents_without_params: Vec::new(),
        files_without_md5: Vec::new(),
        ..SeedSpec::default()
    }))
    .await
    .unwrap();
    let instances = dc.apis().sapi.list_agent_instances().await.unwrap();
    assert!(instances.iter().all(|i| i.server_uuid().is_some()));
    let vm = dc.seed_report().unwrap().images["vm-agent"].uuid;
    let d = dc.apis().imgapi.get_image_file(vm).await.unwrap();
    assert!(d.content_md5.is_some());
    dc.shutdown().await;
}

// ---------------------------------------------------------------- IMGAPI

#[tokio::test]
async fn imgapi_import_rewrites_the_owner_and_validates_type_and_version() {
    let dc = SimDc::start(SimConfig::default().servers(0).populate(SeedSpec {
        updates_newer: Some("1.2.0".into()),
        ..SeedSpec::default()
    }))
    .await
    .unwrap();
    let img = dc.apis().imgapi;
    let admin = dc
        .apis()
        .sapi
        .sdc_application()
        .await
        .unwrap()
        .unwrap()
        .metadata["ufds_admin_uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let c = dc.catalog().get("net-agent").unwrap();
    let built = build(&image_spec(c, &BuildOptions::new("2.0.0")));
    assert_eq!(built.manifest.owner, "00000000-0000-0000-0000-000000000000");

    // AdminImportImage into the DC: the unset owner becomes the admin.
    let m = publish_via_client(&img, &built, None).await.unwrap();
    assert_eq!(m.owner, admin);
    // Any other owner must exist (the simulator's UFDS has the admin only).
    let stranger = "4a4a4a4a-0000-4000-8000-000000000001";
    let mut other = build(&image_spec(c, &BuildOptions::new("2.0.1"))).manifest;
    other.owner = stranger.into();
    other.files = Vec::new();
    let err = img.import_manifest(&other).await.unwrap_err();
    assert_eq!(
        api_error(&err),
        (
            422,
            Some("OwnerDoesNotExist".into()),
            format!("owner \"{stranger}\" does not exist")
        )
    );
    let r = raw(
        Method::POST,
        &format!(
            "{}/images/{}?action=import&skip_owner_check=true",
            dc.urls().imgapi,
            other.uuid
        ),
        &[],
        Some(serde_json::to_value(&other).unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["owner"], stranger, "kept");
    // Into the updates server (private mode): any owner is reset.
    let mut to_updates = build(&image_spec(c, &BuildOptions::new("2.0.2"))).manifest;
    to_updates.owner = admin.clone();
    to_updates.files = Vec::new();
    let m = dc
        .updates_client()
        .import_manifest(&to_updates)
        .await
        .unwrap();
    assert_eq!(m.owner, "00000000-0000-0000-0000-000000000000");
    // Importing from the updates server: the admin's again.
    let newest = dc.seed_report().unwrap().updates_newer["vm-agent"].clone();
    let source = format!("{}?channel=dev", dc.urls().updates);
    let imported = img.import_from_source(newest.uuid, &source).await.unwrap();
    assert_eq!(imported.owner, admin);

    // type and version are validated, every failing field at once.
    let url = |uuid: ImageUuid| format!("{}/images/{uuid}?action=import", dc.urls().imgapi);
    let mut body =
        serde_json::to_value(build(&image_spec(c, &BuildOptions::new("2.0.3"))).manifest).unwrap();
    let uuid: ImageUuid = body["uuid"].as_str().unwrap().parse().unwrap();
    body["type"] = json!("agent");
    body["version"] = json!("2.0.3 beta");
    let r = raw(Method::POST, &url(uuid), &[], Some(body.clone()))
        .await
        .unwrap();
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        json!({"code": "ValidationFailed", "message": "invalid image data: version, type",
               "errors": [
                   {"field": "version", "code": "Invalid", "message": "image version has invalid characters (only alpha-numeric characters and \".\", \"-\", \"_\" and \"/\" are allowed)"},
                   {"field": "type", "code": "Invalid", "message": "invalid image type, \"agent\", must be one of: zone-dataset, zvol, lx-dataset, lxd, docker, other"}]})
    );
    let o = body.as_object_mut().unwrap();
    o.remove("type");
    o.remove("version");
    let r = raw(Method::POST, &url(uuid), &[], Some(body.clone()))
        .await
        .unwrap();
    assert_eq!(
        r.json(),
        json!({"code": "ValidationFailed", "message": "invalid image data: version, type",
               "errors": [{"field": "version", "code": "MissingParameter"},
                          {"field": "type", "code": "MissingParameter"}]})
    );
    body["type"] = json!("other");
    body["version"] = json!("2.0.3");
    body["bogus"] = json!(1);
    let r = raw(Method::POST, &url(uuid), &[], Some(body))
        .await
        .unwrap();
    assert_eq!(
        r.json(),
        json!({"code": "InvalidParameter", "message": "invalid extra parameters: \"bogus\"",
               "errors": [{"field": "bogus", "code": "Invalid"}]})
    );
    // CreateImage: the same validation; `state` is never allowed; and the
    // unset owner is no UFDS account.
    let create = format!("{}/images", dc.urls().imgapi);
    let base = json!({"name": "x", "version": "1.0.0", "type": "zone-dataset", "os": "smartos",
                      "owner": admin});
    let mut bad = base.clone();
    bad["os"] = json!("plan9");
    let r = raw(Method::POST, &create, &[], Some(bad)).await.unwrap();
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (422, json!("invalid image data: os"))
    );
    let mut with_state = base.clone();
    with_state["state"] = json!("active");
    let r = raw(Method::POST, &create, &[], Some(with_state))
        .await
        .unwrap();
    assert_eq!(
        r.json(),
        json!({"code": "ValidationFailed", "message": "invalid image data: \"state\"",
               "errors": [{"field": "state", "code": "NotAllowed", "message": "Parameter cannot be set"}]})
    );
    let mut unset = base.clone();
    unset["owner"] = json!("00000000-0000-0000-0000-000000000000");
    let r = raw(Method::POST, &create, &[], Some(unset)).await.unwrap();
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (422, json!("OwnerDoesNotExist"))
    );
    let r = raw(Method::POST, &create, &[], Some(base)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    dc.shutdown().await;
}

#[tokio::test]
async fn imgapi_get_image_answers_if_none_match_with_304() {
    let dc = small_dc(0).await;
    let uuid = dc.seed_report().unwrap().images["vm-agent"].uuid;
    let url = format!("{}/images/{uuid}", dc.urls().imgapi);
    let first = raw(Method::GET, &url, &[], None).await.unwrap();
    let etag = first.header("etag").unwrap();
    let again = raw(Method::GET, &url, &[("if-none-match", etag.as_str())], None)
        .await
        .unwrap();
    assert_eq!((again.status, again.text.as_str()), (304, ""));
    let quoted = format!("\"{etag}\"");
    let again = raw(
        Method::GET,
        &url,
        &[("if-none-match", quoted.as_str())],
        None,
    )
    .await
    .unwrap();
    assert_eq!(again.status, 304);
    // The ETag covers the serialization: a v2 client sees another body.
    let v2 = raw(
        Method::GET,
        &url,
        &[("if-none-match", etag.as_str()), ("accept-version", "~2")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(v2.status, 304, "the DC IMGAPI has no channels: same body");
    // The file's sha1 is not the manifest's ETag.
    let sha1 = first.json()["files"][0]["sha1"]
        .as_str()
        .unwrap()
        .to_string();
    let other = raw(Method::GET, &url, &[("if-none-match", sha1.as_str())], None)
        .await
        .unwrap();
    assert_eq!(other.status, 200);
    dc.shutdown().await;
}

// ---------------------------------------------------------------- CNAPI

/// `agentsadm gz <args> --json` through execute with `env`, raw answer.
async fn execute_raw(
    dc: &SimDc,
    server: agentsadm_types::ids::ServerUuid,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Option<u64>,
) -> Raw {
    try_execute_raw(dc, server, args, env, timeout)
        .await
        .unwrap()
}

/// [`execute_raw`], the connection's failure included.
async fn try_execute_raw(
    dc: &SimDc,
    server: agentsadm_types::ids::ServerUuid,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Option<u64>,
) -> Result<Raw, reqwest::Error> {
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    argv.push("--json".into());
    let mut req = gz_execute_request(
        &argv,
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    req.timeout = timeout;
    raw(
        Method::POST,
        &format!("{}/servers/{server}/execute", dc.urls().cnapi),
        &[],
        Some(serde_json::to_value(&req).unwrap()),
    )
    .await
}

/// Wait until the simulated CNAPI is back from a crash.
async fn cnapi_back(dc: &SimDc) {
    let deadline = Instant::now() + crate::HANG_BOUND;
    while dc.cnapi_down() {
        assert!(Instant::now() < deadline, "CNAPI never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn cnapi_execute_goes_through_ur_by_default() {
    assert_eq!(SimConfig::default().execute_transport, ExecuteTransport::Ur);
    // CNAPI's own hour to wait for Ur: a command that ends must never meet
    // it, however slow the machine (a gz install here took over 0.4 s
    // under load).
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .cnapi_restart(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    // A timeout through Ur: CNAPI 1.26.6 dies before answering (its
    // refusal logs through an undefined logger), and SMF restarts it.
    let r = try_execute_raw(&dc, cn.uuid, &["gz", "report"], &[], Some(30_000)).await;
    assert!(r.is_err(), "no answer at all: {r:?}");
    assert_eq!(dc.cnapi_crashes(), 1);
    assert!(dc.cnapi_down());
    cnapi_back(&dc).await;
    let r = execute_raw(&dc, cn.uuid, &["gz", "report"], &[], None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(keys(&r.json()), ["exitCode", "stderr", "stdout"]);
    assert_eq!(r.json()["exitCode"], 0);
    // Through Ur nothing says "inside cn-agent": cn-agent replacing itself
    // is installed in line.
    let new = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let r = execute_raw(
        &dc,
        cn.uuid,
        &["gz", "install", &new.uuid.to_string()],
        &[],
        None,
    )
    .await;
    let result: GzResult = serde_json::from_str(r.json()["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(
        result.components[0].action,
        ComponentAction::Upgraded,
        "{result:?}"
    );
    assert!(
        result
            .warnings
            .iter()
            .all(|w| !w.contains("agentsadm-install"))
    );
    dc.shutdown().await;
    // A command that never ends: CNAPI stops waiting for Ur's reply (a
    // short wait of its own, which only a hung command meets).
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .ur_reply_timeout(Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let new = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    dc.faults().hang_tasks_on(cn.uuid);
    let r = execute_raw(
        &dc,
        cn.uuid,
        &["gz", "install", &new.uuid.to_string()],
        &[],
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            500,
            json!({"message": "Timed out waiting for ur response after 0.4 seconds"})
        )
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_execute_through_cn_agent_passes_exactly_the_request_env() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(3)
            .execute_transport(ExecuteTransport::CnAgent),
    )
    .await
    .unwrap();
    let fmri = dc.catalog().get("cn-agent").unwrap().smf_services[0].clone();
    let new = dc
        .publish_component("cn-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let image = new.uuid.to_string();
    // No SMF_FMRI in the request: the command does not see one, so the
    // installer does not hand itself off.
    let cn1 = dc.server("cn0001").unwrap();
    let r = execute_raw(&dc, cn1.uuid, &["gz", "install", &image], &[], Some(30_000)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        keys(&r.json()),
        ["err", "exitCode", "signal", "stderr", "stdout", "req_id"]
    );
    assert_eq!(r.json()["err"], Value::Null);
    let result: GzResult = serde_json::from_str(r.json()["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(
        result.components[0].action,
        ComponentAction::Upgraded,
        "{result:?}"
    );
    // SMF_FMRI in the request reaches the command, but proves nothing
    // (any caller can send it): no hand-off.
    let cn3 = dc.server("cn0003").unwrap();
    let r = execute_raw(
        &dc,
        cn3.uuid,
        &["gz", "install", &image],
        &[("SMF_FMRI", &fmri)],
        Some(30_000),
    )
    .await;
    let result: GzResult = serde_json::from_str(r.json()["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(
        result.components[0].action,
        ComponentAction::Upgraded,
        "{result:?}"
    );
    // The command line says it runs inside cn-agent: it hands off.
    let cn2 = dc.server("cn0002").unwrap();
    let r = execute_raw(
        &dc,
        cn2.uuid,
        &["gz", "install", &image, "--inside-cn-agent"],
        &[],
        Some(30_000),
    )
    .await;
    let result: GzResult = serde_json::from_str(r.json()["stdout"].as_str().unwrap()).unwrap();
    assert!(
        result
            .warnings
            .iter()
            .any(|w| w.contains("agentsadm-install")),
        "{result:?}"
    );
    // A failing command: forkexec's error in `err`.
    let r = execute_raw(&dc, cn1.uuid, &["gz", "frobnicate"], &[], Some(30_000)).await;
    let j = r.json();
    assert_ne!(j["exitCode"], 0);
    let message = j["err"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("exec \"/tmp/cnagent-") && message.contains("\": exited with status "),
        "{message}"
    );
    // cn-agent kills a command on its timeout with SIGKILL.
    dc.faults().hang_tasks_on(cn1.uuid);
    let r = execute_raw(&dc, cn1.uuid, &["gz", "install", &image], &[], Some(200)).await;
    let j = r.json();
    assert_eq!(
        (j["exitCode"].clone(), j["signal"].clone()),
        (Value::Null, json!("SIGKILL"))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn mockcloud_servers_refuse_execute() {
    let strict = Strictness {
        mockcloud_refuses_execute: true,
        ..Strictness::default()
    };
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .gz_layout(GzLayout::Mockcloud)
            .strictness(strict.clone())
            .ur_reply_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert_eq!(strict, Strictness::default(), "refusing is the default");
    let cn = dc.server("cn0001").unwrap();
    // They say what they are, as real mockcloud CNs do.
    let rec = dc.apis().cnapi.get_server(cn.uuid).await.unwrap();
    assert_eq!(rec.extra["system_type"], "Virtual");
    assert_eq!(rec.sysinfo.unwrap()["System Type"], "Virtual");
    // Through Ur: nothing answers; CNAPI gives up with a plain 500.
    let started = Instant::now();
    let r = execute_raw(&dc, cn.uuid, &["gz", "report"], &[], None).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        (r.status, r.json()),
        (
            500,
            json!({"message": "Timed out waiting for ur response after 0.3 seconds"})
        )
    );
    let err = dc
        .apis()
        .cnapi
        .execute(
            cn.uuid,
            &ExecuteRequest {
                script: "#!/bin/bash\ntrue\n".into(),
                ..Default::default()
            },
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(500));
    // cn-agent tasks still work on mockcloud servers.
    let vm = dc.seed_report().unwrap().images["vm-agent"].uuid;
    let id = dc.apis().cnapi.install_agent(cn.uuid, vm).await.unwrap();
    let t = dc
        .apis()
        .cnapi
        .wait_task(id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Complete, "{:?}", t.error_message());
    dc.shutdown().await;

    // Through cn-agent: its mockcloud backend answers exit 666.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .gz_layout(GzLayout::Mockcloud)
            .strictness(strict)
            .execute_transport(ExecuteTransport::CnAgent),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let r = execute_raw(&dc, cn.uuid, &["gz", "report"], &[], Some(10_000)).await;
    let j = r.json();
    assert_eq!(j["exitCode"], 666);
    assert_eq!(
        j["stderr"],
        "cn-agent: command_execute not implemented for mockcloud servers\n"
    );
    assert_eq!(j["stdout"], "");
    dc.shutdown().await;
}
