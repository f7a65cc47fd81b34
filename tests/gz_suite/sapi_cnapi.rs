//! SAPI adoption (CreateInstance / UpdateInstance with params.server_uuid
//! and params.image_uuid, never UpgradeInstance), SAPI instance removal, and
//! the CNAPI `server.agents` report.

use crate::gz_common::*;
use agentsadm_sim::standin::ImgapiStandIn;

#[tokio::test]
async fn adopts_updates_and_reports() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let svc = apis.add_service("vm-agent");
    let srv = TestServer::new(false);
    let env = apis.env(&imgapi.url());
    let v1 = image("vm-agent", "1.0.0");
    let v2 = image("vm-agent", "2.0.0");
    let tools = image("gz-tools", "1.0.0");
    for i in [&v1, &v2, &tools] {
        imgapi.publish(i);
    }
    // Install: the instance is created with the kept UUID and params.
    let r = ok(&srv
        .gz(
            &[
                "install",
                &v1.manifest.uuid.to_string(),
                &tools.manifest.uuid.to_string(),
            ],
            &env,
        )
        .await);
    let instance = srv.instance("vm-agent").unwrap();
    {
        let st = apis.state.lock().unwrap();
        let inst = &st.instances[&instance];
        assert_eq!(inst["service_uuid"], svc.as_str());
        assert_eq!(inst["params"]["server_uuid"], srv.uuid.to_string().as_str());
        assert_eq!(
            inst["params"]["image_uuid"],
            v1.manifest.uuid.to_string().as_str()
        );
        // Reported to CNAPI with every component, gz-tools included.
        let post = st.server_posts.last().unwrap();
        let names: Vec<&str> = post["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["gz-tools", "vm-agent"]);
        assert!(st.calls.contains(&format!("POST /servers/{}", srv.uuid)));
    }
    // gz-tools has no SAPI service: skipped, and said so.
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("gz-tools: not adopted into SAPI")),
        "{:?}",
        r.warnings
    );
    // Upgrade: UpdateInstance, never UpgradeInstance.
    ok(&srv
        .gz(&["install", &v2.manifest.uuid.to_string()], &env)
        .await);
    {
        let st = apis.state.lock().unwrap();
        assert_eq!(
            st.instances[&instance]["params"]["image_uuid"],
            v2.manifest.uuid.to_string().as_str()
        );
        assert!(st.calls.contains(&format!("PUT /instances/{instance}")));
        assert!(
            !st.calls.iter().any(|c| c.ends_with("/upgrade")),
            "{:?}",
            st.calls
        );
        assert_eq!(
            st.calls.iter().filter(|c| *c == "POST /instances").count(),
            1
        );
    }
    // Report --post.
    let out = srv.gz(&["report", "--post"], &env).await;
    assert_eq!(out.exit_status, 0, "{}", out.stderr);
    // Remove deletes the SAPI instance.
    ok(&srv.gz(&["remove", "vm-agent"], &env).await);
    let st = apis.state.lock().unwrap();
    assert!(!st.instances.contains_key(&instance));
    let post = st.server_posts.last().unwrap();
    assert_eq!(post["agents"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn missing_api_urls_are_refused_up_front() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let f = write_image(&image("vm-agent", "1.0.0"), dir.path());
    let before = snapshot(srv.root());
    let out = srv
        .gz(&["install", f.to_str().unwrap()], &Default::default())
        .await;
    let msg = failed(&out);
    assert!(
        msg.contains("no SAPI URL") && msg.contains("--no-sapi"),
        "{msg}"
    );
    assert_same(&before, &snapshot(srv.root()), "no SAPI URL");
    // CNAPI unreachable after a good install: a warning, not a failure.
    let env = std::collections::BTreeMap::from([(
        "CNAPI_URL".to_string(),
        "http://127.0.0.1:9".to_string(),
    )]);
    let out = srv
        .gz(
            &[
                "install",
                f.to_str().unwrap(),
                "--no-sapi",
                "--api-retries",
                "0",
            ],
            &env,
        )
        .await;
    let r = ok(&out);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("not reported to CNAPI")),
        "{:?}",
        r.warnings
    );
}

/// A reboot after an install's SAPI write and before its commit: the
/// rollback takes the instance file, so the next install keeps a new UUID.
/// The record the first one left (same service, same server) goes; another
/// server's instance of that service stays. (The harness's cn-setup-reboot
/// found config-agent with two instances for one server.)
#[tokio::test]
async fn a_fresh_install_replaces_the_record_an_interrupted_one_left() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let svc = apis.add_service("vm-agent");
    let srv = TestServer::new(false);
    let env = apis.env(&imgapi.url());
    let v1 = image("vm-agent", "1.0.0");
    let tools = image("gz-tools", "1.0.0");
    for i in [&v1, &tools] {
        imgapi.publish(i);
    }
    let left = "0badc0de-0000-4000-8000-000000000001";
    let other = "0badc0de-0000-4000-8000-000000000002";
    let other_server = "0badc0de-0000-4000-8000-0000000000ff";
    {
        let mut st = apis.state.lock().unwrap();
        for (uuid, server) in [
            (left, srv.uuid.to_string()),
            (other, other_server.to_string()),
        ] {
            st.instances.insert(
                uuid.to_string(),
                serde_json::json!({
                    "uuid": uuid, "service_uuid": svc.as_str(), "type": "agent",
                    "params": {"server_uuid": server, "image_uuid": v1.manifest.uuid.to_string()}
                }),
            );
        }
    }
    ok(&srv
        .gz(
            &[
                "install",
                &v1.manifest.uuid.to_string(),
                &tools.manifest.uuid.to_string(),
            ],
            &env,
        )
        .await);
    let instance = srv.instance("vm-agent").unwrap();
    let st = apis.state.lock().unwrap();
    let this_server: Vec<&String> = st
        .instances
        .iter()
        .filter(|(_, i)| i["params"]["server_uuid"] == srv.uuid.to_string().as_str())
        .map(|(u, _)| u)
        .collect();
    assert_eq!(
        this_server,
        vec![&instance.to_string()],
        "{:?}",
        st.instances
    );
    assert!(st.instances.contains_key(other), "{:?}", st.instances);
    assert!(st.calls.contains(&format!("DELETE /instances/{left}")));
}
