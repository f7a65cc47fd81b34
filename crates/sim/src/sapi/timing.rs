//! How long the real SAPI takes, as a latency model
//! ([`crate::config::SapiTiming`]): ListInstances' cost grows with every
//! instance stored, as the real one reads them all on each call;
//! ListServices reads no instance and costs a few milliseconds whatever
//! is stored; each write costs about 21 ms. The time runs from the
//! request's arrival: the answer comes when both the model's time and the
//! simulator's own work are over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::SapiService;

/// ListInstances on the real SAPI 2.1.3 (proto mode, local files):
/// (instances stored, seconds), measured at 12,013, 24,013 and 28,021
/// agent instances (docs/triton/apis.md §2.10).
const LIST_POINTS: [(f64, f64); 4] = [
    (0.0, 0.0),
    (12_013.0, 0.31),
    (24_013.0, 0.91),
    (28_021.0, 1.57),
];

/// One write (CreateInstance, UpdateInstance, DeleteInstance...) on the
/// real SAPI: 21 ms.
const WRITE: Duration = Duration::from_millis(21);

/// ListServices on the real SAPI: 0.005 s with 24,000 instances stored
/// (it reads services only, so the instance count does not matter).
const LIST_SERVICES: Duration = Duration::from_millis(5);

/// The modelled time of a list over `stored` instances: linear between
/// the measured points, the last slope beyond them.
pub(crate) fn list_time(stored: usize) -> Duration {
    let n = stored as f64;
    let i = LIST_POINTS
        .windows(2)
        .position(|w| n <= w[1].0)
        .unwrap_or(LIST_POINTS.len() - 2);
    let ((x0, y0), (x1, y1)) = (LIST_POINTS[i], LIST_POINTS[i + 1]);
    let secs = y0 + (n - x0) * (y1 - y0) / (x1 - x0);
    Duration::from_secs_f64(secs.max(0.0))
}

/// The modelled time of one request, if the model covers it.
fn modelled(method: &Method, path: &str, stored: usize) -> Option<Duration> {
    let object_path = ["/applications", "/services", "/instances"]
        .iter()
        .any(|p| path.starts_with(p));
    if !object_path {
        return None;
    }
    match *method {
        Method::GET if path == "/instances" => Some(list_time(stored)),
        Method::GET if path == "/services" => Some(LIST_SERVICES),
        Method::POST | Method::PUT | Method::DELETE => Some(WRITE),
        _ => None,
    }
}

/// The middleware: handle the request, then wait out what the model says
/// is left of its time.
pub(crate) async fn sapi_timing(
    State(svc): State<Arc<SapiService>>,
    req: Request,
    next: Next,
) -> Response {
    let arrived = Instant::now();
    let scale = svc.timing.scale;
    let target = if scale > 0.0 {
        let stored = svc.lock().instances.len();
        modelled(req.method(), req.uri().path(), stored).map(|d| d.mul_f64(scale))
    } else {
        None
    };
    let resp = next.run(req).await;
    if let Some(t) = target {
        let left = t.saturating_sub(arrived.elapsed());
        if !left.is_zero() {
            tokio::time::sleep(left).await;
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_time_follows_the_measurements() {
        let ms = |n| list_time(n).as_millis();
        assert_eq!(ms(0), 0);
        assert_eq!(ms(12_013), 310);
        assert_eq!(ms(24_013), 910);
        assert!(ms(50) < 5);
        assert!(ms(30_000) > 1_570);
        assert_eq!(modelled(&Method::PUT, "/instances/x", 9), Some(WRITE));
        // apis.md §2.10: ListServices 0.005 s with 24,000 instances stored.
        assert_eq!(
            modelled(&Method::GET, "/services", 24_000),
            Some(Duration::from_millis(5))
        );
        assert_eq!(
            modelled(&Method::GET, "/instances", 24_013).map(|d| d.as_millis()),
            Some(910)
        );
        assert_eq!(modelled(&Method::GET, "/instances/x", 9), None);
        assert_eq!(modelled(&Method::POST, "/mode", 9), None);
    }
}
