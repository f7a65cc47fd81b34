//! `gz setup`: install the default set of this server's role, from a
//! USB-key style directory or each SAPI agent service's image.

use agentsadm_api::remote::GzResult;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;

use super::super::fetch::ImageSource;
use super::super::setup::SetupSource;
use super::super::setup::setup_dir_sources;
use super::super::step::Step;
use super::GzSession;
use super::failure;
use super::refusal;

impl GzSession {
    /// Install the default set of this server's role.
    pub async fn setup(&mut self, source: &SetupSource) -> GzResult {
        let set: Vec<Component> = self
            .settings
            .catalog
            .default_set(self.headnode)
            .into_iter()
            .cloned()
            .collect();
        let mut sources = Vec::new();
        // The component each IMGAPI source is the default image of.
        let mut expected = Vec::new();
        let mut skipped = Vec::new();
        match source {
            SetupSource::Dir(dir) => {
                let (d, s) = (dir.clone(), set.clone());
                match blocking(move || setup_dir_sources(&d, &s)).await {
                    Ok((found, missing)) => {
                        sources = found;
                        skipped = missing
                            .into_iter()
                            .map(|n| format!("{n}: no image in {}", dir.display()))
                            .collect();
                    }
                    Err(e) => {
                        let mut r = self.result();
                        r.error = Some(failure(None, Step::Resolve, &e, None));
                        return r;
                    }
                }
            }
            SetupSource::Imgapi => {
                let Some(sapi) = self.sapi.as_ref().filter(|_| !self.settings.no_sapi) else {
                    let mut r = self.result();
                    r.error = Some(refusal(
                        None,
                        Step::Resolve,
                        "gz setup --source imgapi reads each agent service's params.image_uuid from SAPI: pass --sapi-url (and not --no-sapi), or use --source DIR".into(),
                    ));
                    return r;
                };
                match sapi.list_agent_services().await {
                    Ok(services) => {
                        for c in &set {
                            let service = services.iter().find(|s| s.name == c.name);
                            match service.map(|s| s.image_uuid()) {
                                Some(Some(img)) => {
                                    sources.push(ImageSource::Imgapi(img));
                                    expected.push(c.name.clone());
                                }
                                Some(None) => skipped.push(format!(
                                    "{}: its SAPI agent service has no params.image_uuid, so there is no image to install; set one ('agentsadm update {} --image UUID') and run setup again",
                                    c.name, c.name
                                )),
                                None => skipped.push(no_service(&c.name)),
                            }
                        }
                    }
                    Err(e) => {
                        let mut r = self.result();
                        r.error = Some(failure(None, Step::Resolve, &e, None));
                        return r;
                    }
                }
            }
        }
        if sources.is_empty() {
            let mut r = self.result();
            r.error = Some(refusal(
                None,
                Step::Resolve,
                format!(
                    "no images found for the default set: {}",
                    skipped.join("; ")
                ),
            ));
            return r;
        }
        let mut r = self.install_expecting(&sources, &expected).await;
        r.warnings
            .extend(skipped.into_iter().map(|s| format!("not installed: {s}")));
        r
    }
}

/// Why a component without a SAPI agent service was not installed, and
/// what to run. A real headnode has no `gz-tools` or `sdcadm` service
/// until `agentsadm adopt` creates them (RFD 82 M5).
fn no_service(name: &str) -> String {
    format!(
        "{name}: SAPI has no agent service {name:?}, so there is no image to install (a headnode has none for gz-tools and sdcadm until 'agentsadm adopt' creates them); run 'agentsadm adopt' on the headnode, then setup again"
    )
}
