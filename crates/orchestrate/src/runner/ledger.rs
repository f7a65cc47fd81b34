//! The second copies of per-server marks that agentsadm owes itself.
//!
//! Since the ledger (`agentsadm_plan::marks`), every per-server hold and
//! disabled mark is kept on the instance and on the component's service.
//! Marks an earlier agentsadm put on instances have no service copy, so a
//! bare re-adoption would still erase them. Copying them is a migration of
//! agentsadm's own records, like the move out of `sdc` ([`crate::shape`]),
//! and it is made at the same moment: by every run that moves records,
//! under the datacenter lock, before the plan is made again. An operator
//! who upgrades agentsadm does nothing for it; `check` meanwhile reports
//! such a mark as informational, and `check --fix` copies it at once.
//!
//! Only marks of servers CNAPI still knows are copied: a copy for a
//! server deleted behind agentsadm would stay on the service for good
//! (nothing clears it but `server delete` of that server), while its
//! orphan instance is `check --fix`'s to delete.
//!
//! Cost: the migration is owed once per datacenter, so once it is done
//! it is written down ([`COPIED`] on agentsadm's own application) and a
//! run reads only that application (SAPI's ListApplications, milliseconds)
//! instead of every agent instance (ListInstances has no paging: 0.26-0.37
//! s for 12,013 instances, docs/triton/apis.md §2.10, on the SAPI that
//! answers every zone's config-agent). Until then: two SAPI reads per run
//! (services and instances); when copies are missing, one CNAPI read of
//! their servers and one write per copy: a merge of one params key, as
//! `hold` makes; then one write of [`COPIED`].
//!
//! A mark put on an instance after that by hand, or by an older agentsadm
//! put back on the headnode, has no copy until `check --fix`: `check`
//! still reports it (informational), from its own reads.

use std::collections::BTreeSet;

use agentsadm_api::cnapi::ServerListFilter;
use agentsadm_api::sapi::{Update, object};
use agentsadm_api::{ApiError, CnapiClient, SapiClient};
use agentsadm_plan::marks::{MissingCopy, missing_copies};
use agentsadm_types::sapi::Application;

/// Why the copies were not all made. SAPI keeps those that were; the
/// next changing run (or `check --fix`) makes the rest.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("cannot read the agent {what} from SAPI to copy per-server marks to their services")]
    Read {
        what: &'static str,
        #[source]
        err: Box<ApiError>,
    },
    #[error("cannot read from CNAPI the servers that per-server marks kept once name")]
    Servers {
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "cannot write params.{COPIED} of SAPI application {application}: every copy is made, and the next run reads the instances again"
    )]
    Done {
        application: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "cannot copy params.{key} of SAPI instance {instance} to service {service} ({copied} copied before it)"
    )]
    Write {
        key: String,
        instance: String,
        service: String,
        copied: usize,
        #[source]
        err: Box<ApiError>,
    },
}

/// The params key of agentsadm's own application that says every mark
/// kept once has been copied (module docs): its value is the agentsadm
/// version that finished the migration.
pub const COPIED: &str = "agentsadm_marks_copied";

/// The error of a failed SAPI read of `what`.
fn read_error(what: &'static str) -> impl FnOnce(ApiError) -> CopyError {
    move |err| CopyError::Read {
        what,
        err: Box::new(err),
    }
}

/// agentsadm's own application, and whether it says the migration is
/// done (one cheap read).
async fn own(sapi: &SapiClient) -> Result<(Option<Application>, bool), CopyError> {
    let own = sapi
        .own_application()
        .await
        .map_err(read_error("application"))?;
    let done = own.as_ref().is_some_and(|a| a.params.contains_key(COPIED));
    Ok((own, done))
}

/// The copies missing now: none once the migration is written down (one
/// read), else two more reads.
pub async fn missing(sapi: &SapiClient) -> Result<Vec<MissingCopy>, CopyError> {
    if own(sapi).await?.1 {
        return Ok(Vec::new());
    }
    missing_read(sapi).await
}

async fn missing_read(sapi: &SapiClient) -> Result<Vec<MissingCopy>, CopyError> {
    let services = sapi
        .list_agent_services()
        .await
        .map_err(read_error("services"))?;
    let instances = sapi
        .list_agent_instances()
        .await
        .map_err(read_error("instances"))?;
    Ok(missing_copies(&services, &instances))
}

/// Write each of `copies` on its service (one merge each). Returns the
/// copies made.
pub async fn copy(sapi: &SapiClient, copies: &[MissingCopy]) -> Result<usize, CopyError> {
    for (done, c) in copies.iter().enumerate() {
        let key = c.key();
        let update = Update::params(object([(key.as_str(), c.value())]));
        sapi.update_service(c.service, &update)
            .await
            .map_err(|err| CopyError::Write {
                key: c.param.to_string(),
                instance: c.instance.to_string(),
                service: c.service_name.clone(),
                copied: done,
                err: Box::new(err),
            })?;
    }
    Ok(copies.len())
}

/// Write down that the migration is done (a merge of one params key of
/// agentsadm's own application; sdcadm reads only `sdc`'s). Without
/// that application (no component of its own recorded yet) nothing is
/// written and the next run reads again.
async fn write_done(sapi: &SapiClient, app: &Application) -> Result<(), CopyError> {
    let update = Update::params(object([(
        COPIED,
        serde_json::Value::from(env!("CARGO_PKG_VERSION")),
    )]));
    sapi.update_application(app.uuid, &update)
        .await
        .map(|_| ())
        .map_err(|err| CopyError::Done {
            application: app.name.clone(),
            err: Box::new(err),
        })
}

/// Of `copies`, those whose server CNAPI knows (one read, of their
/// servers only).
pub async fn of_known_servers(
    cnapi: &CnapiClient,
    mut copies: Vec<MissingCopy>,
) -> Result<Vec<MissingCopy>, CopyError> {
    if copies.is_empty() {
        return Ok(copies);
    }
    let asked: BTreeSet<_> = copies.iter().map(|c| c.server).collect();
    let filter = ServerListFilter {
        uuids: asked.into_iter().collect(),
        ..ServerListFilter::default()
    };
    let known: BTreeSet<_> = cnapi
        .list_servers(&filter)
        .await
        .map_err(|err| CopyError::Servers { err: Box::new(err) })?
        .into_iter()
        .map(|s| s.uuid)
        .collect();
    copies.retain(|c| known.contains(&c.server));
    Ok(copies)
}

/// Copy what is missing and say through `note` what was copied, or why
/// not: the run goes on either way (the marks still hold from the
/// instance; only a bare re-adoption before the copy is made would lose
/// them). Without CNAPI (headnode setup, before any mark can exist)
/// nothing is copied.
pub async fn copy_and_note(sapi: &SapiClient, cnapi: Option<&CnapiClient>, note: impl Fn(&str)) {
    let Some(cnapi) = cnapi else {
        return;
    };
    let result = async {
        let (own_app, done) = own(sapi).await?;
        if done {
            return Ok::<usize, CopyError>(0);
        }
        let copies = of_known_servers(cnapi, missing_read(sapi).await?).await?;
        let made = copy(sapi, &copies).await?;
        if let Some(app) = own_app {
            write_done(sapi, &app).await?;
        }
        Ok(made)
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(n) => note(&format!(
            "copied {} kept only on SAPI instances to their services, where no re-adoption erases them (marks written by an earlier agentsadm)",
            agentsadm_types::output::plural(n, "per-server mark", "per-server marks")
        )),
        Err(e) => note(&format!(
            "warning: {}; the marks still hold, and the next changing run (or check --fix) copies them",
            agentsadm_types::error::error_chain(&e)
        )),
    }
}
