//! Adoption against SAPI as it really is (issue 13): SAPI overwrites an
//! instance re-posted with CreateInstance and deletes it when that
//! re-create fails, so an instance SAPI already has is completed with
//! UpdateInstance; CreateInstance never sends a null `service_uuid`.
//! Simulator with `Strictness::sapi_delete_on_failed_create` on.

use agentsadm_api::sapi::CreateInstance;

use agentsadm_api::sapi::Update;

use agentsadm_api::sapi::UpdateAction;

use agentsadm_api::sapi::object;
use agentsadm_orchestrate::adopt;
use agentsadm_orchestrate::gather;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::Strictness;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopting_existing_instances_never_re_posts_them() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(3)
            .strictness(Strictness {
                sapi_delete_on_failed_create: true,
                ..Strictness::default()
            })
            // Every other instance with its params, so that cmon-agent's
            // are the only ones to complete.
            .populate(SeedSpec {
                agents_without_params: Vec::new(),
                ..SeedSpec::default()
            }),
    )
    .await
    .expect("simulator starts");
    let apis = dc.apis();
    let catalog = dc.catalog().clone();
    // cmon-agent's instances lose their params: adoption must complete
    // them in place.
    let services = apis.sapi.list_agent_services().await.unwrap();
    let cmon = services.iter().find(|s| s.name == "cmon-agent").unwrap();
    let before = apis.sapi.list_service_instances(cmon.uuid).await.unwrap();
    assert!(!before.is_empty());
    for i in &before {
        let strip = Update {
            action: Some(UpdateAction::Delete),
            params: Some(object([
                ("server_uuid", serde_json::Value::Null),
                ("image_uuid", serde_json::Value::Null),
            ])),
            metadata: None,
        };
        apis.sapi.update_instance(i.uuid, &strip).await.unwrap();
    }
    let (intent, reality) = gather::gather(&apis, &catalog).await.unwrap();
    let plan = adopt::plan_adoption(&catalog, &intent, &reality, None);
    assert_eq!(plan.instances.len(), before.len(), "{}", plan.render());
    assert!(plan.instances.iter().all(|i| i.exists));

    // Every CreateInstance would fail now, and SAPI would delete the
    // instance it re-created.
    dc.faults().fail_sapi_writes(1000);
    let report = crate::flows_common::adopt_yes(&apis, &catalog).await;
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.instances_adopted, before.len());

    let after = apis.sapi.list_service_instances(cmon.uuid).await.unwrap();
    assert_eq!(after.len(), before.len(), "no instance was lost");
    for i in &after {
        assert!(
            i.server_uuid().is_some() && i.image_uuid().is_some(),
            "{i:?}"
        );
    }
    let (intent, reality) = gather::gather(&apis, &catalog).await.unwrap();
    assert!(adopt::plan_adoption(&catalog, &intent, &reality, None).is_empty());
    dc.shutdown().await;
}

#[test]
fn create_instance_omits_an_unset_service() {
    let body = serde_json::to_value(CreateInstance {
        uuid: None,
        service_uuid: None,
        params: Some(object([("a", serde_json::json!(1))])),
        metadata: None,
        exists: None,
    })
    .unwrap();
    assert!(body.get("service_uuid").is_none(), "{body}");
}

/// A real headnode has no gz-tools or sdcadm service and cn-agent does not
/// report either: adoption creates both (RFD 82 M5), once.
#[test]
fn adoption_creates_the_gz_tools_and_sdcadm_services_a_headnode_lacks() {
    use agentsadm_sim::testkit::ExampleDc;
    let mut dc = ExampleDc::new(1);
    let hn = dc.server_named("headnode");
    dc.unmanage("gz-tools");
    dc.unmanage("sdcadm");
    dc.remove_installed(hn, "gz-tools");
    dc.remove_installed(hn, "sdcadm");
    let plan = adopt::plan_adoption(&dc.catalog, &dc.intent(), &dc.reality(), None);
    let mut names: Vec<&str> = plan
        .new_services
        .iter()
        .map(|s| s.component.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["gz-tools", "sdcadm"], "{}", plan.render());
    assert!(plan.render().contains("gz-tools"), "{}", plan.render());

    // Once they exist, nothing more.
    dc.manage("gz-tools");
    dc.manage("sdcadm");
    let again = adopt::plan_adoption(&dc.catalog, &dc.intent(), &dc.reality(), None);
    assert!(again.new_services.is_empty(), "{}", again.render());
}

/// One adoption rule (`agentsadm_api::adoption`) for every adopter: the
/// instance UUID a server keeps for cmon-agent is recorded in SAPI under
/// vm-agent's service. `adopt` plans nothing for it (and says why), the
/// orchestrator's SAPI write after an install refuses it, and so does the
/// GZ installer's adoption; the other service's record stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_recorded_under_another_service_is_never_taken_over() {
    use agentsadm_orchestrate::store::IntentStore;
    use agentsadm_orchestrate::store::IntentWriteError;
    use agentsadm_orchestrate::store::SapiIntentStore;
    let dc = SimDc::start(SimConfig::default().servers(2).populate(SeedSpec {
        agents_without_params: Vec::new(),
        ..SeedSpec::default()
    }))
    .await
    .expect("simulator starts");
    let apis = dc.apis();
    let catalog = dc.catalog().clone();
    let cn = dc.server("cn0001").unwrap().uuid;
    let kept = dc
        .server_agents(cn)
        .into_iter()
        .find(|a| a.name == "cmon-agent")
        .and_then(|a| a.uuid)
        .expect("cn0001 keeps a cmon-agent instance UUID");
    let image = dc.default_image("cmon-agent").unwrap();
    let services = apis.sapi.list_agent_services().await.unwrap();
    let svc = |name: &str| services.iter().find(|s| s.name == name).unwrap().uuid;
    // The UUID is now vm-agent's record (no params).
    apis.sapi.delete_instance(kept).await.unwrap();
    apis.sapi
        .create_instance(&CreateInstance {
            uuid: Some(kept),
            service_uuid: Some(svc("vm-agent")),
            ..Default::default()
        })
        .await
        .unwrap();
    let record = apis.sapi.get_instance(kept).await.unwrap();

    let (intent, reality) = gather::gather(&apis, &catalog).await.unwrap();
    let plan = adopt::plan_adoption(&catalog, &intent, &reality, None);
    assert!(
        !plan.instances.iter().any(|i| i.instance == kept),
        "{}",
        plan.render()
    );
    let skip = plan
        .skips
        .iter()
        .find(|s| s.server == cn && s.component == "cmon-agent")
        .expect("a skip says why");
    assert!(
        skip.reason.contains("under another service"),
        "{}",
        skip.reason
    );

    let store = SapiIntentStore::new(apis.sapi.clone());
    let change = agentsadm_plan::IntentChange::AdoptInstalled {
        component: "cmon-agent".parse().unwrap(),
        service: svc("cmon-agent"),
        image,
    };
    let err = store.apply(cn, &change, Some(kept)).await.unwrap_err();
    assert!(
        matches!(err, IntentWriteError::OtherService { .. }),
        "{err}"
    );

    let err = agentsadm_gz::adopt::adopt(&apis.sapi, "cmon-agent", kept, cn, image)
        .await
        .unwrap_err();
    assert!(
        matches!(err, agentsadm_gz::adopt::AdoptError::OtherService { .. }),
        "{err}"
    );
    assert_eq!(apis.sapi.get_instance(kept).await.unwrap(), record);
    dc.shutdown().await;
}
