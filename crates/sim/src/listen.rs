//! The simulator's four listeners on loopback: IMGAPI on the base port P,
//! SAPI on P+1, CNAPI on P+2, the updates server on P+3 (`--port P`). With
//! `--port 0` the base is an ephemeral port the kernel picks and the rule
//! still holds (P+1.. follow it); without `--port` every API gets its own
//! ephemeral port.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::SimError;
use super::faults::SimApi;

/// The APIs in port order (offset from the base port).
const ORDER: [SimApi; 4] = [SimApi::Imgapi, SimApi::Sapi, SimApi::Cnapi, SimApi::Updates];

/// Tries at another ephemeral base when one of P+1.. is taken (`--port 0`).
const EPHEMERAL_TRIES: usize = 32;

/// A bound listener and its URL.
pub(crate) type Bound = Vec<(SimApi, TcpListener, String)>;

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn bind_one(api: SimApi, port: u16) -> Result<(SimApi, TcpListener, String), SimError> {
    let addr = loopback(port);
    let bind_error = |err| SimError::Bind {
        api: api.key(),
        addr: addr.to_string(),
        err,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((api, listener, format!("http://{local}")))
}

/// The four listeners for `--port` (see the module documentation).
pub(crate) async fn bind_all(port: Option<u16>) -> Result<Bound, SimError> {
    match port {
        None => {
            let mut bound = Vec::new();
            for api in ORDER {
                bound.push(bind_one(api, 0).await?);
            }
            Ok(bound)
        }
        Some(0) => {
            let mut last = None;
            for _ in 0..EPHEMERAL_TRIES {
                let first = bind_one(ORDER[0], 0).await?;
                let base = first.1.local_addr().map(|a| a.port()).unwrap_or(0);
                match bind_from(base, first).await {
                    Ok(bound) => return Ok(bound),
                    // P+1.. taken: another ephemeral base.
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or(SimError::PortRange { port: 0 }))
        }
        Some(base) => {
            let first = bind_one(ORDER[0], base).await?;
            bind_from(base, first).await
        }
    }
}

/// The listeners after the first one, on base+1...
async fn bind_from(base: u16, first: (SimApi, TcpListener, String)) -> Result<Bound, SimError> {
    let mut bound = vec![first];
    for (offset, api) in ORDER.into_iter().enumerate().skip(1) {
        let port = u16::try_from(offset)
            .ok()
            .and_then(|o| base.checked_add(o))
            .ok_or(SimError::PortRange { port: base })?;
        bound.push(bind_one(api, port).await?);
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(bound: &Bound) -> Vec<u16> {
        bound
            .iter()
            .map(|(_, l, _)| l.local_addr().unwrap().port())
            .collect()
    }

    #[tokio::test]
    async fn port_zero_puts_the_others_after_an_ephemeral_base() {
        let bound = bind_all(Some(0)).await.unwrap();
        let p = ports(&bound);
        assert!(p[0] > 3, "{p:?}");
        assert_eq!(p, vec![p[0], p[0] + 1, p[0] + 2, p[0] + 3]);
        assert_eq!(bound[1].0, SimApi::Sapi);
        assert_eq!(bound[3].0, SimApi::Updates);
        assert_eq!(bound[2].2, format!("http://127.0.0.1:{}", p[2]));
    }

    #[tokio::test]
    async fn a_base_too_high_for_four_ports_is_refused() {
        let e = bind_all(Some(65534)).await.err().map(|e| e.to_string());
        // 65534 itself may be taken on a busy machine; either way no panic
        // and no wrap-around to low ports.
        let e = e.expect("refused");
        assert!(
            e.contains("at most 65532") || e.contains("cannot listen"),
            "{e}"
        );
    }
}
