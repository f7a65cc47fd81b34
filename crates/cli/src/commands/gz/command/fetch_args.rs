//! The `gz` flags that set [`FetchOptions`]: the limits an image must stay
//! within, and whether an inactive image may be installed. Each limit's
//! error message names its flag, so an operator with a genuine image that
//! trips one knows how to raise it.

use std::time::Duration;

use clap::Args;

use agentsadm_gz::fetch::FetchOptions;

/// Options of image fetching and unpacking (every `gz` subcommand that
/// installs: install, setup).
#[derive(Args, Clone, Debug, Default)]
pub struct FetchArgs {
    /// Install images whose IMGAPI state is not `active` (unactivated or
    /// disabled).
    #[arg(long, global = true)]
    pub allow_inactive: bool,
    /// Stop unpacking an image past this many bytes (e.g. 4G, 512M;
    /// default 4 GiB).
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_unpacked_bytes: Option<u64>,
    /// Stop unpacking an image past this many times its file's size
    /// (default 100).
    #[arg(long, global = true, value_name = "N")]
    pub max_expansion_ratio: Option<u64>,
    /// Fail a fetch (all attempts and unpacking) that takes longer (e.g.
    /// 30m; default 1h).
    #[arg(long, global = true, value_name = "DURATION", value_parser = super::parse_duration)]
    pub fetch_deadline: Option<Duration>,
    /// Fail a download slower than this many bytes per second over a
    /// minute (e.g. 10K; 0 turns the check off; default 10K).
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    pub min_download_rate: Option<u64>,
}

impl FetchArgs {
    /// Set what was given on the command line; leave the rest as it is.
    pub fn apply(&self, f: &mut FetchOptions) {
        f.allow_inactive |= self.allow_inactive;
        if let Some(n) = self.max_unpacked_bytes {
            f.max_unpacked_bytes = n;
        }
        if let Some(n) = self.max_expansion_ratio {
            f.max_expansion_ratio = n;
        }
        if let Some(d) = self.fetch_deadline {
            f.deadline = d;
        }
        if let Some(n) = self.min_download_rate {
            f.min_rate = n;
        }
    }
}

/// A size that is not one.
#[derive(Debug, thiserror::Error)]
#[error("{input:?} is not a size in bytes (use e.g. 4096, 512K, 64M, 4G)")]
pub struct BytesError {
    input: String,
}

/// Bytes: a number with an optional binary suffix K, M, G or T.
fn parse_bytes(s: &str) -> Result<u64, BytesError> {
    let bad = || BytesError {
        input: s.to_string(),
    };
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("512K").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("4g").unwrap(), 4 << 30);
        for bad in ["", "x", "4Q", "-1", "99999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
