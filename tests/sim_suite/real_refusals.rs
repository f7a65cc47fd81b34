//! Refusals the real services showed in the real-Triton harness
//! (`tests/real-triton`, checks api-refusals and twin), kept by the
//! simulator: CNAPI's ServerSetup and ServerFactoryReset check their
//! parameters' types as `ensureParamsValid` does (HTTP 500
//! InvalidParameters, and no job starts), ServerSetup's disk_layout
//! refusal says what is allowed, and a known path with a wrong method is
//! restify's 405 MethodNotAllowedError on CNAPI, SAPI and IMGAPI.

use crate::sim_common;

use reqwest::Method;
use serde_json::{Value, json};
use sim_common::{raw, small_dc};

#[tokio::test]
async fn cnapi_setup_and_reset_refuse_bad_parameters_and_methods_as_the_real_ones() {
    let dc = small_dc(2).await;
    let cn1 = dc.server("cn0001").unwrap();
    let urls = dc.urls().clone();
    let setup = format!("{}/servers/{}/setup", urls.cnapi, cn1.uuid);
    let reset = format!("{}/servers/{}/factory-reset", urls.cnapi, cn1.uuid);
    // (url, body, the field CNAPI names, its message)
    let cases = [
        (
            &setup,
            json!({"hostname": 5}),
            "hostname",
            "value was not a string",
        ),
        (
            &setup,
            json!({"nics": "aa:bb"}),
            "nics",
            "value was not an array",
        ),
        (
            &setup,
            json!({"disk_spares": "x"}),
            "disk_spares",
            "value was not a number",
        ),
        (
            &setup,
            json!({"disk_width": -1}),
            "disk_width",
            "value was not greater than or equal to zero",
        ),
        (
            &setup,
            json!({"disk_cache": "maybe"}),
            "disk_cache",
            "value was not 'true' or 'false'",
        ),
        (
            &reset,
            json!({"origin": 5}),
            "origin",
            "value was not a string",
        ),
        (
            &reset,
            json!({"creator_uuid": ["x", "y"]}),
            "creator_uuid",
            "value was not a string",
        ),
    ];
    for (url, body, field, message) in cases {
        let r = raw(Method::PUT, url, &[], Some(body.clone()))
            .await
            .unwrap();
        assert_eq!(r.status, 500, "{url} {body}: {}", r.text);
        let v = r.json();
        assert_eq!(v["code"], "InvalidParameters", "{body}: {v}");
        assert_eq!(v["message"], "Request parameters failed validation", "{v}");
        assert_eq!(
            v["errors"],
            json!([{"field": field, "code": "Invalid", "message": message}]),
            "{body}"
        );
    }
    // Accepted types are not refused: a boolean string and a number string.
    let ok = raw(
        Method::PUT,
        &setup,
        &[],
        Some(json!({"disk_cache": "TRUE", "disk_spares": "1"})),
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 204, "cn0001 is set up already: {}", ok.text);
    let layout = raw(
        Method::PUT,
        &setup,
        &[],
        Some(json!({"disk_layout": "raid0"})),
    )
    .await
    .unwrap();
    assert_eq!(layout.status, 409, "{}", layout.text);
    assert_eq!(
        layout.json(),
        json!({"code": "InvalidArgument",
               "message": "disk_layout must be one of: 'single', 'mirror', 'raidz1', 'raidz2', 'raidz3'"})
    );
    // None of the refused resets started a job: cn0001 is still set up.
    let rec = raw(
        Method::GET,
        &format!("{}/servers/{}", urls.cnapi, cn1.uuid),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(rec.json()["setup"], Value::Bool(true));
    // A known path with a method it does not take.
    for (method, url) in [
        (Method::DELETE, setup.clone()),
        (Method::DELETE, format!("{}/applications", urls.sapi)),
        (Method::PATCH, format!("{}/images", urls.imgapi)),
    ] {
        let r = raw(method.clone(), &url, &[], None).await.unwrap();
        assert_eq!(r.status, 405, "{method} {url}: {}", r.text);
        assert_eq!(
            r.json(),
            json!({"code": "MethodNotAllowedError", "message": format!("{method} is not allowed")}),
            "{method} {url}"
        );
    }
}

/// SAPI's SetMode (POST /mode) as the real SAPI 2.1.3 answers it (the
/// harness's api-refusals check, sapi-mode-*): no `mode` is restify's
/// MissingParameter, a mode other than `full` is InvalidArgument, both 409;
/// `full` is 204 and GET /mode then says "full".
#[tokio::test]
async fn sapi_set_mode_refuses_as_the_real_one() {
    let dc = small_dc(1).await;
    let mode = format!("{}/mode", dc.urls().sapi);
    let cases = [
        (
            mode.clone(),
            "MissingParameter",
            "missing \"mode\" parameter",
        ),
        (
            format!("{mode}?mode="),
            "MissingParameter",
            "missing \"mode\" parameter",
        ),
        (
            format!("{mode}?mode=proto"),
            "InvalidArgument",
            "invalid mode: proto",
        ),
    ];
    for (url, code, message) in cases {
        let r = raw(Method::POST, &url, &[], None).await.unwrap();
        assert_eq!(r.status, 409, "{url}: {}", r.text);
        assert_eq!(r.json(), json!({"code": code, "message": message}), "{url}");
    }
    let full = raw(Method::POST, &format!("{mode}?mode=full"), &[], None)
        .await
        .unwrap();
    assert_eq!(full.status, 204, "{}", full.text);
    let now = raw(Method::GET, &mode, &[], None).await.unwrap();
    assert_eq!(now.json(), json!("full"));
}
