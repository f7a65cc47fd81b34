//! Fenced plans (issue 14): a changing command executes only the plan the
//! operator saw and confirmed. Under the datacenter lock, the plan is made
//! again after the prompt (the datacenter may have changed while the
//! operator read it: a server rebooted, an image was published, another
//! tool wrote SAPI); if it differs, the new plan is shown and the question
//! asked again. Every changing command goes through [`fence`], inside
//! [`crate::run::Run`], whatever it shows with its plan.

use crate::vocabulary::confirm::Consent;

/// How the confirmation ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Fenced<P> {
    /// Run this plan: it is the one confirmed, by the prompt or (with
    /// `-y`, nothing to fence against) agreed in advance.
    Confirmed(P, Consent),
    /// The plan (first or re-planned) has nothing to do.
    Empty(P),
    /// The operator said no to this plan: nothing may be changed.
    Declined(P),
}

/// Confirm `first` (already shown) unless `yes`; after each yes, plan
/// again with `replan` and run only when the new plan is the `same` as the
/// confirmed one. A different plan goes to `changed` (to show it) and is
/// asked about in turn. `ask` may refuse (an error) as well as decline.
pub async fn fence<P, E>(
    first: P,
    yes: bool,
    is_empty: impl Fn(&P) -> bool,
    mut ask: impl AsyncFnMut(&P) -> Result<bool, E>,
    mut replan: impl AsyncFnMut() -> Result<P, E>,
    mut changed: impl FnMut(&P),
    same: impl Fn(&P, &P) -> bool,
) -> Result<Fenced<P>, E> {
    let mut plan = first;
    loop {
        if is_empty(&plan) {
            return Ok(Fenced::Empty(plan));
        }
        if yes {
            return Ok(Fenced::Confirmed(plan, Consent::Yes));
        }
        if !ask(&plan).await? {
            return Ok(Fenced::Declined(plan));
        }
        let again = replan().await?;
        if same(&again, &plan) {
            return Ok(Fenced::Confirmed(plan, Consent::Prompt));
        }
        changed(&again);
        plan = again;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Plans are numbers here; `replans` are what each re-plan returns.
    async fn run(
        first: u32,
        yes: bool,
        answers: &[bool],
        replans: &[u32],
    ) -> (Fenced<u32>, Vec<u32>, Vec<u32>) {
        let asked = RefCell::new(Vec::new());
        let shown = RefCell::new(Vec::new());
        let answers = RefCell::new(answers.iter().copied());
        let replans = RefCell::new(replans.iter().copied());
        let r = fence(
            first,
            yes,
            |p| *p == 0,
            async |p: &u32| -> Result<bool, ()> {
                asked.borrow_mut().push(*p);
                Ok(answers.borrow_mut().next().unwrap_or(false))
            },
            async || -> Result<u32, ()> { Ok(replans.borrow_mut().next().expect("a re-plan")) },
            |p| shown.borrow_mut().push(*p),
            |a, b| a == b,
        )
        .await
        .unwrap();
        (r, asked.into_inner(), shown.into_inner())
    }

    #[tokio::test]
    async fn only_the_confirmed_plan_runs() {
        // Unchanged after the prompt: run it.
        assert_eq!(
            run(1, false, &[true], &[1]).await,
            (Fenced::Confirmed(1, Consent::Prompt), vec![1], vec![])
        );
        // Changed: shown, asked again, then run the new one.
        assert_eq!(
            run(1, false, &[true, true], &[2, 2]).await,
            (Fenced::Confirmed(2, Consent::Prompt), vec![1, 2], vec![2])
        );
        // Changed, then declined: nothing runs.
        assert_eq!(
            run(1, false, &[true, false], &[2]).await,
            (Fenced::Declined(2), vec![1, 2], vec![2])
        );
        // Changed to nothing to do.
        assert_eq!(
            run(1, false, &[true], &[0]).await,
            (Fenced::Empty(0), vec![1], vec![0])
        );
        // -y: planned under the lock, nothing asked, nothing re-planned.
        assert_eq!(
            run(1, true, &[], &[]).await,
            (Fenced::Confirmed(1, Consent::Yes), vec![], vec![])
        );
    }
}
