//! The world of a git-workspace test on a cluster: the real controller against the fake API
//! server, the kubelet stand-in running the agent Pods (the git steps, the runner and the
//! scripted ACP agent as local processes), and a real git server (git http-backend with Basic
//! auth) holding the repository `app`.
//!
//! Include after `fake_apiserver`, `git_server`, `harness` and `kubelet_standin`:
//! `#[path = "support/git_cluster.rs"] mod git_cluster;`.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use std::path::PathBuf;

use ralph::api::{Feature, Task};
use serde_json::{Value, json};

use super::git_server::{GitServer, HTTP_TOKEN, HTTP_USER};
use super::harness::{Harness, NS, feature_manifest};
use super::kubelet_standin::{KubeletStandIn, NodeOptions};

pub const SECRET: &str = "repo-creds";

/// The controller, the node and the git server of one test.
pub struct World {
    pub harness: Harness,
    pub standin: KubeletStandIn,
    pub git: GitServer,
    pub scripts: tempfile::TempDir,
}

impl World {
    pub async fn start() -> Self {
        let harness = Harness::start().await;
        let scripts = tempfile::tempdir().expect("scripts dir");
        let kubeconfig = scripts.path().join("kubeconfig.yaml");
        let agent = super::fake_apiserver::rbac::AGENT_USER;
        harness
            .server
            .enforce_rbac(agent, super::fake_apiserver::rbac::agent_rules());
        std::fs::write(&kubeconfig, harness.server.kubeconfig_yaml_as(NS, agent))
            .expect("kubeconfig");
        let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
            .namespace(NS)
            .sidecar_kubeconfig(&kubeconfig)
            .host_dir(scripts.path());
        let standin =
            KubeletStandIn::node(harness.server.client(), options).expect("stand-in starts");
        let git = GitServer::with_repo("app");
        Self {
            harness,
            standin,
            git,
            scripts,
        }
    }

    /// [`World::start`], with the credentials Secret holding the git server's token.
    pub async fn with_credentials() -> Self {
        let world = Self::start().await;
        world.create_secret(HTTP_TOKEN).await;
        world
    }

    pub async fn create_secret(&self, password: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": SECRET, "namespace": NS},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": HTTP_USER, "password": password}
        }))
        .expect("secret");
        let secrets: Api<Secret> = Api::namespaced(self.harness.client.clone(), NS);
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }

    /// A Feature whose agent plays `script` and whose workspace is the test repository.
    pub fn feature(&self, name: &str, script: &str, tasks: Value, parallelism: u32) -> Value {
        self.feature_with(name, script, tasks, json!({"parallelism": parallelism}))
    }

    /// [`World::feature`] with more of the spec (`verify`, `retry`, ...) from `spec`.
    pub fn feature_with(&self, name: &str, script: &str, tasks: Value, spec: Value) -> Value {
        let path = self.scripts.path().join(format!("{name}.script.yaml"));
        std::fs::write(&path, script).expect("script");
        let mut full = json!({
            "agent": {
                "image": "agent:test",
                "command": ["/ralph/bin/ralph", "agent", "script", path.display().to_string()],
                "idleTimeoutSeconds": 900
            },
            "workspace": {"git": {
                "url": self.git.http_url("app"),
                "baseRef": "main",
                "credentialsSecretRef": {"name": SECRET}
            }}
        });
        if let (Some(full), Value::Object(extra)) = (full.as_object_mut(), spec) {
            full.extend(extra);
        }
        feature_manifest(name, tasks, full)
    }

    /// Creates the Feature [`World::feature`] describes.
    pub async fn create(&self, name: &str, script: &str, tasks: Value, parallelism: u32) {
        let feature = self.feature(name, script, tasks, parallelism);
        self.harness.create_feature(feature).await;
    }

    /// Creates the Feature [`World::feature`] describes and waits for it to complete.
    pub async fn run(&self, name: &str, script: &str, tasks: Value, parallelism: u32) -> Feature {
        self.create(name, script, tasks, parallelism).await;
        self.harness.wait_for_feature_phase(name, "Complete").await
    }

    /// The host directory the attempt's Pod had as its workspace on this node.
    pub fn workspace_of(&self, attempt: &str) -> PathBuf {
        let run = self
            .standin
            .run_info(NS, attempt)
            .unwrap_or_else(|| panic!("{attempt} ran"));
        run.paths.host_path("/workspace").expect("workspace mount")
    }

    /// The commit subjects on the Feature's branch, newest first.
    pub fn subjects(&self, feature: &str) -> Vec<String> {
        self.git.subjects("app", &self.feature_branch(feature))
    }

    pub async fn task(&self, name: &str) -> Task {
        self.harness.tasks().get(name).await.expect("task")
    }

    pub fn feature_branch(&self, feature: &str) -> String {
        format!("ralph/{feature}")
    }
}
