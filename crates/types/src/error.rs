//! One way to turn an error and its causes into the single line that results,
//! task messages and logs carry.

/// `err` and its sources joined with `: ` (`a: b: c`).
///
/// A cause whose text the line already includes is left out, so an error
/// that quotes its cause (ours never do, but reqwest's, hyper's and io's
/// wrappers sometimes do) does not print it twice; its own sources still
/// follow.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    push_causes(&mut line, err.source(), |_| false);
    line
}

/// [`error_chain`], stopping after the first error for which `last` holds
/// (the command line stops at a connection failure, which names the URL:
/// what the HTTP client says below it is noise to an operator).
pub fn error_chain_until(
    err: &(dyn std::error::Error + 'static),
    last: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> String {
    let mut line = err.to_string();
    if !last(err) {
        push_causes(&mut line, err.source(), last);
    }
    line
}

/// Append `cause` and its sources to `line`, each once, up to the first
/// for which `last` holds.
fn push_causes(
    line: &mut String,
    mut cause: Option<&(dyn std::error::Error + 'static)>,
    last: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) {
    while let Some(e) = cause {
        let text = e.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        if last(e) {
            return;
        }
        cause = e.source();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn chain(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(Layer {
                    text,
                    source: source.map(Box::new),
                })
            })
            .expect("at least one layer")
    }

    #[test]
    fn joins_sources_with_colons() {
        assert_eq!(
            error_chain(&chain(&["cannot install vm-agent", "image x", "disk full"])),
            "cannot install vm-agent: image x: disk full"
        );
        assert_eq!(error_chain(&chain(&["alone"])), "alone");
    }

    #[test]
    fn a_cause_already_in_the_line_is_not_repeated() {
        // Quoted at the end, quoted in the middle: once either way, and the
        // quoted cause's own source still follows.
        assert_eq!(
            error_chain(&chain(&["send failed: reset", "reset", "os error 104"])),
            "send failed: reset: os error 104"
        );
        assert_eq!(
            error_chain(&chain(&["read (reset) of x", "reset"])),
            "read (reset) of x"
        );
    }
}
