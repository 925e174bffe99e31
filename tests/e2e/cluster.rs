//! The cluster under test: client from RALPH_E2E_KUBECONFIG, CRDs, a unique namespace
//! (always removed), the controller's and the agents' service accounts with the chart's
//! rules, and how agent Pods get run.

use std::path::{Path, PathBuf};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::fake_apiserver::rbac::Rule;

/// The field manager of everything the suite applies.
pub const MANAGER: &str = "ralph-e2e";

/// Env var naming the kubeconfig of the cluster to test against.
pub const KUBECONFIG_VAR: &str = "RALPH_E2E_KUBECONFIG";
/// Env var that turns a missing kubeconfig into a failure.
pub const REQUIRED_VAR: &str = "RALPH_E2E_REQUIRED";
/// Env var naming the ralph image (built with `docker build --target e2e`) for real Pods.
pub const IMAGE_VAR: &str = "RALPH_E2E_IMAGE";

/// Env var that runs the suite against the in-process fake API server instead.
pub const FAKE_VAR: &str = "RALPH_E2E_FAKE";

/// The cluster a test runs against.
pub enum Target {
    /// A real cluster, by kubeconfig.
    Kubeconfig(PathBuf),
    /// The in-process fake API server (`RALPH_E2E_FAKE=1`); agent Pods on the stand-in.
    Fake,
}

/// Env var holding a shell command that restarts the real cluster's API server (for the
/// restart test), e.g. `docker restart kind-control-plane`.
pub const RESTART_VAR: &str = "RALPH_E2E_RESTART_APISERVER";

/// The cluster to use. The tests are `#[ignore]`d, so this runs only when they were asked
/// for: without a cluster or the fake that is a failure naming the variables, never a pass.
pub fn target(test: &str) -> Target {
    if let Some(path) = std::env::var_os(KUBECONFIG_VAR).filter(|v| !v.is_empty()) {
        return Target::Kubeconfig(PathBuf::from(path));
    }
    if std::env::var(FAKE_VAR).is_ok_and(|v| v == "1") && !required() {
        return Target::Fake;
    }
    panic!(
        "e2e test {test} cannot run: {KUBECONFIG_VAR} is not set{}. Set it to a kubeconfig \
         (cluster-admin) to run against a real cluster, or {FAKE_VAR}=1 for the in-process \
         fake API server",
        if required() {
            format!(" and {REQUIRED_VAR}=1 asks for a real cluster")
        } else {
            String::new()
        }
    );
}

fn required() -> bool {
    std::env::var(REQUIRED_VAR).is_ok_and(|v| v == "1")
}

/// A client for the kubeconfig at `path` (its current context).
pub async fn client_from(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("cannot read the kubeconfig {}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("invalid kubeconfig {}: {e}", path.display()));
    Client::try_from(config)
        .unwrap_or_else(|e| panic!("cannot build a client for {}: {e}", path.display()))
}

/// Server-side applies `crds/ralph.dev_crds.yaml` and waits until the CRDs are established.
pub async fn install_crds(client: &Client) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/ralph.dev_crds.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let crd: CustomResourceDefinition = serde::Deserialize::deserialize(document)
            .unwrap_or_else(|e| panic!("{} holds an invalid CRD: {e}", path.display()));
        let name = crd.name_any();
        apply(&api, &crd, "CRD").await;
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(std::time::Duration::from_secs(60), established)
            .await
            .unwrap_or_else(|_| panic!("CRD {name} not established within 60s"))
            .unwrap_or_else(|e| panic!("watching CRD {name}: {e}"));
    }
}

/// Deletes a cluster object when dropped, even when the test panicked. The deletion runs
/// on its own thread and runtime with a fresh client (the test's runtime may be busy).
pub struct DeleteOnDrop {
    kubeconfig: PathBuf,
    kind: &'static str,
    name: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let (kubeconfig, kind, name) = (self.kubeconfig.clone(), self.kind, self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => return eprintln!("e2e cleanup: no runtime to delete {kind} {name}: {e}"),
            };
            runtime.block_on(async {
                let client = client_from(&kubeconfig).await;
                let result = match kind {
                    "Namespace" => Api::<Namespace>::all(client)
                        .delete(&name, &DeleteParams::background())
                        .await
                        .map(drop),
                    _ => Api::<Node>::all(client)
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(drop),
                };
                match result {
                    Ok(()) => eprintln!("e2e cleanup: deleted {kind} {name}"),
                    Err(e) => eprintln!("e2e cleanup: could not delete {kind} {name}: {e}"),
                }
            });
        });
        if cleanup.join().is_err() {
            eprintln!("e2e cleanup of {} {} panicked", self.kind, self.name);
        }
    }
}

/// Creates a namespace `ralph-e2e-<test>-<random>` that is deleted when the guard drops.
pub async fn create_namespace(
    client: &Client,
    kubeconfig: &Path,
    test: &str,
) -> (String, DeleteOnDrop) {
    let suffix: String = (0..5)
        .map(|_| char::from(b'a' + rand::random_range(0..26u8)))
        .collect();
    let name = format!("ralph-e2e-{test}-{suffix}");
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "ralph.dev/e2e": "true", "ralph.dev/e2e-node": name },
        },
    }))
    .unwrap_or_else(|e| panic!("namespace manifest: {e}"));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    let guard = DeleteOnDrop {
        kubeconfig: kubeconfig.to_path_buf(),
        kind: "Namespace",
        name: name.clone(),
    };
    (name, guard)
}

/// Creates ServiceAccount `name` in `namespace` with a Role of `rules` bound to it: what the
/// Helm chart installs for the controller (scoped to one namespace) and for the agent Pods.
pub async fn create_service_account(client: &Client, namespace: &str, name: &str, rules: &[Rule]) {
    let manifests = [
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": name } }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": name },
            "rules": rules,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": namespace }],
        }),
    ];
    for manifest in manifests {
        apply_dynamic(client, namespace, manifest).await;
    }
}

/// Waits (at most 60 s) until the kubeconfig at `kubeconfig` may read Leases in
/// `namespace`: a real API server's RBAC takes a moment to see a new RoleBinding, and the
/// controller must not meet a 403 its rules do not explain.
pub async fn wait_until_authorized(kubeconfig: &Path, namespace: &str) {
    let leases: Api<Lease> = Api::namespaced(client_from(kubeconfig).await, namespace);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match leases.get_opt("ralph-e2e-authorization-probe").await {
            Ok(_) => return,
            Err(error) if tokio::time::Instant::now() >= deadline => panic!(
                "{} is still refused after 60 s: {error}",
                kubeconfig.display()
            ),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
        }
    }
}

/// Writes to `out` a copy of the kubeconfig at `admin` whose current user impersonates
/// `user` (`as:`), so every request it makes is authorized as `user`, under its RBAC rules
/// (the suite's kubeconfig is cluster-admin, which may impersonate).
pub fn impersonating_kubeconfig(admin: &Path, user: &str, out: &Path) -> PathBuf {
    let mut kubeconfig = Kubeconfig::read_from(admin)
        .unwrap_or_else(|e| panic!("cannot read the kubeconfig {}: {e}", admin.display()));
    let context = kubeconfig.current_context.clone().unwrap_or_else(|| {
        panic!(
            "the kubeconfig {} names no current context",
            admin.display()
        )
    });
    let user_name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .unwrap_or_else(|| panic!("context {context} of {} names no user", admin.display()));
    let auth = kubeconfig
        .auth_infos
        .iter_mut()
        .find(|a| a.name == user_name)
        .unwrap_or_else(|| panic!("user {user_name} is not in {}", admin.display()));
    auth.auth_info
        .get_or_insert_with(Default::default)
        .impersonate = Some(user.to_owned());
    let yaml = serde_yaml_ng::to_string(&kubeconfig)
        .unwrap_or_else(|e| panic!("cannot write a kubeconfig: {e}"));
    std::fs::write(out, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    out.to_path_buf()
}

async fn apply_dynamic(client: &Client, namespace: &str, manifest: serde_json::Value) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let object: DynamicObject =
        serde_json::from_value(manifest).unwrap_or_else(|e| panic!("manifest: {e}"));
    let types = object.types.clone().unwrap_or_default();
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    let plural = format!("{}s", types.kind.to_lowercase());
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    );
    apply(&api, &object, &types.kind).await;
}

/// Server-side applies `object` (a `kind`) as the suite's field manager, taking over the
/// fields another manager holds.
pub async fn apply<K>(api: &Api<K>, object: &K, kind: &str)
where
    K: kube::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = object.name_any();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

/// Whether some node accepts Pods (exists, schedulable, Ready).
pub async fn has_schedulable_nodes(client: &Client) -> bool {
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("listing nodes: {e}"));
    nodes.items.iter().any(|node| {
        let schedulable = !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        schedulable && ready
    })
}

/// Registers an unschedulable Node object for the stand-in to bind Pods to, so a
/// cluster's Pod garbage collector does not remove Pods bound to a node that does not
/// exist. Deleted when the guard drops.
pub async fn create_standin_node(client: &Client, kubeconfig: &Path, name: &str) -> DeleteOnDrop {
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "ralph.dev/e2e": "true", "ralph.dev/e2e-node": name },
        },
        "spec": { "unschedulable": true },
    }))
    .unwrap_or_else(|e| panic!("node manifest: {e}"));
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap_or_else(|e| panic!("creating stand-in node {name}: {e}"));
    DeleteOnDrop {
        kubeconfig: kubeconfig.to_path_buf(),
        kind: "Node",
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind-style kubeconfig: inline certificate data, a client certificate and key.
    const KIND_LIKE: &str = "apiVersion: v1
kind: Config
clusters:
- name: kind-ralph
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Q0EtREFUQQ==
contexts:
- name: kind-ralph
  context:
    cluster: kind-ralph
    user: kind-ralph
- name: other
  context:
    cluster: kind-ralph
    user: other
current-context: kind-ralph
users:
- name: kind-ralph
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: other
  user:
    token: other-token
";

    #[test]
    fn an_impersonating_kubeconfig_acts_as_the_user_with_the_same_credentials() {
        let dir = tempfile::tempdir().expect("temp dir");
        let admin = dir.path().join("admin.yaml");
        std::fs::write(&admin, KIND_LIKE).expect("write");
        let user = "system:serviceaccount:ns:ralph-controller";

        let written = impersonating_kubeconfig(&admin, user, &dir.path().join("as.yaml"));

        let read = Kubeconfig::read_from(&written).expect("a kubeconfig kube reads");
        let auth = |name: &str| {
            read.auth_infos
                .iter()
                .find(|a| a.name == name)
                .and_then(|a| a.auth_info.clone())
                .expect("user")
        };
        let current = auth("kind-ralph");
        assert_eq!(current.impersonate.as_deref(), Some(user));
        let text = std::fs::read_to_string(&written).expect("read");
        assert!(text.contains("client-key-data: S0VZ"), "{text}");
        assert_eq!(current.client_certificate_data.as_deref(), Some("Q0VSVA=="));
        assert_eq!(
            auth("other").impersonate,
            None,
            "only the current user acts as another"
        );
        assert_eq!(read.current_context.as_deref(), Some("kind-ralph"));
        let cluster = read.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some("Q0EtREFUQQ==")
        );
    }
}
