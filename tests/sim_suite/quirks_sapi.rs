//! Client-level tests of SAPI's wire quirks that the simulator reproduces
//! (docs/triton/apis.md §5): v1 views, filters, create/update/delete
//! semantics, and UpgradeInstance dropping the connection.

use crate::sim_common;

use std::time::Duration;

use agentsadm_api::ApiError;
use agentsadm_api::sapi::CreateInstance;
use agentsadm_api::sapi::ServiceType;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::UpdateAction;
use agentsadm_api::sapi::object;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;
use reqwest::Method;
use serde_json::json;
use sim_common::{get, get_v2, raw, small_dc};

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

/// The real SAPI sets no body limit (a 3.9 MB application metadata body
/// was accepted, apis.md §2.10): a 601-server `update --all` mirrors its
/// history into the `sdc` application's metadata with a body that size.
/// axum's default would refuse anything over 2 MB with 413.
#[tokio::test]
async fn sapi_takes_a_body_as_large_as_the_real_one_does() {
    let dc = small_dc(1).await;
    let sapi = dc.apis().sapi;
    let sdc = sapi.sdc_application().await.unwrap().unwrap();
    // 4,000,000 bytes of metadata, past the real 3.9 MB figure.
    let big = "x".repeat(4_000_000);
    let updated = sapi
        .update_application(
            sdc.uuid,
            &Update::metadata(object([("agentsadm_big", json!(big))])),
        )
        .await
        .unwrap();
    assert_eq!(
        updated.metadata["agentsadm_big"].as_str().map(str::len),
        Some(4_000_000)
    );
    dc.shutdown().await;
}
