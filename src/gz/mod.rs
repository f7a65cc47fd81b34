//! The GZ installer: installs, upgrades, removes and reports components on
//! one server, atomically, with rollback.

pub mod adopt;
pub mod fetch;
pub mod fsutil;
pub mod hooks;
pub mod kinds;
pub mod lock;
pub mod mockcloud;
pub mod package;
pub mod paths;
pub mod platform;
pub mod report;
pub mod session;
pub mod standin;
pub mod txn;
pub mod unpack;

/// An error and its causes as one line (`a: b: c`), for results and logs.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = e.source();
    }
    s
}
