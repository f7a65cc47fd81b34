//! The server record a step read, kept for its own health check (issue
//! 35: one CNAPI read fewer per gated step).
//!
//! A step through cn-agent reads the server's record (ServerList with its
//! agents) before its task, to compare `server.agents` with the plan; the
//! `gz health` check after it needs the same record only for the execute
//! mode, which depends on nothing in it but the server's cn-agent
//! ([`crate::carriers::execmode`]). So the check reuses the read its own
//! step made instead of reading again, under these rules:
//!
//! - only a read made during the step itself counts: each step's start
//!   forgets what was kept for its component on that server;
//! - a step that may change the server's cn-agent (the component itself,
//!   core-last) forgets every record kept for that server, so the gates
//!   still running there read again: the cn-agent version they would
//!   use may no longer be the server's (a revert to a cn-agent that CNAPI
//!   serves through Ur must never get a `timeout`);
//! - a record is used once: the health check takes it; a retried check
//!   reads afresh.
//!
//! The datacenter lock keeps other runs (agentsadm, sdcadm) from changing
//! the server's cn-agent in between; what CNAPI itself does (a restart into
//! the other mode) is [`crate::carriers::execmode::ExecuteModes`]'s to see,
//! whatever record is used.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentsadm_api::cnapi::Server;
use agentsadm_plan::Step;
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::ServerUuid;

/// The name under which `server.agents` lists cn-agent.
const CN_AGENT: &str = "cn-agent";

/// A record read for a step, by server and component (`None`: CNAPI does
/// not list the server).
type Kept = BTreeMap<(ServerUuid, ComponentName), Option<Server>>;

/// Records read during each server's steps, by component (shared by a
/// transport's clones).
#[derive(Clone, Debug, Default)]
pub(crate) struct StepReads(Arc<Mutex<Kept>>);

impl StepReads {
    fn with<T>(&self, f: impl FnOnce(&mut Kept) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// `step` starts on `server`: nothing read before it counts for it,
    /// nor, when it may change cn-agent, for any step on that server.
    pub(crate) fn starting(&self, server: ServerUuid, step: &Step) {
        let changes_cn_agent =
            step.order == OrderClass::CoreLast || step.component.as_str() == CN_AGENT;
        self.with(|m| {
            if changes_cn_agent {
                m.retain(|(s, _), _| *s != server);
            } else {
                m.remove(&(server, step.component.clone()));
            }
        });
    }

    /// `record` (`None`: CNAPI does not list the server) was read for
    /// `step` on `server`.
    pub(crate) fn read(&self, server: ServerUuid, step: &Step, record: &Option<Server>) {
        self.with(|m| m.insert((server, step.component.clone()), record.clone()));
    }

    /// The record read during `step` on `server`, if any, once.
    pub(crate) fn take(&self, server: ServerUuid, step: &Step) -> Option<Option<Server>> {
        self.with(|m| m.remove(&(server, step.component.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_plan::{Action, Gate, TransportKind};

    fn step(component: &'static str, order: OrderClass) -> Step {
        Step {
            component: ComponentName::from_static(component),
            order,
            action: Action::Enable,
            transport: TransportKind::InstallAgent,
            gate: Gate::GzHealth,
            keep_off: None,
            needs_agentsadm: None,
            needed_by: Vec::new(),
            record: None,
        }
    }

    #[test]
    fn a_record_serves_its_own_steps_check_once_and_a_cn_agent_step_forgets_the_servers() {
        let reads = StepReads::default();
        let (a, b) = (ServerUuid::from_u128(1), ServerUuid::from_u128(2));
        let vm = step("vm-agent", OrderClass::ParallelSafe);
        let net = step("net-agent", OrderClass::ParallelSafe);
        let cn = step("cn-agent", OrderClass::CoreLast);
        reads.starting(a, &vm);
        reads.read(a, &vm, &None);
        assert!(matches!(reads.take(a, &vm), Some(None)));
        assert!(reads.take(a, &vm).is_none(), "used once");
        // Another step's read is not this one's; a new start forgets.
        reads.read(a, &net, &None);
        assert!(reads.take(a, &vm).is_none());
        reads.read(a, &vm, &None);
        reads.starting(a, &vm);
        assert!(reads.take(a, &vm).is_none());
        // cn-agent starting on a forgets every read there, not elsewhere.
        reads.read(a, &vm, &None);
        reads.read(b, &vm, &None);
        reads.starting(a, &cn);
        assert!(reads.take(a, &net).is_none());
        assert!(reads.take(a, &vm).is_none());
        assert!(matches!(reads.take(b, &vm), Some(None)));
    }
}
