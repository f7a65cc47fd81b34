//! The one rule for adopting a component's SAPI instance: the instance
//! UUID a server keeps for the component (`etc/<name>`), recorded in SAPI
//! under the component's `type=agent` service with `params.server_uuid`
//! and `params.image_uuid`. The GZ installer (after `gz install`), the
//! orchestrator's SAPI writes (after an install through CNAPI) and
//! `agentsadm adopt`'s planner all decide with [`adopt_instance`].
//!
//! What SAPI records under the UUID decides (docs/triton/apis.md §2.4-2.6):
//!
//! - nothing: create it with that UUID (`CreateInstance`; agents deploy
//!   nothing);
//! - an instance of the same service: complete its params with
//!   `UpdateInstance`, never a second `CreateInstance` (SAPI overwrites on
//!   a re-POST, and deletes the object when such a re-create fails);
//! - an instance of another service: leave it alone and say so. The UUID
//!   is that other component's record (a copied or hand-edited `etc/<name>`
//!   file, a UUID reused by a bug): re-POSTing would take the record away
//!   from the other component, and updating its params would make the
//!   other component's instance claim this server and image. cn-agent's
//!   own adoption during agent_install re-POSTs `{exists: true,
//!   service_uuid, uuid}` and so moves such a record; agentsadm does not
//!   follow it there. After a cn-agent install the instance is normally
//!   already under the right service (cn-agent wrote it), which is the
//!   second case. `agentsadm check` reports what is left for an operator.

use agentsadm_types::ids::ServiceUuid;

/// What adopting an instance UUID into a service comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// SAPI has no instance with that UUID: create it.
    Create,
    /// SAPI has it under the same service: update its params.
    Update,
    /// SAPI has it under another service: left alone.
    OtherService { recorded: ServiceUuid },
}

/// The rule: `recorded` is the service SAPI files the UUID under (`None`:
/// no such instance), `service` the component's service (`None`: a service
/// not created yet, so any existing record is another service's).
pub fn adopt_instance(recorded: Option<ServiceUuid>, service: Option<ServiceUuid>) -> Adoption {
    match (recorded, service) {
        (None, _) => Adoption::Create,
        (Some(r), Some(s)) if r == s => Adoption::Update,
        (Some(recorded), _) => Adoption::OtherService { recorded },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_update_or_leave_alone() {
        let a = ServiceUuid::from_u128(1);
        let b = ServiceUuid::from_u128(2);
        assert_eq!(adopt_instance(None, Some(a)), Adoption::Create);
        assert_eq!(adopt_instance(None, None), Adoption::Create);
        assert_eq!(adopt_instance(Some(a), Some(a)), Adoption::Update);
        assert_eq!(
            adopt_instance(Some(b), Some(a)),
            Adoption::OtherService { recorded: b }
        );
        assert_eq!(
            adopt_instance(Some(b), None),
            Adoption::OtherService { recorded: b }
        );
    }
}
