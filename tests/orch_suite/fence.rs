//! Fenced plans (issue 14) against the simulated datacenter: `check --fix`
//! plans its repairs under the lock, and repairs that changed between the
//! prompt and execution are shown and asked about again, never executed
//! unconfirmed. The same [`fence`] runs `update`, `install` and `remove`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicBool;

use agentsadm_api::sapi::Update;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckError;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::FixOutcome;
use agentsadm_flows::check::RepairOptions;
use agentsadm_flows::repair::FixPlan;
use agentsadm_orchestrate::fence::Fenced;
use agentsadm_orchestrate::fence::fence;
use agentsadm_orchestrate::report::Halted;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::ImageUuid;

use crate::flows_common::exec_options;

use crate::flows_common::instance_of;

use crate::flows_common::server;

use crate::flows_common::small_dc;

use crate::flows_common::transport;

async fn fix_plan(dc: &SimDc) -> Result<FixPlan, CheckError> {
    let request = CheckRequest {
        servers: Vec::new(),
        live: false,
    };
    let run = check::check(&dc.apis(), dc.catalog(), &request, &CheckConfig::default()).await?;
    Ok(FixPlan::new(run, dc.catalog()))
}

/// SAPI's vm-agent instance of `hostname` names `image`: drift that
/// `check --fix` repairs with an upgrade.
async fn intend(dc: &SimDc, hostname: &str, image: ImageUuid) {
    let cn = server(dc, hostname);
    let inst = instance_of(dc, cn, "vm-agent").await.expect("an instance");
    dc.apis()
        .sapi
        .update_instance(inst.uuid, &Update::params(instance_params(cn, image)))
        .await
        .expect("SAPI update");
}

/// Carry out `plan`'s repairs (all servers, no live check); `lock_lost`
/// as `check --fix` passes it.
async fn fix(dc: &SimDc, plan: &FixPlan, lock_lost: Option<&AtomicBool>) -> FixOutcome {
    let request = CheckRequest {
        servers: Vec::new(),
        live: false,
    };
    check::fix(
        &dc.apis(),
        dc.catalog(),
        &request,
        &CheckConfig::default(),
        &plan.repairs,
        RepairOptions {
            exec: &exec_options(),
            transport: &transport(),
            reporter: &NullReporter,
            lock_lost,
        },
        std::future::pending(),
    )
    .await
    .expect("fix runs")
}

fn hosts(p: &FixPlan) -> Vec<String> {
    p.repairs
        .plan
        .servers_in_order()
        .into_iter()
        .map(|(_, sp)| sp.hostname.clone())
        .collect()
}

fn vm_agent_image(dc: &SimDc, hostname: &str) -> Option<ImageUuid> {
    dc.server_agents(server(dc, hostname))
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .and_then(|a| a.image_uuid)
}

/// While the operator reads the repairs for cn0001, someone points
/// cn0002's instance at the new build too. The re-plan after the yes
/// differs: it is shown and asked about again. Declined: nothing runs, on
/// either server. Confirmed: what runs is the second plan, the one shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_repairs_changed_after_the_prompt_are_not_executed() {
    for second_answer in [false, true] {
        let dc = small_dc().await;
        let before = vm_agent_image(&dc, "cn0001");
        let newer = dc
            .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
            .unwrap()
            .uuid;
        intend(&dc, "cn0001", newer).await;
        let first = fix_plan(&dc).await.unwrap();
        assert_eq!(hosts(&first), ["cn0001"]);
        let asked = Cell::new(0);
        let shown = RefCell::new(Vec::new());
        let fenced = fence(
            first,
            false,
            |p: &FixPlan| p.repairs.is_empty(),
            async |_: &FixPlan| -> Result<bool, CheckError> {
                asked.set(asked.get() + 1);
                if asked.get() == 1 {
                    // The change lands while the question is on screen.
                    intend(&dc, "cn0002", newer).await;
                    return Ok(true);
                }
                Ok(second_answer)
            },
            async || fix_plan(&dc).await,
            |p| shown.borrow_mut().push(hosts(p)),
        )
        .await
        .unwrap();
        assert_eq!(asked.get(), 2, "asked again about the changed repairs");
        assert_eq!(shown.into_inner(), [["cn0001", "cn0002"]]);
        if !second_answer {
            assert!(matches!(fenced, Fenced::Declined));
            for h in ["cn0001", "cn0002"] {
                assert_eq!(vm_agent_image(&dc, h), before, "{h} was not touched");
            }
            dc.shutdown().await;
            continue;
        }
        let Fenced::Confirmed(confirmed) = fenced else {
            panic!("the changed repairs were confirmed: {fenced:?}")
        };
        assert_eq!(hosts(&confirmed), ["cn0001", "cn0002"]);
        let outcome = fix(&dc, &confirmed, None).await;
        assert_eq!(outcome.exit_status(), 0, "{}", outcome.after.render());
        for h in ["cn0001", "cn0002"] {
            assert_eq!(vm_agent_image(&dc, h), Some(newer), "{h}");
        }
        dc.shutdown().await;
    }
}

/// Another process broke the datacenter lock `check --fix` holds: no
/// repaired server starts and no SAPI write is made; the run ends with
/// exit status 2 and the drift still there to repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_under_a_broken_lock_starts_no_server() {
    let dc = small_dc().await;
    let before = vm_agent_image(&dc, "cn0001");
    let newer = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    intend(&dc, "cn0001", newer).await;
    let plan = fix_plan(&dc).await.unwrap();
    assert_eq!(hosts(&plan), ["cn0001"]);
    let lost = AtomicBool::new(true);
    let outcome = fix(&dc, &plan, Some(&lost)).await;
    let servers = outcome.repairs.servers.as_ref().expect("server steps ran");
    assert_eq!(servers.halted, Some(Halted::LockLost));
    assert_eq!(outcome.exit_status(), 2);
    assert_eq!(
        vm_agent_image(&dc, "cn0001"),
        before,
        "cn0001 was not touched"
    );
    assert_eq!(hosts(&fix_plan(&dc).await.unwrap()), ["cn0001"]);
    dc.shutdown().await;
}
