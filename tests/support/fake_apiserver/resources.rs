//! The resource types the fake API server serves, keyed by API group and plural name.

use std::sync::Arc;

use serde_json::Value;

/// One served resource type (what a CRD or a built-in API registration describes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// The one served version.
    pub version: String,
    /// Plural lower-case name used in URLs.
    pub plural: String,
    /// Kind of a single object.
    pub kind: String,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Has a `/status` subresource: main writes ignore `.status`, status writes change only it.
    pub status_subresource: bool,
    /// `metadata.generation` is maintained (bumped on changes outside metadata and status).
    pub tracks_generation: bool,
    /// A custom resource: strategic merge patch is refused, `.status` is dropped on create.
    pub custom: bool,
    /// The CRD's `openAPIV3Schema`: every write is validated against it.
    pub schema: Option<Arc<Value>>,
    /// A PUT to a name that does not exist creates the object (upstream's
    /// `AllowCreateOnUpdate()`, true for Leases), instead of answering 404.
    pub creates_on_update: bool,
}

impl ResourceType {
    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            kind: kind.to_owned(),
            namespaced,
            status_subresource: false,
            tracks_generation: false,
            custom: false,
            schema: None,
            creates_on_update: false,
        }
    }

    fn creating_on_update(mut self) -> Self {
        self.creates_on_update = true;
        self
    }

    fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    fn with_generation(mut self) -> Self {
        self.tracks_generation = true;
        self
    }

    /// A custom resource with a status subresource (what `ralph crds` declares).
    pub fn custom(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            schema: super::schema::ralph_schema(plural)
                .filter(|_| group == "ralph.dev")
                .map(Arc::new),
            status_subresource: true,
            tracks_generation: true,
            custom: true,
            ..Self::builtin(group, version, plural, kind, namespaced)
        }
    }

    /// `apiVersion` of objects of this type.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `group/plural` (or just `plural` for core), used in messages and as the store key.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The resource type a `CustomResourceDefinition` object declares, if it is well formed.
    pub fn from_crd(crd: &Value) -> Option<Self> {
        let spec = crd.get("spec")?;
        let group = spec.get("group")?.as_str()?;
        let names = spec.get("names")?;
        let plural = names.get("plural")?.as_str()?;
        let kind = names.get("kind")?.as_str()?;
        let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
        let versions = spec.get("versions")?.as_array()?;
        let served = versions
            .iter()
            .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .or_else(|| versions.first())?;
        let version = served.get("name")?.as_str()?;
        let status_subresource = served
            .get("subresources")
            .and_then(|s| s.get("status"))
            .is_some();
        Some(Self {
            status_subresource,
            schema: super::schema::crd_schema(crd).map(Arc::new),
            ..Self::custom(group, version, plural, kind, namespaced)
        })
    }
}

/// The built-in types plus ralph.dev's Feature and Task.
pub fn default_resources() -> Vec<ResourceType> {
    vec![
        ResourceType::builtin("", "v1", "pods", "Pod", true)
            .with_status()
            .with_generation(),
        ResourceType::builtin("", "v1", "configmaps", "ConfigMap", true),
        ResourceType::builtin("", "v1", "secrets", "Secret", true),
        ResourceType::builtin("", "v1", "serviceaccounts", "ServiceAccount", true),
        ResourceType::builtin("", "v1", "services", "Service", true).with_status(),
        ResourceType::builtin("", "v1", "events", "Event", true),
        ResourceType::builtin("", "v1", "nodes", "Node", false).with_status(),
        ResourceType::builtin("", "v1", "namespaces", "Namespace", false).with_status(),
        ResourceType::builtin("events.k8s.io", "v1", "events", "Event", true),
        ResourceType::builtin("coordination.k8s.io", "v1", "leases", "Lease", true)
            .creating_on_update(),
        ResourceType::builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        ResourceType::builtin("apps", "v1", "deployments", "Deployment", true)
            .with_status()
            .with_generation(),
        ResourceType::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .with_status()
        .with_generation(),
        ResourceType::custom("ralph.dev", "v1alpha1", "features", "Feature", true),
        ResourceType::custom("ralph.dev", "v1alpha1", "tasks", "Task", true),
    ]
}
