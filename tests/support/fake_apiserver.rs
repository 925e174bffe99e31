//! An in-process Kubernetes API server for tests: HTTP on 127.0.0.1, spoken to by the real
//! `kube::Client`, so controllers run unchanged, watches included.
//!
//! Serves pods, configmaps, secrets, serviceaccounts, services, nodes, namespaces, RBAC, events
//! (core and events.k8s.io), leases, deployments, CRDs and ralph.dev features/tasks, plus
//! any type a created CustomResourceDefinition declares. Semantics: resourceVersion
//! conflicts, a PUT that creates a missing Lease (as upstream's lease strategy allows; 404
//! for every other kind), generateName, status subresources, generation, label/field selectors, paged
//! lists, watches with bookmarks and 410 Gone, merge/strategic/JSON patches, a simplified
//! server-side apply, delete preconditions, finalizers, graceful Pod deletion and
//! ownerReference garbage collection. Every request is logged, faults (errors, latency)
//! can be injected, and a user named by a bearer token can be held to RBAC rules (the
//! chart's, for the controller and the agents' sidecars).
//!
//! Include with `#[path = "support/fake_apiserver.rs"] mod fake_apiserver;`.

#[path = "fake_apiserver/apply.rs"]
mod apply;
#[path = "cel.rs"]
pub mod cel;
#[path = "fake_apiserver/discovery.rs"]
mod discovery;
#[path = "fake_apiserver/errors.rs"]
mod errors;
#[path = "fake_apiserver/faults.rs"]
mod faults;
#[path = "fake_apiserver/handlers.rs"]
mod handlers;
#[path = "mentions.rs"]
pub mod mentions;
#[path = "fake_apiserver/objects.rs"]
mod objects;
#[path = "fake_apiserver/ops.rs"]
mod ops;
#[path = "fake_apiserver/patch.rs"]
mod patch;
#[path = "fake_apiserver/rbac.rs"]
pub mod rbac;
#[path = "fake_apiserver/resources.rs"]
mod resources;
#[path = "fake_apiserver/route.rs"]
mod route;
#[path = "fake_apiserver/schema.rs"]
mod schema;
#[path = "fake_apiserver/selectors.rs"]
mod selectors;
#[path = "fake_apiserver/store.rs"]
mod store;
#[path = "fake_apiserver/watch.rs"]
mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

#[allow(unused_imports)]
pub use errors::ApiError;
#[allow(unused_imports)]
pub use faults::{RequestRecord, Verb};
#[allow(unused_imports)]
pub use mentions::assert_mentions;
#[allow(unused_imports)]
pub use resources::ResourceType;
#[allow(unused_imports)]
pub use schema::validate as validate_against_schema;

use faults::{FailRule, Faults, LatencyRule};
use handlers::{Shared, lock};
use store::Store;

/// Configures a [`FakeApiServer`] before it starts.
pub struct FakeApiServerBuilder {
    resources: Vec<ResourceType>,
    history_limit: usize,
    bookmark_interval: Duration,
    server_version: (u32, u32),
}

impl Default for FakeApiServerBuilder {
    fn default() -> Self {
        Self {
            resources: resources::default_resources(),
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(1),
            server_version: (1, 33),
        }
    }
}

impl FakeApiServerBuilder {
    /// Interval of BOOKMARK events on watches that allow them.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// The Kubernetes version `/version` reports (default 1.33).
    pub fn server_version(mut self, major: u32, minor: u32) -> Self {
        self.server_version = (major, minor);
        self
    }

    /// Binds 127.0.0.1 on a free port and serves until the server is dropped.
    pub async fn start(self) -> std::io::Result<FakeApiServer> {
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(self.resources, self.history_limit)),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            rbac: Mutex::default(),
            bookmark_interval: self.bookmark_interval,
            server_version: self.server_version,
            shutdown: shutdown.clone(),
            disconnect: tokio::sync::watch::channel(0).0,
        });
        let app = axum::Router::new()
            .fallback(handlers::handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(error) = serve.await {
                tracing::warn!(%error, "fake API server stopped");
            }
        });
        Ok(FakeApiServer {
            addr,
            shared,
            shutdown,
        })
    }
}

/// A running fake API server. Dropping it stops it and ends open watches.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl FakeApiServer {
    /// A server with the default types.
    pub async fn start() -> std::io::Result<Self> {
        Self::builder().start().await
    }

    /// A builder for a configured server.
    pub fn builder() -> FakeApiServerBuilder {
        FakeApiServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client config for this server with the given default namespace.
    pub fn config(&self, namespace: &str) -> kube::Config {
        let uri = self
            .url()
            .parse()
            .unwrap_or_else(|_| unreachable!("a socket address is a valid URI authority"));
        let mut config = kube::Config::new(uri);
        config.default_namespace = namespace.to_owned();
        config
    }

    /// A kube client config that authenticates as `user` (a bearer token naming it), so the
    /// rules given to [`Self::enforce_rbac`] for `user` apply to its requests.
    pub fn config_as(&self, namespace: &str, user: &str) -> kube::Config {
        let mut config = self.config(namespace);
        config.auth_info = serde_json::from_value(serde_json::json!({ "token": user }))
            .unwrap_or_else(|e| unreachable!("a token is a valid AuthInfo: {e}"));
        config
    }

    /// A real `kube::Client` in `namespace` that authenticates as `user`.
    pub fn client_as(&self, namespace: &str, user: &str) -> kube::Client {
        kube::Client::try_from(self.config_as(namespace, user))
            .unwrap_or_else(|e| panic!("kube client for the fake API server: {e}"))
    }

    /// From now on `user` may do only what `rules` allow (403 Forbidden otherwise), as
    /// with RBAC on a real cluster.
    pub fn enforce_rbac(&self, user: &str, rules: Vec<rbac::Rule>) {
        lock(&self.shared.rbac).insert(user.to_owned(), rules);
    }

    /// A real `kube::Client` talking to this server, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        self.client_in("default")
    }

    /// A real `kube::Client` with the given default namespace.
    pub fn client_in(&self, namespace: &str) -> kube::Client {
        kube::Client::try_from(self.config(namespace))
            .unwrap_or_else(|e| panic!("kube client for the fake API server: {e}"))
    }

    /// A kubeconfig file's content pointing at this server (for child processes).
    pub fn kubeconfig_yaml(&self, namespace: &str) -> String {
        self.kubeconfig_with_user(namespace, "{}")
    }

    /// A kubeconfig file's content that authenticates as `user` (see [`Self::config_as`]).
    pub fn kubeconfig_yaml_as(&self, namespace: &str, user: &str) -> String {
        self.kubeconfig_with_user(namespace, &format!("{{token: {user}}}"))
    }

    fn kubeconfig_with_user(&self, namespace: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\ncurrent-context: fake\nusers:\n- name: fake\n  user: {user}\n",
            url = self.url()
        )
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// How many requests so far satisfy `pick`.
    pub fn count_requests(&self, pick: impl Fn(&RequestRecord) -> bool) -> usize {
        lock(&self.shared.log).iter().filter(|r| pick(r)).count()
    }

    /// How many successful writes (create, update, patch, delete) so far.
    pub fn write_count(&self) -> usize {
        self.count_requests(|r| r.verb.is_write() && r.status < 400)
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// Fails the next `times` requests for which `pick` holds with `error`.
    pub fn fail_next(
        &self,
        times: usize,
        pick: impl Fn(&RequestRecord) -> bool + Send + Sync + 'static,
        error: ApiError,
    ) {
        lock(&self.shared.faults).fail.push(FailRule {
            matcher: Arc::new(pick),
            remaining: times,
            error,
        });
    }

    /// Delays every request for which `pick` holds by `delay`.
    pub fn add_latency(
        &self,
        pick: impl Fn(&RequestRecord) -> bool + Send + Sync + 'static,
        delay: Duration,
    ) {
        lock(&self.shared.faults).latency.push(LatencyRule {
            matcher: Arc::new(pick),
            delay,
        });
    }

    /// Removes every injected fault (and ends an outage).
    pub fn clear_faults(&self) {
        *lock(&self.shared.faults) = Faults::default();
    }

    /// Adds the per-request latency of a small real cluster (API server with a local etcd):
    /// 2 ms for reads, 8 ms for writes (etcd commits), none for watches and discovery.
    pub fn add_realistic_latency(&self) {
        self.add_latency(
            |r| matches!(r.verb, Verb::Get | Verb::List),
            Duration::from_millis(2),
        );
        self.add_latency(|r| r.verb.is_write(), Duration::from_millis(8));
    }

    /// Starts an API server outage: every request is answered 503 until [`Self::end_outage`],
    /// and every open watch is cut.
    pub fn start_outage(&self) {
        lock(&self.shared.faults).outage = Some(ApiError::new(
            503,
            "ServiceUnavailable",
            "the API server is unavailable (injected outage)",
        ));
        self.shared.disconnect_watches();
    }

    /// Ends an outage started by [`Self::start_outage`].
    pub fn end_outage(&self) {
        lock(&self.shared.faults).outage = None;
    }

    /// Cuts every open watch (as an API server restart or a load balancer timeout does);
    /// clients must re-establish them.
    pub fn disconnect_watches(&self) {
        self.shared.disconnect_watches();
    }

    /// Delays delivery of every change of `plural` (e.g. "pods") to watches started from now
    /// on by `lag`: a watch cache lagging behind the store.
    pub fn lag_watches(&self, plural: &str, lag: Duration) {
        lock(&self.shared.faults)
            .watch_lag
            .insert(plural.to_owned(), lag);
    }

    /// Forgets the change history (etcd compaction): watches resuming from an earlier
    /// resourceVersion get 410 Gone and must re-list.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).current_rv()
    }

    /// How many objects of a type are stored, in one namespace or all.
    pub fn object_count(&self, group: &str, plural: &str, namespace: Option<&str>) -> usize {
        let store = lock(&self.shared.store);
        let Some(rt) = store
            .resources()
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .cloned()
        else {
            return 0;
        };
        store.iter(&rt, namespace).count()
    }
}

/// A started fake API server (the test stops when it cannot start).
pub async fn server() -> FakeApiServer {
    FakeApiServer::start()
        .await
        .expect("fake API server starts")
}

/// The API server's refusal of a request; the test stops when the request succeeded or
/// failed otherwise.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}
