//! The bootstrap: how the orchestrator puts agentsadm on a server that has
//! none, or one too old to parse what a plan sends it, without using it.
//! CNAPI execute runs [`BOOTSTRAP_SCRIPT`] (`installer/bootstrap-agentsadm.sh`,
//! compiled in) with the image's UUID, SHA-1 and size as arguments: it
//! downloads the image file from the datacenter IMGAPI, checks it, and
//! renames agentsadm's files into place. The copy it put there then
//! records itself through an ordinary execute of
//! [`crate::compat::record_args`].
//!
//! The request follows the same contract as every execute
//! ([`crate::remote`]): the whole environment is in `env` (Ur passes
//! nothing else), no `timeout` unless the server executes through
//! cn-agent, and the script never exits 113.

use std::collections::BTreeMap;

use crate::cnapi::ExecuteRequest;
use crate::remote::execute_env;
use agentsadm_types::ids::ImageUuid;

/// The script, as it is in the repository.
pub const BOOTSTRAP_SCRIPT: &str = include_str!("../../../installer/bootstrap-agentsadm.sh");

/// What the script is told: the image and what its file must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapImage {
    pub image: ImageUuid,
    /// The manifest's `files[0].sha1`.
    pub sha1: String,
    /// The manifest's `files[0].size`.
    pub size: u64,
}

/// The CNAPI execute request that runs the bootstrap, in the environment
/// every execute gets ([`execute_env`]; `env`: the API URLs when the
/// server cannot read them from its own SDC config).
pub fn bootstrap_request(image: &BootstrapImage, env: BTreeMap<String, String>) -> ExecuteRequest {
    ExecuteRequest {
        script: BOOTSTRAP_SCRIPT.to_string(),
        args: vec![
            image.image.to_string(),
            image.sha1.clone(),
            image.size.to_string(),
        ],
        env: execute_env(env),
        json: true,
        timeout: None,
    }
}

/// The bootstrap's arguments, if `request` runs the bootstrap script.
pub fn parse_bootstrap(request: &ExecuteRequest) -> Option<BootstrapImage> {
    if request.script != BOOTSTRAP_SCRIPT {
        return None;
    }
    let [image, sha1, size] = request.args.as_slice() else {
        return None;
    };
    Some(BootstrapImage {
        image: image.parse().ok()?,
        sha1: sha1.clone(),
        size: size.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_with_the_whole_environment() {
        let image = BootstrapImage {
            image: ImageUuid::from_u128(3),
            sha1: "a".repeat(40),
            size: 1234,
        };
        let req = bootstrap_request(
            &image,
            BTreeMap::from([("IMGAPI_URL".into(), "http://127.0.0.1:1".into())]),
        );
        assert_eq!(parse_bootstrap(&req), Some(image));
        assert_eq!(req.timeout, None);
        for (k, _) in crate::remote::GZ_EXECUTE_ENV {
            assert!(req.env.contains_key(k), "{k}");
        }
        assert!(req.script.starts_with("#!/bin/bash\n"));
        let gz = crate::remote::gz_execute_request(&[], BTreeMap::new());
        assert_eq!(parse_bootstrap(&gz), None);
    }
}
