//! One server's execute-carried installs in one `agentsadm gz install A B
//! ...` (issue 35: the gates of one server's components overlap).
//!
//! Why: a step through execute is gated inside the installer's
//! transaction (an unhealthy build is rolled back before SAPI hears of
//! it, and nothing unchecked is ever recorded), and every `gz install`
//! run holds the server's lock for its whole length, gate included. Sent
//! one execute per step, sdcadm and dockerlogger (one transient service
//! each, a 10 s minimum) queue on that lock: two gates in series. The
//! installer already runs the parallel-safe components named in one run
//! at once, each in its own transaction with its own gate, so sent
//! together their gates overlap: one CNAPI CommandExecute, about one gate.
//!
//! The design, end to end:
//!
//! - **Which steps** (the plan decides, purely:
//!   [`agentsadm_plan::ServerPlan::execute_groups`]): two or more steps of
//!   one parallel-safe batch of one server, each an install or upgrade
//!   through execute gated in the installer, with the image before known
//!   (its own expectation), nothing sent after it (no `gz disable` to keep
//!   it off) and not cn-agent (core-last, never in such a batch). The
//!   plan's order is kept: a group never spans two batches, so what must
//!   come first (core-first, core-second, agentsadm itself) still runs
//!   before, alone, and cn-agent still runs last; the cn-agent tasks of
//!   the batch still run before the group (the installer's report reads
//!   the disk last).
//! - **Old copies**: each member states the image it expects with `--expect
//!   NAME=IMAGE|none`, a word dated 0.3.0
//!   ([`agentsadm_types::compat::TOGETHER`]). The plan groups only where
//!   the agentsadm that runs the steps parses it
//!   ([`agentsadm_plan::ServerPlan::execute_together`]); elsewhere each
//!   step goes alone as before, and no agentsadm step is added just to
//!   group.
//! - **Each component's outcome stays its own**: the result document lists
//!   the members that completed (with their instance UUIDs, for the
//!   adoption after the steps); its `error` names the first that failed
//!   and each other failure is a warning the orchestrator reads back
//!   ([`agentsadm_api::remote::GzFailure::from_also_failed`]). A member
//!   neither listed nor failed did not run (the run stopped before it).
//!   The executor then treats each member as the step it is: its own
//!   progress lines, history record, SAPI writes, and, when its gate
//!   failed, its own revert (the installer rolled back only that
//!   component; the other members stay installed and are recorded).
//! - **Timeout**: the members run at once, so the group is bounded by one
//!   `--task-timeout` (the longest member's, not the sum). A group that
//!   times out or whose execute dies fails every member alike ("may still
//!   be running on the server"); the server settles it: the installer's
//!   journal recovers each member's transaction on its next run, and the
//!   next plan reads what the server runs.
//! - **Expected finish**: the plan counts a group as its longest member
//!   and separate executes one after the other
//!   ([`agentsadm_plan::timing::Durations::server_expected`]).

use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::compat;
use agentsadm_api::remote::{GzFailure, gz_execute_request};
use agentsadm_plan::Step;
use agentsadm_types::ids::ServerUuid;

use super::{CnapiTransport, StepDone, StepFailure, bootstrap, parse_gz_result, stage_of, tail};
use crate::carriers::guard::Fence;
use crate::vocabulary::report::FailureStage;

impl CnapiTransport {
    /// `steps` (one server's execute group) in one `gz install`: each
    /// step's result, in order.
    pub(super) async fn install_together(
        &self,
        server: ServerUuid,
        steps: &[&Step],
        fence: &dyn Fence,
    ) -> Vec<Result<StepDone, StepFailure>> {
        let Some(first) = steps.first() else {
            return Vec::new();
        };
        let mut members = Vec::new();
        for st in steps {
            self.reads.starting(server, st);
            match (st.action.target(), st.expect_current()) {
                (Some(to), Some(expected)) => {
                    members.push((st.component.as_str(), to.uuid, expected))
                }
                // The plan groups only installs with a known image before.
                _ => {
                    let f = StepFailure::new(
                        FailureStage::Execute,
                        format!(
                            "{} cannot share one gz install (no image, or the image before is not known); plan again",
                            st.component
                        ),
                    );
                    return steps.iter().map(|_| Err(f.clone())).collect();
                }
            }
        }
        let args = compat::install_together_args(&members, &self.health_args());
        let request = gz_execute_request(&args, self.config.execute_env.clone());
        let bound = self.config.execute_timeout;
        let answer = async {
            let mut answer = self
                .execute_request(server, first, request.clone(), bound, Some(fence))
                .await?;
            // The copy CNAPI lists is gone: put it back, then send the
            // line again (as for one step).
            if bootstrap::missing_binary(&answer) {
                self.bootstrap_listed(server, first, fence).await?;
                answer = self
                    .execute_request(server, first, request, bound, Some(fence))
                    .await?;
            }
            Ok::<ExecuteAnswer, StepFailure>(answer)
        };
        match answer.await {
            Ok(answer) => steps
                .iter()
                .map(|st| self.member_outcome(st, &answer))
                .collect(),
            Err(f) => steps.iter().map(|_| Err(f.clone())).collect(),
        }
    }

    /// What one run's result document says of `step`, one of its members.
    fn member_outcome(&self, step: &Step, answer: &ExecuteAnswer) -> Result<StepDone, StepFailure> {
        let package = self.package_name(&step.component);
        let is_it = |name: &str| name == step.component.as_str() || name == package.as_str();
        let Some(gz) = parse_gz_result(&answer.stdout) else {
            // No document: the same failure as one step's.
            return self.gz_outcome(step, answer);
        };
        if let Some(done) = gz.components.iter().find(|c| is_it(&c.name)) {
            return Ok(StepDone {
                instance: done.instance_uuid,
            });
        }
        let own = gz
            .error
            .iter()
            .cloned()
            .chain(
                gz.warnings
                    .iter()
                    .filter_map(|w| GzFailure::from_also_failed(w)),
            )
            .find(|f| f.component.as_deref().is_some_and(is_it));
        if let Some(f) = own {
            return Err(StepFailure::new(stage_of(f.step), f.message));
        }
        match gz.error {
            // The whole run failed before any component (lock, sysinfo,
            // resolve): this one's failure too.
            Some(f) if f.component.is_none() => Err(StepFailure::new(stage_of(f.step), f.message)),
            Some(f) => Err(StepFailure::new(
                FailureStage::Gz,
                format!(
                    "not installed: the run that carried it stopped at {}'s failure ({})",
                    f.component.as_deref().unwrap_or("?"),
                    f.message
                ),
            )),
            None => Err(StepFailure::new(
                FailureStage::Gz,
                format!(
                    "the run that carried it does not list it ({}; {})",
                    answer.describe_exit(),
                    tail(&answer.stderr)
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_api::ApiConfig;
    use agentsadm_api::cnapi::CnapiClient;
    use agentsadm_api::remote::{ComponentAction, ComponentResult, FailureStep, GzResult};
    use agentsadm_plan::{Action, Gate, TransportKind};
    use agentsadm_types::catalog::{Catalog, OrderClass};
    use agentsadm_types::component::ComponentName;
    use agentsadm_types::ids::InstanceUuid;

    fn step(component: &'static str) -> Step {
        Step {
            component: ComponentName::from_static(component),
            order: OrderClass::ParallelSafe,
            action: Action::Enable,
            transport: TransportKind::Execute,
            gate: Gate::Installer,
            keep_off: None,
            needs_agentsadm: None,
            needed_by: Vec::new(),
            record: None,
        }
    }

    fn answer(result: &GzResult, exit_status: i32) -> ExecuteAnswer {
        ExecuteAnswer {
            exit_status,
            stdout: serde_json::to_string(result).unwrap(),
            ..ExecuteAnswer::default()
        }
    }

    fn failure(component: Option<&'static str>, step: FailureStep, message: &str) -> GzFailure {
        GzFailure {
            component: component.map(ComponentName::from_static),
            step,
            message: message.into(),
        }
    }

    /// One run of sdcadm, dockerlogger, gz-tools and cmon-agent: sdcadm
    /// completed, dockerlogger's gate failed (the run's error), gz-tools
    /// failed too (a warning), cmon-agent is not listed at all. Each
    /// member gets its own outcome; a failure of the whole run before any
    /// component is every member's.
    #[test]
    fn each_member_reads_its_own_outcome_from_the_one_result() {
        let t = CnapiTransport::new(
            CnapiClient::new("http://127.0.0.1:1", ApiConfig::default()).unwrap(),
            Catalog::builtin(),
            Default::default(),
        );
        let instance = InstanceUuid::from_u128(9);
        let gz_tools = failure(Some("gz-tools"), FailureStep::Swap, "disk full");
        let result = GzResult {
            server_uuid: ServerUuid::from_u128(1),
            components: vec![ComponentResult {
                name: ComponentName::from_static("sdcadm"),
                action: ComponentAction::Upgraded,
                from_image: None,
                image_uuid: None,
                version: None,
                instance_uuid: Some(instance),
                elapsed_ms: 1,
            }],
            error: Some(failure(
                Some("dockerlogger"),
                FailureStep::Unhealthy,
                "svc:/smartdc/dockerlogger:default is maintenance; rolled back",
            )),
            warnings: vec!["a note".into(), gz_tools.also_failed()],
        };
        let a = answer(&result, 1);
        let out = |c| t.member_outcome(&step(c), &a);
        assert_eq!(out("sdcadm").unwrap().instance, Some(instance));
        let docker = out("dockerlogger").unwrap_err();
        assert!(docker.is_unhealthy(), "{docker:?}");
        let tools = out("gz-tools").unwrap_err();
        assert_eq!(
            tools.stage,
            FailureStage::GzStep {
                step: FailureStep::Swap
            }
        );
        assert_eq!(tools.message, "disk full");
        let cmon = out("cmon-agent").unwrap_err();
        assert_eq!(cmon.stage, FailureStage::Gz);
        assert!(
            cmon.message.contains("stopped at dockerlogger"),
            "{}",
            cmon.message
        );

        let whole = GzResult {
            components: Vec::new(),
            error: Some(failure(
                None,
                FailureStep::Lock,
                "another run holds the lock",
            )),
            warnings: Vec::new(),
            ..result
        };
        let a = answer(&whole, 1);
        for c in ["sdcadm", "dockerlogger"] {
            let f = t.member_outcome(&step(c), &a).unwrap_err();
            assert_eq!(
                f.stage,
                FailureStage::GzStep {
                    step: FailureStep::Lock
                }
            );
        }
    }
}
