//! The world of a git-workspace test on a cluster: the real controller against the fake API
//! server, the kubelet stand-in running the agent Pods (the git steps, the runner and the
//! scripted ACP agent as local processes), and a real git server (git http-backend with Basic
//! auth) holding the repository `app`.
//!
//! Include after `fake_apiserver`, `git_server`, `harness` and `kubelet_standin`:
//! `#[path = "support/git_cluster.rs"] mod git_cluster;`.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use ralph::api::Task;
use serde_json::{Value, json};

use super::git_server::{GitServer, HTTP_USER};
use super::harness::{Harness, NS, feature_manifest};
use super::kubelet_standin::{KubeletStandIn, NodeOptions};

pub const SECRET: &str = "repo-creds";
pub const PROMPT_ANNOTATION: &str = "ralph.dev/prompt";

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
        std::fs::write(&kubeconfig, harness.server.kubeconfig_yaml(NS)).expect("kubeconfig");
        let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
            .namespace(NS)
            .sidecar_kubeconfig(&kubeconfig)
            .host_dir(scripts.path());
        let standin =
            KubeletStandIn::node(harness.server.client(), options).expect("stand-in starts");
        let git = GitServer::start();
        git.create_repo("app");
        Self {
            harness,
            standin,
            git,
            scripts,
        }
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

    pub async fn task(&self, name: &str) -> Task {
        self.harness.tasks().get(name).await.expect("task")
    }

    pub fn feature_branch(&self, feature: &str) -> String {
        format!("ralph/{feature}")
    }
}
