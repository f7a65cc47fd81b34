//! The health gate's policy, with the turn (issue 31): after an install
//! through cn-agent (the plan's `gz health` gate) the transport only
//! carries the check ([`Transport::check_health`]); whether it is waited
//! for is the turn's ([`crate::executor::turn`]: gates overlap the next
//! components' installs), and what an unhealthy check leads to is decided
//! here: the step that puts the previous image back (reinstalled through
//! cn-agent, which cannot roll back by itself; a fresh install removed
//! again), built here and sent through the same transport as any step,
//! and how the step's failure reads. The SAPI side of the revert (the
//! instance's record put back) follows in the turn
//! ([`Executor::revert_intent`]).
//!
//! [`Transport::check_health`]: crate::carriers::transport::Transport::check_health

use std::time::Duration;

use agentsadm_plan::{Action, Gate, ImageRef, InstalledRef, Step};
use agentsadm_types::component::ComponentVersion;
use agentsadm_types::ids::ServerUuid;

use crate::executor::execute::Executor;
use crate::vocabulary::outcomes::StepFailure;

/// The step that undoes what `step` installed: the previous image again
/// (an upgrade from the new image back to it), or, for a fresh install, a
/// removal. Through the step's own transport, with no gate of its own (the
/// previous image ran before), and keeping the component off where the
/// server's record says so. `None` when the image before is not known.
pub(crate) fn revert_step(step: &Step) -> Option<Step> {
    let target = step.action.target()?;
    let new = InstalledRef {
        version: ComponentVersion::new(target.version.clone()).unwrap_or_default(),
        image: Some(target.uuid),
    };
    let action = match &step.action {
        Action::Upgrade { from, .. } => Action::Upgrade {
            to: ImageRef {
                uuid: from.image?,
                name: target.name.clone(),
                version: from.version.to_string(),
                import_from: None,
            },
            from: new,
        },
        Action::Install { .. } => Action::Remove { installed: new },
        Action::Remove { .. } | Action::Disable { .. } | Action::Enable => return None,
    };
    Some(Step {
        action,
        gate: Gate::None,
        needs_agentsadm: None,
        needed_by: Vec::new(),
        record: None,
        ..step.clone()
    })
}

impl Executor<'_> {
    /// The gate of `step`, just installed on `server`: how long the check
    /// took, or the step's failure (`unhealthy`, to be reverted; or the
    /// check could not run, with the install standing).
    pub(crate) async fn check_gate(
        &self,
        server: ServerUuid,
        step: &Step,
    ) -> Result<Duration, StepFailure> {
        let started = tokio::time::Instant::now();
        match self.transport.check_health(server, step).await {
            Ok(_) => Ok(started.elapsed()),
            Err(f) if f.is_unhealthy() => Err(f),
            Err(mut f) => {
                let finished = match self
                    .transport
                    .tasks(server)
                    .into_iter()
                    .rfind(|t| t.component == step.component)
                {
                    Some(t) => format!("CNAPI task {} completed", t.task),
                    None => "the server already ran the target".to_string(),
                };
                f.message = format!("the install itself finished ({finished}); {}", f.message);
                f.installed = true;
                Err(f)
            }
        }
    }

    /// After `step` failed its gate on `server`: the previous image put
    /// back through the transport ([`revert_step`]), unfenced (a lost lock
    /// must not leave an unhealthy build running). The failure, saying
    /// what was put back, or (`revert_error`) what could not be.
    pub(crate) async fn revert_on_server(
        &self,
        server: ServerUuid,
        step: &Step,
        mut unhealthy: StepFailure,
    ) -> StepFailure {
        let Some(back) = revert_step(step) else {
            return unhealthy;
        };
        match (
            self.transport.run(server, &back).await,
            back.action.target(),
        ) {
            (Ok(_), Some(image)) => {
                unhealthy.message = format!(
                    "{}; reverted: image {} reinstalled",
                    unhealthy.message, image.uuid
                );
            }
            (Ok(_), None) => {
                unhealthy.message = format!("{}; reverted: removed again", unhealthy.message);
            }
            (Err(e), _) => {
                unhealthy.revert_error = Some(e.to_string());
                unhealthy.message = format!(
                    "{}; REVERT FAILED ({e}): reinstall the previous image by hand",
                    unhealthy.message
                );
            }
        }
        unhealthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_plan::TransportKind;
    use agentsadm_types::catalog::OrderClass;
    use agentsadm_types::ids::ImageUuid;

    fn step(action: Action) -> Step {
        Step {
            component: agentsadm_types::component::ComponentName::from_static("vm-agent"),
            order: OrderClass::ParallelSafe,
            action,
            transport: TransportKind::InstallAgent,
            gate: Gate::GzHealth,
            keep_off: None,
            needs_agentsadm: None,
            needed_by: Vec::new(),
            record: None,
        }
    }

    fn image(n: u128, version: &str) -> ImageRef {
        ImageRef {
            uuid: ImageUuid::from_u128(n),
            name: "vm-agent".into(),
            version: version.into(),
            import_from: None,
        }
    }

    #[test]
    fn a_revert_puts_the_image_before_back_or_removes_a_fresh_install() {
        let up = step(Action::Upgrade {
            from: InstalledRef {
                version: ComponentVersion::new("1.0.0").unwrap(),
                image: Some(ImageUuid::from_u128(1)),
            },
            to: image(2, "2.0.0"),
        });
        let back = revert_step(&up).expect("a revert");
        assert_eq!(back.gate, Gate::None);
        assert_eq!(back.transport, TransportKind::InstallAgent);
        // From the new image (what the server must run now) to the old.
        assert_eq!(back.expect_current(), Some(Some(ImageUuid::from_u128(2))));
        assert_eq!(back.action.target().unwrap().uuid, ImageUuid::from_u128(1));
        assert_eq!(back.action.target().unwrap().version, "1.0.0");
        let fresh = step(Action::Install {
            to: image(2, "2.0.0"),
        });
        let back = revert_step(&fresh).expect("a removal");
        assert!(matches!(back.action, Action::Remove { .. }));
        // The image before is not known: nothing to put back.
        let unknown = step(Action::Upgrade {
            from: InstalledRef {
                version: ComponentVersion::new("1.0.0").unwrap(),
                image: None,
            },
            to: image(2, "2.0.0"),
        });
        assert!(revert_step(&unknown).is_none());
    }
}
