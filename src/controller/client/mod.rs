//! The Kubernetes client of the controller and the sidecar: a `ralph-operator/<version>`
//! User-Agent, and a client-side token bucket (like client-go's QPS and burst) so a
//! platform team can bound the load the operator puts on the API server.
//!
//! As in client-go, the answer limit of a throttled request starts when it leaves the
//! queue: a request waiting for its token is not timed out as if the server were slow.

pub mod call;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

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

/// How many requests the client queues before a caller waits for room (kube's buffer).
pub const QUEUE_CAPACITY: u32 = 1024;

/// A request sent past its token whose answer did not come within the limit.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?}")]
pub struct AnswerTimeout(pub Duration);

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

/// The layer: every request takes a token from one shared bucket, then has
/// `answer_timeout` for its answer.
#[derive(Clone, Debug)]
pub struct ThrottleLayer {
    bucket: Arc<TokenBucket>,
    answer_timeout: Duration,
}

impl ThrottleLayer {
    /// `qps` requests per second with bursts of `burst`, each sent request answered within
    /// `answer_timeout`; `None` when `qps` is not positive (unlimited).
    pub fn new(qps: f64, burst: u32, answer_timeout: Duration) -> Option<Self> {
        (qps.is_finite() && qps > 0.0).then(|| Self {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
            answer_timeout,
        })
    }

    /// The longest a request can wait for its token: a full queue drained at the rate.
    pub fn longest_queue_wait(&self) -> Duration {
        Duration::from_secs_f64(f64::from(QUEUE_CAPACITY) / self.bucket.qps)
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            bucket: Arc::clone(&self.bucket),
            answer_timeout: self.answer_timeout,
            wait: None,
            admitted: false,
        }
    }
}

/// A service that waits for a token before each request, then for its answer at most
/// `answer_timeout`.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    answer_timeout: Duration,
    wait: Option<Pin<Box<Sleep>>>,
    admitted: bool,
}

/// The answer to one throttled request.
type Answer<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

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
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.admitted = false;
        let answer = self.inner.call(request);
        let limit = self.answer_timeout;
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(AnswerTimeout(limit).into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: Duration = Duration::from_millis(300);

    /// A server that answers each request after `delay` (never, for `None`).
    struct Server {
        delay: Option<Duration>,
    }

    impl Service<()> for Server {
        type Response = ();
        type Error = BoxError;
        type Future = Answer<()>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            let delay = self.delay;
            Box::pin(async move {
                match delay {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => std::future::pending().await,
                }
                Ok(())
            })
        }
    }

    async fn send(service: &mut Throttle<Server>) -> Result<(), BoxError> {
        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
        service.call(()).await
    }

    fn throttled(qps: f64, delay: Option<Duration>) -> Throttle<Server> {
        let layer = ThrottleLayer::new(qps, 1, ANSWER).expect("a positive rate");
        layer.layer(Server { delay })
    }

    #[tokio::test]
    async fn waiting_for_a_token_does_not_count_against_the_answer_limit() {
        // At 4 per second the third request waits 500 ms for its token, longer than the
        // answer limit; the server answers at once, so every request succeeds.
        let mut service = throttled(4.0, Some(Duration::ZERO));
        let started = Instant::now();
        for _ in 0..3 {
            send(&mut service).await.expect("answered");
        }
        assert!(started.elapsed() > ANSWER);
    }

    #[tokio::test]
    async fn a_request_sent_and_not_answered_times_out_with_the_answer_limit() {
        let mut service = throttled(100.0, None);
        let error = send(&mut service).await.expect_err("never answered");
        let timeout = error
            .downcast_ref::<AnswerTimeout>()
            .expect("an answer timeout");
        assert_eq!(timeout.0, ANSWER);
    }

    #[test]
    fn the_longest_queue_wait_drains_a_full_queue_at_the_rate() {
        let layer = ThrottleLayer::new(64.0, 10, ANSWER).expect("a positive rate");
        assert_eq!(layer.longest_queue_wait(), Duration::from_secs(16));
    }

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
        assert!(ThrottleLayer::new(0.0, 10, ANSWER).is_none());
        assert!(ThrottleLayer::new(5.0, 10, ANSWER).is_some());
    }
}
