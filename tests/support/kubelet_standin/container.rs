//! Mode B: a Pod's container run as a local process. Volumes become directories under the
//! Pod's directory (ConfigMaps and Secrets written out as files, a PersistentVolumeClaim
//! shared between Pods), paths in the command line, working directory and environment are
//! rewritten onto them, and the in-Pod `ralph` binary is replaced by the local one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret, Volume};
use kube::{Api, Client};

use super::status::{ENTRYPOINT, argv};

/// What went wrong preparing a container.
#[derive(Debug)]
pub enum PrepareError {
    /// A referenced ConfigMap/Secret (or key) is missing after waiting for it.
    Missing(String),
    /// Creating directories or files failed.
    Io(std::io::Error),
    /// An API call failed.
    Api(kube::Error),
}

impl std::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing(what) => write!(f, "{what} not found"),
            Self::Io(e) => write!(f, "preparing the container's files: {e}"),
            Self::Api(e) => write!(f, "reading the Pod's ConfigMaps/Secrets: {e}"),
        }
    }
}

impl From<std::io::Error> for PrepareError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Where things of one node live.
#[derive(Debug, Clone)]
pub struct NodeLayout {
    /// Root of the Pods' directories.
    pub root: PathBuf,
    /// The local `ralph` binary that replaces `in_pod_ralph`.
    pub ralph_binary: PathBuf,
    /// Path of the `ralph` binary inside the Pod (the init container copies it there).
    pub in_pod_ralph: String,
    /// Host directories a Pod's command line may name directly; never rewritten.
    pub host_dirs: Vec<PathBuf>,
    /// Files in images, as `(image, path)`: a container of that image that mounts a volume
    /// at (or under) that path cannot start, as runc refuses to mount onto a file.
    pub image_files: Vec<(String, String)>,
}

/// The runtime's error for the first container (init containers first) that mounts a
/// volume onto a path that is a file in its image ([`NodeLayout::image_files`]), as runc
/// reports it.
pub fn mount_onto_image_file(layout: &NodeLayout, pod: &Pod) -> Option<String> {
    super::status::containers(pod).find_map(|container| {
        let image = container.image.as_deref()?;
        let mounts = container.volume_mounts.iter().flatten();
        mounts.into_iter().find_map(|mount| {
            let (_, file) = layout.image_files.iter().find(|(file_image, file)| {
                file_image == image && under(&mount.mount_path, file).is_some()
            })?;
            Some(format!(
                "failed to create containerd task: failed to create shim task: OCI runtime \
                 create failed: runc create failed: unable to start container process: error \
                 during container init: error mounting \"/var/lib/kubelet/pods/{}/volumes/\
                 kubernetes.io~empty-dir/{}\" to rootfs at \"{}\": mount {}: not a \
                 directory: unknown (container {}: {} is a file in image {image})",
                pod.metadata.uid.as_deref().unwrap_or_default(),
                mount.name,
                mount.mount_path,
                mount.mount_path,
                container.name,
                file,
            ))
        })
    })
}

/// The owner the kubelet leaves an emptyDir with: root, the Pod's fsGroup, mode 2777, while
/// the agent runs as another user. Here processes run as the test's user, so when that is
/// root the directory is given to `nobody` (65534) instead (not being root, it stays the test's): either way the agent does not
/// own its workspace, and git run by the agent sees "dubious ownership" unless told.
const NOT_THE_AGENT: u32 = 65534;

fn own_as_the_kubelet_does(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2777))?;
    match std::os::unix::fs::chown(dir, Some(NOT_THE_AGENT), None) {
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

/// Container paths mapped onto host paths (longest container path first), except paths
/// under the host directories given as such (e.g. test fixtures a Pod refers to).
#[derive(Debug, Clone, Default)]
pub struct PathMap {
    mounts: Vec<(String, PathBuf)>,
    host_dirs: Vec<PathBuf>,
}

fn under(path: &str, prefix: &str) -> Option<String> {
    if path == prefix {
        Some(String::new())
    } else {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('/'))
            .map(str::to_owned)
    }
}

impl PathMap {
    fn add(&mut self, in_pod: &str, host: PathBuf) {
        self.mounts
            .push((in_pod.trim_end_matches('/').to_owned(), host));
        self.mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    }

    /// Every mount: the in-Pod path and the host directory or file standing for it.
    pub fn mounts(&self) -> impl Iterator<Item = (&str, &Path)> {
        self.mounts.iter().map(|(p, h)| (p.as_str(), h.as_path()))
    }

    /// The host path of an in-Pod path, when it lies under a mapped path (and not under
    /// one of the host directories, which stay as they are).
    pub fn host_path(&self, in_pod: &str) -> Option<PathBuf> {
        let is_host_path = self
            .host_dirs
            .iter()
            .any(|dir| under(in_pod, &dir.display().to_string()).is_some());
        if is_host_path {
            return None;
        }
        self.mounts.iter().find_map(|(prefix, host)| {
            under(in_pod, prefix).map(|rest| {
                if rest.is_empty() {
                    host.clone()
                } else {
                    host.join(rest)
                }
            })
        })
    }

    /// Rewrites an argument or value: an in-Pod path, or `--flag=/in/pod/path`.
    pub fn rewrite(&self, arg: &str) -> String {
        if let Some(host) = self.host_path(arg) {
            return host.display().to_string();
        }
        if let Some((flag, value)) = arg.split_once('=')
            && let Some(host) = self.host_path(value)
        {
            return format!("{flag}={}", host.display());
        }
        arg.to_owned()
    }
}

/// A container ready to start: rewritten command line, environment and directories.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Container name.
    pub name: String,
    /// Program and arguments, rewritten.
    pub argv: Vec<String>,
    /// Extra environment on top of the test process's.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Host file standing for the termination message path.
    pub termination_log: PathBuf,
    /// `FallbackToLogsOnError` termination message policy.
    pub fallback_to_logs: bool,
    /// Host file receiving stdout and stderr.
    pub log: PathBuf,
    /// The Pod's mounts, for callers asking where an in-Pod path is.
    pub paths: PathMap,
}

const WAIT_FOR_REFERENCE: Duration = Duration::from_millis(100);
const REFERENCE_ATTEMPTS: u32 = 100;

/// Writes out the Pod's volumes under `pod_dir` and returns their host directories.
pub async fn prepare_volumes(
    client: &Client,
    layout: &NodeLayout,
    pod: &Pod,
    pod_dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, PrepareError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut dirs = BTreeMap::new();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let dir = volume_dir(layout, &namespace, pod_dir, volume);
        std::fs::create_dir_all(&dir)?;
        if volume.empty_dir.is_some() {
            own_as_the_kubelet_does(&dir)?;
        }
        let data_source = match (&volume.config_map, &volume.secret) {
            (Some(source), _) => Some((DataSource::ConfigMap(&source.name), &source.items)),
            (_, Some(source)) => {
                let name = source.secret_name.as_deref().unwrap_or_default();
                Some((DataSource::Secret(name), &source.items))
            }
            _ => None,
        };
        if let Some((data_source, items)) = data_source {
            let data = data_source.read(client, &namespace).await?;
            write_items(
                &dir,
                &data,
                items.iter().flatten().map(|i| (&i.key, &i.path)),
            )?;
        }
        if let Some(source) = &volume.downward_api {
            write_downward_files(&dir, pod, source.items.iter().flatten())?;
        }
        if let Some(projected) = &volume.projected {
            for source in projected.sources.iter().flatten() {
                if let Some(token) = &source.service_account_token {
                    std::fs::write(dir.join(&token.path), "kubelet-standin-token")?;
                }
                if let Some(downward) = &source.downward_api {
                    write_downward_files(&dir, pod, downward.items.iter().flatten())?;
                }
            }
        }
        dirs.insert(volume.name.clone(), dir);
    }
    Ok(dirs)
}

/// Writes downward API files: `metadata.name`, `.namespace`, `.uid`, and
/// `metadata.labels['k']` / `metadata.annotations['k']`, as the kubelet does.
fn write_downward_files<'a>(
    dir: &Path,
    pod: &Pod,
    items: impl Iterator<Item = &'a k8s_openapi::api::core::v1::DownwardAPIVolumeFile>,
) -> Result<(), PrepareError> {
    for item in items {
        let Some(field) = &item.field_ref else {
            continue;
        };
        let value = downward_value(pod, &field.field_path)
            .ok_or_else(|| PrepareError::Missing(format!("field {:?}", field.field_path)))?;
        let target = dir.join(&item.path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, value)?;
    }
    Ok(())
}

fn downward_value(pod: &Pod, field_path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let keyed = |prefix: &str| {
        field_path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")
            .map(str::to_owned)
    };
    match field_path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        _ => {
            if let Some(key) = keyed("metadata.annotations") {
                Some(meta.annotations.as_ref()?.get(&key)?.clone())
            } else {
                let key = keyed("metadata.labels")?;
                Some(meta.labels.as_ref()?.get(&key)?.clone())
            }
        }
    }
}

fn volume_dir(layout: &NodeLayout, namespace: &str, pod_dir: &Path, volume: &Volume) -> PathBuf {
    match &volume.persistent_volume_claim {
        Some(claim) => layout
            .root
            .join("claims")
            .join(namespace)
            .join(&claim.claim_name),
        None => pod_dir.join("volumes").join(&volume.name),
    }
}

fn write_items<'a>(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: impl Iterator<Item = (&'a String, &'a String)>,
) -> Result<(), PrepareError> {
    let items: Vec<_> = items.collect();
    let selected: Vec<(String, String)> = if items.is_empty() {
        data.keys().map(|k| (k.clone(), k.clone())).collect()
    } else {
        items
            .into_iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    };
    for (key, path) in selected {
        let content = data
            .get(&key)
            .ok_or_else(|| PrepareError::Missing(format!("key {key:?}")))?;
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, content)?;
    }
    Ok(())
}

/// Reads a referenced object, waiting a while for it (the kubelet retries too).
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str) -> Result<K, PrepareError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..REFERENCE_ATTEMPTS {
        match api.get_opt(name).await {
            Ok(Some(object)) => return Ok(object),
            Ok(None) => tokio::time::sleep(WAIT_FOR_REFERENCE).await,
            Err(e) => return Err(PrepareError::Api(e)),
        }
    }
    Err(PrepareError::Missing(format!("{what} {name:?}")))
}

/// A ConfigMap or a Secret (by name) that a volume or `envFrom` takes its data from.
enum DataSource<'a> {
    ConfigMap(&'a str),
    Secret(&'a str),
}

impl DataSource<'_> {
    fn name(&self) -> &str {
        match *self {
            DataSource::ConfigMap(name) | DataSource::Secret(name) => name,
        }
    }

    /// The data, both maps of the object merged as the API server does.
    async fn read(
        &self,
        client: &Client,
        namespace: &str,
    ) -> Result<BTreeMap<String, Vec<u8>>, PrepareError> {
        match *self {
            DataSource::ConfigMap(name) => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                let cm = wait_for(&api, name, "ConfigMap").await?;
                Ok(merged(text(cm.data), bytes(cm.binary_data)))
            }
            DataSource::Secret(name) => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secret = wait_for(&api, name, "Secret").await?;
                Ok(merged(bytes(secret.data), text(secret.string_data)))
            }
        }
    }
}

type Entries = Vec<(String, Vec<u8>)>;

/// The entries of a text map (`data` of a ConfigMap, `stringData` of a Secret) as bytes.
fn text(map: Option<BTreeMap<String, String>>) -> Entries {
    map.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect()
}

/// The entries of a base64 map (`binaryData` of a ConfigMap, `data` of a Secret).
fn bytes(map: Option<BTreeMap<String, ByteString>>) -> Entries {
    map.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// Both entries in one map; `then` wins a key both hold, as on the API server.
fn merged(first: Entries, then: Entries) -> BTreeMap<String, Vec<u8>> {
    first.into_iter().chain(then).collect()
}

/// Prepares one container of the Pod: its mounts, command line, environment.
pub async fn prepare_container(
    client: &Client,
    layout: &NodeLayout,
    pod: &Pod,
    container: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    pod_dir: &Path,
) -> Result<Prepared, PrepareError> {
    let mut paths = PathMap {
        host_dirs: layout.host_dirs.clone(),
        ..PathMap::default()
    };
    for mount in container.volume_mounts.iter().flatten() {
        if let Some(dir) = volumes.get(&mount.name) {
            let host = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => dir.join(sub),
                None => dir.clone(),
            };
            paths.add(&mount.mount_path, host);
        }
    }
    let termination_path = container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    let termination_log = pod_dir.join(format!("{}.termination-log", container.name));
    std::fs::write(&termination_log, "")?;
    paths.add(&termination_path, termination_log.clone());
    paths.add(&layout.in_pod_ralph, layout.ralph_binary.clone());

    let mut argv: Vec<String> = argv(container).iter().map(|a| paths.rewrite(a)).collect();
    if argv.first().is_some_and(|program| program == ENTRYPOINT) {
        argv[0] = layout.ralph_binary.display().to_string();
    }
    let cwd = container
        .working_dir
        .as_deref()
        .and_then(|w| paths.host_path(w))
        .unwrap_or_else(|| pod_dir.to_path_buf());
    std::fs::create_dir_all(&cwd)?;
    let env = environment(client, pod, container, &paths).await?;
    Ok(Prepared {
        name: container.name.clone(),
        argv,
        env,
        cwd,
        termination_log,
        fallback_to_logs: container.termination_message_policy.as_deref()
            == Some("FallbackToLogsOnError"),
        log: pod_dir.join(format!("{}.log", container.name)),
        paths,
    })
}

async fn environment(
    client: &Client,
    pod: &Pod,
    container: &Container,
    paths: &PathMap,
) -> Result<Vec<(String, String)>, PrepareError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env = vec![(
        "HOSTNAME".to_owned(),
        pod.metadata.name.clone().unwrap_or_default(),
    )];
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        let data = match (&source.config_map_ref, &source.secret_ref) {
            (Some(cm), _) => {
                DataSource::ConfigMap(&cm.name)
                    .read(client, &namespace)
                    .await?
            }
            (_, Some(secret)) => {
                DataSource::Secret(&secret.name)
                    .read(client, &namespace)
                    .await?
            }
            _ => BTreeMap::new(),
        };
        env.extend(data.into_iter().map(|(k, v)| {
            (
                format!("{prefix}{k}"),
                String::from_utf8_lossy(&v).into_owned(),
            )
        }));
    }
    for var in container.env.iter().flatten() {
        let value = env_value(client, &namespace, pod, var).await?;
        env.push((var.name.clone(), paths.rewrite(&value)));
    }
    Ok(env)
}

async fn env_value(
    client: &Client,
    namespace: &str,
    pod: &Pod,
    var: &EnvVar,
) -> Result<String, PrepareError> {
    let Some(from) = &var.value_from else {
        return Ok(var.value.clone().unwrap_or_default());
    };
    let key_ref = match (&from.config_map_key_ref, &from.secret_key_ref) {
        (Some(key), _) => Some((DataSource::ConfigMap(&key.name), &key.key)),
        (_, Some(key)) => Some((DataSource::Secret(&key.name), &key.key)),
        _ => None,
    };
    if let Some((data_source, key)) = key_ref {
        let data = data_source.read(client, namespace).await?;
        return lookup(&data, key, data_source.name());
    }
    if let Some(field) = &from.field_ref {
        let value = match field.field_path.as_str() {
            "metadata.name" => pod.metadata.name.clone(),
            "metadata.namespace" => pod.metadata.namespace.clone(),
            "metadata.uid" => pod.metadata.uid.clone(),
            "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            "spec.serviceAccountName" => pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone()),
            "status.podIP" | "status.hostIP" => Some("127.0.0.1".into()),
            path => path
                .strip_prefix("metadata.labels['")
                .and_then(|rest| rest.strip_suffix("']"))
                .and_then(|label| pod.metadata.labels.as_ref()?.get(label).cloned()),
        };
        return Ok(value.unwrap_or_default());
    }
    Ok(String::new())
}

fn lookup(
    data: &BTreeMap<String, Vec<u8>>,
    key: &str,
    object: &str,
) -> Result<String, PrepareError> {
    data.get(key)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .ok_or_else(|| PrepareError::Missing(format!("key {key:?} in {object:?}")))
}
