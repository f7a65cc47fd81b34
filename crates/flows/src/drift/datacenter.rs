//! Datacenter-wide findings (left out when `-s` selects servers): SAPI
//! instances no known server owns, and agent services without a usable
//! default image.

use std::collections::BTreeMap;

use super::finding::Finding;

use super::finding::FindingKind;

use super::DriftInput;
use super::Survey;
use super::finding::Fix;
use agentsadm_plan::reality::Reality;
use agentsadm_types::ids::ImageUuid;

/// SAPI instances of servers CNAPI does not know, or of no server at all.
pub(super) fn unlinked_findings(survey: &Survey, out: &mut Vec<Finding>) {
    // A legacy instance (no params) is only known to be an orphan when
    // every set-up server reports its instance UUIDs: one that reports
    // none (CNAPI's list cleared at setup, or only sysinfo's) may be
    // its owner.
    let silent: Vec<&str> = survey
        .reality
        .servers
        .values()
        .filter(|s| {
            s.setup
                && (s.is_quarantined()
                    || s.components.is_empty()
                    || s.components.values().any(|i| i.instance.is_none()))
        })
        .map(|s| s.hostname.as_str())
        .collect();
    for u in &survey.intent.unlinked {
        let details = match u.server {
            Some(s) => format!(
                "SAPI instance {} names server {s} (params.server_uuid), which CNAPI does not know (deleted?)",
                u.uuid
            ),
            None => format!(
                "SAPI instance {} has no params.server_uuid and no server reports it",
                u.uuid
            ),
        };
        out.push(Finding {
            kind: FindingKind::InstanceForMissingServer,
            server: u.server,
            hostname: None,
            component: Some(u.component.to_string()),
            instance: Some(u.uuid),
            details,
            fix: if u.server.is_none() && !silent.is_empty() {
                let mut names: Vec<&str> = silent.iter().copied().take(5).collect();
                if silent.len() > 5 {
                    names.push("...");
                }
                Fix::Manual {
                    hint: format!(
                        "not deleted automatically: {} report no instance UUIDs ({}), so one of them may own it; run 'agentsadm check --live'",
                        if silent.len() == 1 { "a server does" } else { "some servers do" },
                        names.join(", ")
                    ),
                }
            } else {
                Fix::DeleteInstance { instance: u.uuid }
            },
            informational: false,
        });
    }
}

/// Agent services without a usable default image.
pub(super) fn service_findings(input: &DriftInput, survey: &Survey, out: &mut Vec<Finding>) {
    for (name, svc) in &survey.intent.services {
        let candidate = default_candidate(&survey.reality, name);
        let (kind, details) = match svc.default_image {
            None => (
                FindingKind::ServiceWithoutDefaultImage,
                "the SAPI service has no params.image_uuid, so new servers do not get it"
                    .to_string(),
            ),
            Some(d) if !input.images.contains_key(&d) => (
                FindingKind::DefaultImageNotInImgapi,
                format!(
                    "the SAPI service's params.image_uuid {d} is not in the datacenter IMGAPI, so setting up a server would fail"
                ),
            ),
            Some(_) => continue,
        };
        let fix = match candidate.and_then(|c| input.images.get(&c)) {
            Some(image) if Some(image.uuid) != svc.default_image => Fix::SetServiceDefault {
                service: svc.uuid,
                image: image.clone(),
            },
            _ => Fix::Manual {
                hint: match svc.default_image {
                    Some(d) => format!(
                        "import image {d} into the datacenter IMGAPI, or set another default with 'agentsadm update {name} --image UUID'"
                    ),
                    None => format!(
                        "no server runs an image of it that the datacenter IMGAPI has: 'agentsadm update {name} --latest' sets one"
                    ),
                },
            },
        };
        out.push(Finding {
            kind,
            server: None,
            hostname: None,
            component: Some(name.to_string()),
            instance: None,
            details,
            fix,
            informational: false,
        });
    }
}

/// The image a service default should be: the headnode's, else the one
/// most set-up servers run (ties: the smallest UUID), like adoption.
pub fn default_candidate(reality: &Reality, component: &str) -> Option<ImageUuid> {
    let mut counts: BTreeMap<ImageUuid, usize> = BTreeMap::new();
    for s in reality.servers.values().filter(|s| s.setup) {
        if let Some(image) = s.components.get(component).and_then(|i| i.image) {
            if s.headnode {
                return Some(image);
            }
            *counts.entry(image).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|(i, _)| i)
}
