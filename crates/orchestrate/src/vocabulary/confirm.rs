//! The operator's consent to one plan, as a value the executor requires.
//!
//! [`Confirmed`] has private fields and two makers: the prompt path inside
//! this crate ([`crate::run`] makes one only after the operator answered
//! yes to the plan on screen, and re-planned to the same plan), and the
//! `-y` path ([`Confirmed::by_yes`], which gives one only when the
//! settings say `-y`). Nothing else can make one, so no command can
//! execute a plan that was neither asked about nor agreed in advance:
//!
//! ```compile_fail
//! # fn f(plan: &agentsadm_plan::Plan) {
//! // No public constructor, no public fields:
//! let c = agentsadm_orchestrate::confirm::Confirmed { plan, consent: agentsadm_orchestrate::confirm::Consent::Prompt };
//! # }
//! ```
//!
//! ```compile_fail
//! # fn f(plan: &agentsadm_plan::Plan) {
//! // The prompt's maker is private to the crate:
//! let c = agentsadm_orchestrate::confirm::Confirmed::by_prompt(plan);
//! # }
//! ```

use serde::Serialize;

use agentsadm_plan::Plan;

/// Settings that can agree to a plan in advance (`-y`): the run's
/// ([`crate::run::RunSettings`]). Sealed: only this crate's settings say
/// `-y`, as before this token sat below the run that reads them.
pub trait AgreesInAdvance: sealed::Sealed {
    /// Whether the settings say `-y`.
    fn yes(&self) -> bool;
}

pub(crate) mod sealed {
    /// Implemented only inside this crate.
    pub trait Sealed {}
}

/// How the operator agreed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consent {
    /// Answered yes to the plan on screen (after which it was planned
    /// again under the lock and found the same).
    Prompt,
    /// `-y`: agreed in advance to the plan made under the lock.
    Yes,
}

/// A plan the operator agreed to: what the executor runs.
#[derive(Clone, Copy, Debug)]
pub struct Confirmed<'p> {
    plan: &'p Plan,
    consent: Consent,
}

impl<'p> Confirmed<'p> {
    /// The `-y` path: the plan, agreed in advance by `settings`; `None`
    /// when the settings do not say `-y`.
    pub fn by_yes(settings: &impl AgreesInAdvance, plan: &'p Plan) -> Option<Confirmed<'p>> {
        settings.yes().then_some(Confirmed {
            plan,
            consent: Consent::Yes,
        })
    }

    /// The prompt path: the operator answered yes to `plan`.
    pub(crate) fn by_prompt(plan: &'p Plan) -> Confirmed<'p> {
        Confirmed {
            plan,
            consent: Consent::Prompt,
        }
    }

    pub fn plan(&self) -> &'p Plan {
        self.plan
    }

    pub fn consent(&self) -> Consent {
        self.consent
    }
}
