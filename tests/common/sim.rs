//! Helpers for tests against the simulated datacenter: raw HTTP requests
//! (for what the clients never send, such as a missing Accept-Version) and
//! a small started datacenter.

#![allow(dead_code)]

use std::time::Duration;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

/// A small populated datacenter: headnode + `cns` compute nodes.
pub async fn small_dc(cns: usize) -> SimDc {
    SimDc::start(SimConfig::default().servers(cns))
        .await
        .expect("simulator starts")
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Raw {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// Send a request with exactly the given headers (no Accept-Version unless
/// passed).
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Result<Raw, reqwest::Error> {
    // Only a hang bound: a loaded CI machine can take seconds to answer.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let mut rb = client.request(method, url);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok(Raw {
        status,
        headers,
        text,
    })
}

pub async fn get(url: &str) -> Raw {
    raw(reqwest::Method::GET, url, &[], None)
        .await
        .expect("GET")
}

pub async fn get_v2(url: &str) -> Raw {
    raw(reqwest::Method::GET, url, &[("accept-version", "~2")], None)
        .await
        .expect("GET")
}

/// The settings of `-y`: agreed in advance, the way scripts run.
pub fn yes_settings() -> &'static agentsadm_orchestrate::run::RunSettings {
    static YES: std::sync::LazyLock<agentsadm_orchestrate::run::RunSettings> =
        std::sync::LazyLock::new(|| agentsadm_orchestrate::run::RunSettings {
            yes: true,
            ..Default::default()
        });
    &YES
}

/// `plan`, confirmed as `-y` confirms it (the only way besides the prompt).
pub fn yes(plan: &agentsadm_plan::Plan) -> agentsadm_orchestrate::confirm::Confirmed<'_> {
    agentsadm_orchestrate::confirm::Confirmed::by_yes(yes_settings(), plan).expect("-y")
}

/// The one place tests build an executor (architecture:
/// the_tests_build_an_executor_in_one_place): steps through `transport`,
/// intent through `store`, progress to `reporter`, with `options`. Tests
/// add a fence or records with its builders (`with_guard`,
/// `with_records`); the product's only executor is the run's.
pub fn executor<'a>(
    transport: &'a dyn agentsadm_orchestrate::transport::Transport,
    store: &'a dyn agentsadm_orchestrate::store::IntentStore,
    reporter: &'a dyn agentsadm_orchestrate::report::Reporter,
    options: &'a agentsadm_orchestrate::ExecOptions,
) -> agentsadm_orchestrate::Executor<'a> {
    agentsadm_orchestrate::Executor::new(transport, store, reporter, options)
}
