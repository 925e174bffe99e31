//! The Kubernetes client of the controller and the sidecar: a `ralph-operator/<version>`
//! User-Agent, and a client-side token bucket (like client-go's QPS and burst) so a
//! platform team can bound the load the operator puts on the API server.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::sync::lock;

/// The User-Agent every request carries.
pub const USER_AGENT: &str = concat!("ralph-operator/", env!("CARGO_PKG_VERSION"));

/// A client for `config` that names itself and, when `throttle` is given, waits for a token
/// before each request.
pub fn build(
    mut config: kube::Config,
    throttle: Option<ThrottleLayer>,
) -> Result<kube::Client, kube::Error> {
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(USER_AGENT),
    ));
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match throttle {
        Some(layer) => builder.with_layer(&layer).build(),
        None => builder.build(),
    })
}

/// A token bucket: `qps` tokens per second, at most `burst` saved up. Waits are reserved
/// in arrival order (a request may drive the balance below zero and waits it off).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A bucket that starts full.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes one token; returns how long the caller must wait before using it.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut state = lock(&self.state);
        let (tokens, last) = &mut *state;
        let refilled = now.saturating_duration_since(*last).as_secs_f64() * self.qps;
        *tokens = (*tokens + refilled).min(self.burst) - 1.0;
        *last = now;
        if *tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-*tokens / self.qps)
        }
    }
}

/// The layer: every request takes a token from one shared bucket.
#[derive(Clone, Debug)]
pub struct ThrottleLayer {
    bucket: Arc<TokenBucket>,
}

impl ThrottleLayer {
    /// `qps` requests per second with bursts of `burst`; `None` when `qps` is not positive
    /// (unlimited).
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        (qps.is_finite() && qps > 0.0).then(|| Self {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
        })
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            bucket: Arc::clone(&self.bucket),
            wait: None,
            admitted: false,
        }
    }
}

/// A service that waits for a token before each request.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    admitted: bool,
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.admitted {
            let now = Instant::now();
            let wait = self.wait.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep_until(now + self.bucket.reserve(now)))
            });
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
            self.admitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.admitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_admits_a_burst_without_waiting() {
        let bucket = TokenBucket::new(10.0, 3);
        let now = Instant::now();
        let waits: Vec<Duration> = (0..3).map(|_| bucket.reserve(now)).collect();
        assert_eq!(waits, vec![Duration::ZERO; 3]);
    }

    #[test]
    fn past_the_burst_each_request_waits_one_token_longer() {
        let bucket = TokenBucket::new(10.0, 1);
        let now = Instant::now();
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now), Duration::from_millis(100));
        assert_eq!(bucket.reserve(now), Duration::from_millis(200));
    }

    #[test]
    fn tokens_refill_at_the_rate() {
        let bucket = TokenBucket::new(10.0, 1);
        let now = Instant::now();
        bucket.reserve(now);
        assert_eq!(
            bucket.reserve(now + Duration::from_millis(100)),
            Duration::ZERO
        );
    }

    #[test]
    fn no_positive_rate_means_unlimited() {
        assert!(ThrottleLayer::new(0.0, 10).is_none());
        assert!(ThrottleLayer::new(5.0, 10).is_some());
    }
}
