//! A yes/no question on the terminal that Ctrl-C and the end of input
//! answer "no": the answer is read on a thread of its own (a read of a
//! terminal cannot be cancelled, and a blocked runtime worker would keep
//! the process from exiting), raced against Ctrl-C.

/// How a question was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Yes,
    No,
    /// Ctrl-C while asking.
    Interrupted,
    /// The end of input (Ctrl-D, a closed stdin), or stdin unreadable.
    NoInput,
}

impl Answer {
    /// The answer in the run's log.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::Interrupted => "Ctrl-C (taken as no)",
            Answer::NoInput => "end of input (taken as no)",
        }
    }

    /// The line under the canary question, which stays on the screen.
    pub(crate) fn canary_words(self, remaining: usize) -> String {
        let stop = "no further server is started";
        match self {
            Answer::Yes => format!(
                "continuing with {} more {}",
                super::execution::thousands(remaining),
                if remaining == 1 { "server" } else { "servers" }
            ),
            Answer::No => format!("no: {stop}"),
            // The terminal echoed ^C or nothing after the question.
            Answer::Interrupted => format!("\nCtrl-C, taken as no: {stop}"),
            Answer::NoInput => format!("\nno answer (end of input), taken as no: {stop}"),
        }
    }
}

/// Ask `question` on stderr (`[y/N]`, no by default) and read the answer
/// from stdin, or take Ctrl-C or the end of input as no.
pub(crate) async fn ask(question: &str) -> Answer {
    use std::io::Write;
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // A thread of its own, left blocked in read_line after Ctrl-C: the
    // process does not wait for it to exit.
    let spawned = std::thread::Builder::new()
        .name("question".into())
        .spawn(move || {
            let mut line = String::new();
            let answer = match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => Answer::NoInput,
                Ok(_) if matches!(line.trim(), "y" | "Y" | "yes") => Answer::Yes,
                Ok(_) => Answer::No,
            };
            let _ = tx.send(answer);
        });
    if spawned.is_err() {
        return Answer::NoInput;
    }
    tokio::select! {
        answer = rx => answer.unwrap_or(Answer::NoInput),
        () = super::execution::interrupted() => Answer::Interrupted,
    }
}
