//! The step a run or a component failed at, as the result document names
//! it (`GzFailure.step`): the wire contract's [`FailureStep`], one enum on
//! both sides, and where each of the installer's errors belongs in it.

pub use agentsadm_api::remote::FailureStep as Step;
use agentsadm_api::remote::HookPhase;

use super::fetch::FetchError;
use super::package::Hook;

impl From<&FetchError> for Step {
    fn from(e: &FetchError) -> Step {
        e.step()
    }
}

impl From<Hook> for HookPhase {
    fn from(hook: Hook) -> HookPhase {
        match hook {
            Hook::Preinstall => HookPhase::Preinstall,
            Hook::Postinstall => HookPhase::Postinstall,
            Hook::Preuninstall => HookPhase::Preuninstall,
            Hook::Postuninstall => HookPhase::Postuninstall,
        }
    }
}
