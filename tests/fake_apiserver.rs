//! The fake API server, exercised through the real `kube::Client` (and kube-runtime's
//! watcher): one behaviour per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_apiserver;

use std::time::Duration;

use fake_apiserver::{ApiError, FakeApiServer, Verb, assert_mentions, refusal, server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "data": { "k": "v" },
    }))
    .expect("valid ConfigMap")
}

fn config_maps(client: &Client) -> Api<ConfigMap> {
    Api::default_namespaced(client.clone())
}

fn tasks(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ralph.dev", "v1alpha1", "Task");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "tasks");
    Api::default_namespaced_with(client.clone(), &resource)
}

/// A Task with `spec` plus the `featureRef` the schema requires.
fn task(name: &str, mut spec: Value) -> DynamicObject {
    spec["featureRef"] = json!("f");
    serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Task",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("valid Task")
}

fn names(list: &[ConfigMap]) -> Vec<String> {
    list.iter()
        .map(|cm| cm.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// `a` labelled `app: x`, `b` labelled `app: y`, and `c` without labels.
fn app_x_y_and_unlabelled() -> [(&'static str, Value); 3] {
    [
        ("a", json!({ "app": "x" })),
        ("b", json!({ "app": "y" })),
        ("c", json!({})),
    ]
}

/// The names of the ConfigMaps `selector` selects.
async fn selected(api: &Api<ConfigMap>, selector: &str) -> Vec<String> {
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list");
    names(&list.items)
}

/// Creates the ConfigMap `name` without labels.
async fn try_create_cm(api: &Api<ConfigMap>, name: &str) -> kube::Result<ConfigMap> {
    api.create(&PostParams::default(), &config_map(name, json!({})))
        .await
}

/// The server's current resource version, as objects and lists carry it.
fn current_version(server: &FakeApiServer) -> Option<String> {
    Some(server.resource_version().to_string())
}

/// Asserts, for each (label selector, names), that the selector selects those ConfigMaps.
async fn assert_selections(api: &Api<ConfigMap>, cases: &[(&str, &[&str])]) {
    for (selector, expected) in cases {
        assert_eq!(selected(api, selector).await, *expected, "{selector}");
    }
}

async fn create_cms(api: &Api<ConfigMap>, specs: &[(&str, Value)]) {
    for (name, labels) in specs {
        api.create(&PostParams::default(), &config_map(name, labels.clone()))
            .await
            .expect("create");
    }
}

/// A fake API server and the ConfigMaps of its `default` namespace.
async fn config_map_server() -> (FakeApiServer, Api<ConfigMap>) {
    let server = server().await;
    let api = config_maps(&server.client());
    (server, api)
}

/// A fake API server and the Tasks of its `default` namespace.
async fn task_server() -> (FakeApiServer, Api<DynamicObject>) {
    let server = server().await;
    let api = tasks(&server.client());
    (server, api)
}

/// A fake API server and the Pods of its `default` namespace.
async fn pod_server() -> (FakeApiServer, Api<Pod>) {
    let server = server().await;
    let api = Api::default_namespaced(server.client());
    (server, api)
}

/// Creates the Pod `p` with `spec`.
async fn create_pod(api: &Api<Pod>, spec: Value) -> Pod {
    let pod: Pod =
        serde_json::from_value(json!({ "metadata": { "name": "p" }, "spec": spec })).expect("pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create")
}

/// Creates the Task `name` with `spec`.
async fn create_task(api: &Api<DynamicObject>, name: &str, spec: Value) -> DynamicObject {
    api.create(&PostParams::default(), &task(name, spec))
        .await
        .expect("create")
}

/// Server-side applies the Task `t1` with `spec`, as `params` say.
async fn apply(
    api: &Api<DynamicObject>,
    params: &PatchParams,
    spec: Value,
) -> kube::Result<DynamicObject> {
    api.patch("t1", params, &Patch::Apply(&task("t1", spec)))
        .await
}

/// Applies the Task `t1` with `spec` as `manager`, not forced; it must be accepted.
async fn apply_as(api: &Api<DynamicObject>, manager: &str, spec: Value) -> DynamicObject {
    apply(api, &PatchParams::apply(manager), spec)
        .await
        .unwrap_or_else(|error| panic!("apply as {manager}: {error}"))
}

/// Merge-patches the object `name` with `patch`.
async fn merge_patch<K>(api: &Api<K>, name: &str, patch: &Value) -> kube::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Deletes the object `name` as `params` say; the request must succeed. Whether it was
/// deleted at once (answered with a Status, not with the object marked for deletion).
async fn delete<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, params)
        .await
        .unwrap_or_else(|error| panic!("delete {name}: {error}"))
        .is_right()
}

/// Whether the object `name` is gone.
async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_none()
}

/// The events of a watch.
type WatchStream<K> = futures::stream::BoxStream<'static, kube::Result<WatchEvent<K>>>;

/// A watch of `api` (selected by `params`) from resource version `from`.
async fn watch_from<K>(api: &Api<K>, params: &WatchParams, from: &str) -> WatchStream<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    api.watch(params, from).await.expect("watch").boxed()
}

/// A watch of every ConfigMap from the server's current resource version, and that version.
async fn watch_from_now(
    server: &FakeApiServer,
    api: &Api<ConfigMap>,
) -> (String, WatchStream<ConfigMap>) {
    let from = server.resource_version().to_string();
    let stream = watch_from(api, &WatchParams::default(), &from).await;
    (from, stream)
}

/// The first event of a watch of the ConfigMaps selected by `params` from resource version
/// `from`.
async fn first_event(
    api: &Api<ConfigMap>,
    params: &WatchParams,
    from: &str,
) -> WatchEvent<ConfigMap> {
    let mut stream = watch_from(api, params, from).await;
    stream.try_next().await.expect("event").expect("open")
}

/// Creates the ConfigMap `a`, then `b`; returns the resource version between the two.
async fn version_between_a_and_b(server: &FakeApiServer, api: &Api<ConfigMap>) -> String {
    create_cms(api, &[("a", json!({}))]).await;
    let between = server.resource_version().to_string();
    create_cms(api, &[("b", json!({}))]).await;
    between
}

/// A fake API server, its ConfigMaps, and a watch of them open from the resource version
/// (given) of a server holding none.
async fn watched_config_map_server() -> (
    FakeApiServer,
    Api<ConfigMap>,
    String,
    WatchStream<ConfigMap>,
) {
    let (server, api) = config_map_server().await;
    let (from, stream) = watch_from_now(&server, &api).await;
    (server, api, from, stream)
}

/// What a watch stream gives next, unless 30 seconds pass first.
async fn next_in_time<K>(
    stream: &mut WatchStream<K>,
) -> Result<kube::Result<Option<WatchEvent<K>>>, tokio::time::error::Elapsed> {
    tokio::time::timeout(Duration::from_secs(30), stream.try_next()).await
}

/// The next event of a kube-runtime watcher stream.
async fn next_event<K>(
    events: &mut futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
) -> watcher::Event<K> {
    events
        .try_next()
        .await
        .expect("watch event")
        .expect("stream open")
}

#[tokio::test]
async fn created_object_can_be_read_back() {
    let (_server, api) = config_map_server().await;
    try_create_cm(&api, "a").await.expect("create");
    let read = api.get("a").await.expect("get");
    assert_eq!(
        read.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v")
    );
}

#[tokio::test]
async fn created_object_gets_uid_timestamp_and_resource_version() {
    let (server, api) = config_map_server().await;
    let created = try_create_cm(&api, "a").await.expect("create");
    assert!(created.metadata.uid.is_some_and(|u| !u.is_empty()));
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.resource_version, current_version(&server));
}

#[tokio::test]
async fn creating_an_existing_name_is_already_exists() {
    let (_server, api) = config_map_server().await;
    try_create_cm(&api, "a").await.expect("first create");
    let status = refusal(try_create_cm(&api, "a").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
}

#[tokio::test]
async fn generate_name_gets_a_random_suffix() {
    let (_server, api) = config_map_server().await;
    let mut cm = config_map("", json!({}));
    cm.metadata.name = None;
    cm.metadata.generate_name = Some("run-".into());
    let created = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let name = created.metadata.name.unwrap_or_default();
    assert!(
        name.starts_with("run-") && name.len() == "run-".len() + 5,
        "{name}"
    );
}

#[tokio::test]
async fn getting_a_missing_object_is_not_found() {
    let (_server, api) = config_map_server().await;
    assert!(api.get_opt("nope").await.expect("get_opt").is_none());
    let status = refusal(api.get("nope").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
}

#[tokio::test]
async fn invalid_label_value_is_rejected_naming_the_label() {
    let (_server, api) = config_map_server().await;
    let status = refusal(
        api.create(
            &PostParams::default(),
            &config_map("a", json!({ "x": "not valid!" })),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_mentions(&status.message, &["metadata.labels"]);
}

/// ConfigMap `name` with these annotations.
fn annotated_config_map(name: &str, annotations: Value) -> ConfigMap {
    let mut map = config_map(name, json!({}));
    map.metadata.annotations = Some(serde_json::from_value(annotations).expect("a string map"));
    map
}

#[tokio::test]
async fn annotations_over_256_kib_are_rejected_as_too_long() {
    let (_server, api) = config_map_server().await;
    let text = "x".repeat(256 * 1024);
    let status = refusal(
        api.create(
            &PostParams::default(),
            &annotated_config_map("big", json!({ "example.com/text": text })),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_mentions(
        &status.message,
        &["metadata.annotations", "Too long", "262144"],
    );
}

#[tokio::test]
async fn annotations_of_256_kib_in_all_are_accepted() {
    let (_server, api) = config_map_server().await;
    let key = "example.com/text";
    let text = "x".repeat(256 * 1024 - key.len());
    api.create(
        &PostParams::default(),
        &annotated_config_map("full", json!({ key: text })),
    )
    .await
    .expect("exactly the limit is accepted");
}

#[tokio::test]
async fn an_annotation_key_that_is_not_a_qualified_name_is_rejected() {
    let (_server, api) = config_map_server().await;
    let status = refusal(
        api.create(
            &PostParams::default(),
            &annotated_config_map("bad", json!({ "example.com/not valid": "v" })),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_mentions(&status.message, &["metadata.annotations", "not valid"]);
}

/// ConfigMap `name` whose `data` has `text` under `key`.
fn config_map_holding(name: &str, key: &str, text: String) -> ConfigMap {
    let mut map = config_map(name, json!({}));
    map.data = Some([(key.to_owned(), text)].into());
    map
}

#[tokio::test]
async fn config_map_data_over_1_mib_is_rejected_as_too_long() {
    let (_server, api) = config_map_server().await;
    let text = "x".repeat(1024 * 1024);
    let status = refusal(
        api.create(
            &PostParams::default(),
            &config_map_holding("big", "tasks.yaml", text),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_mentions(&status.message, &["Too long", "1048576"]);
}

#[tokio::test]
async fn config_map_data_of_1_mib_in_all_is_accepted() {
    let (_server, api) = config_map_server().await;
    let key = "tasks.yaml";
    let text = "x".repeat(1024 * 1024 - key.len());
    api.create(
        &PostParams::default(),
        &config_map_holding("full", key, text),
    )
    .await
    .expect("exactly the limit is accepted");
}

#[tokio::test]
async fn config_map_binary_data_counts_its_decoded_bytes() {
    let (_server, api) = config_map_server().await;
    let mut map = config_map("gzipped", json!({}));
    let bytes = k8s_openapi::ByteString(vec![7; 900 * 1024]);
    map.binary_data = Some([("tasks.yaml.gz".to_owned(), bytes)].into());
    api.create(&PostParams::default(), &map)
        .await
        .expect("900 KiB of binary data (1.2 MB of base64) is accepted");
}

#[tokio::test]
async fn list_filters_by_label_equality_and_inequality() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &app_x_y_and_unlabelled()).await;
    assert_selections(&api, &[("app=x", &["a"]), ("app!=x", &["b", "c"])]).await;
}

#[tokio::test]
async fn list_filters_by_set_based_label_selectors() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &app_x_y_and_unlabelled()).await;
    let cases: [(&str, &[&str]); 4] = [
        ("app in (x, z)", &["a"]),
        ("app notin (x)", &["b", "c"]),
        ("app", &["a", "b"]),
        ("!app", &["c"]),
    ];
    assert_selections(&api, &cases).await;
}

#[tokio::test]
async fn list_filters_by_field_selector_on_name() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({})), ("b", json!({}))]).await;
    let list = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .expect("list");
    assert_eq!(names(&list.items), ["b"]);
}

#[tokio::test]
async fn list_carries_the_current_resource_version() {
    let (server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({}))]).await;
    let list = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.metadata.resource_version, current_version(&server));
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let (_server, api) = config_map_server().await;
    create_cms(
        &api,
        &[("a", json!({})), ("b", json!({})), ("c", json!({}))],
    )
    .await;
    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(names(&first.items), ["a", "b"]);
    assert_eq!(names(&second.items), ["c"]);
    assert!(second.metadata.continue_.is_none_or(|c| c.is_empty()));
}

#[tokio::test]
async fn list_across_namespaces_sees_every_namespace() {
    let server = server().await;
    for ns in ["one", "two"] {
        let api: Api<ConfigMap> = Api::namespaced(server.client(), ns);
        create_cms(&api, &[("a", json!({}))]).await;
    }
    let all: Api<ConfigMap> = Api::all(server.client());
    let list = all.list(&ListParams::default()).await.expect("list");
    let namespaces: Vec<_> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.namespace.clone())
        .collect();
    assert_eq!(namespaces, ["one", "two"]);
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts() {
    let (_server, api) = config_map_server().await;
    let stale = try_create_cm(&api, "a").await.expect("create");
    let mut fresh = stale.clone();
    fresh.data = Some([("k".to_owned(), "w".to_owned())].into());
    api.replace("a", &PostParams::default(), &fresh)
        .await
        .expect("first replace");
    let status = refusal(api.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn replace_of_a_missing_config_map_is_not_found() {
    let (_server, api) = config_map_server().await;
    let status = refusal(
        api.replace(
            "gone",
            &PostParams::default(),
            &config_map("gone", json!({})),
        )
        .await,
    );
    assert_eq!(status.code, 404);
}

fn lease_named(name: &str, meta: Value) -> Lease {
    let mut metadata = json!({"name": name});
    merge_into(&mut metadata, meta);
    serde_json::from_value(json!({"metadata": metadata, "spec": {"holderIdentity": "h"}}))
        .expect("valid Lease")
}

fn merge_into(target: &mut Value, extra: Value) {
    if let (Some(target), Value::Object(extra)) = (target.as_object_mut(), extra) {
        target.extend(extra);
    }
}

#[tokio::test]
async fn replace_of_a_missing_lease_creates_it_whatever_resource_version_it_names() {
    let server = server().await;
    let api: Api<Lease> = Api::default_namespaced(server.client());
    let lease = lease_named("gone", json!({"resourceVersion": "7"}));
    let created = api
        .replace("gone", &PostParams::default(), &lease)
        .await
        .expect("a PUT creates a Lease, as upstream's lease strategy allows");
    assert!(created.metadata.uid.is_some());
    let stored = api.get("gone").await.expect("stored");
    assert_eq!(
        stored.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("h")
    );
}

#[tokio::test]
async fn replace_of_a_missing_lease_naming_a_uid_conflicts() {
    let server = server().await;
    let api: Api<Lease> = Api::default_namespaced(server.client());
    let lease = lease_named("gone", json!({"uid": "old-uid", "resourceVersion": "7"}));
    let status = refusal(api.replace("gone", &PostParams::default(), &lease).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(api.get_opt("gone").await.expect("read").is_none());
}

#[tokio::test]
async fn merge_patch_changes_only_the_given_fields() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({ "keep": "me" }))]).await;
    let patch = json!({ "data": { "n": "1" } });
    let patched = merge_patch(&api, "a", &patch).await.expect("patch");
    let data = patched.data.unwrap_or_default();
    assert_eq!(
        (
            data.get("k").map(String::as_str),
            data.get("n").map(String::as_str)
        ),
        (Some("v"), Some("1"))
    );
    assert_eq!(
        patched
            .metadata
            .labels
            .unwrap_or_default()
            .get("keep")
            .map(String::as_str),
        Some("me")
    );
}

#[tokio::test]
async fn merge_patch_with_a_stale_resource_version_conflicts() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({}))]).await;
    let patch = json!({ "metadata": { "resourceVersion": "1" }, "data": { "n": "1" } });
    let status = refusal(merge_patch(&api, "a", &patch).await);
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn json_patch_applies_its_operations_in_order() {
    let server = server().await;
    let client = server.client();
    create_cms(&config_maps(&client), &[("a", json!({}))]).await;
    let request = axum::http::Request::patch(format!(
        "{}/api/v1/namespaces/default/configmaps/a",
        server.url()
    ))
    .header("content-type", "application/json-patch+json")
    .body(
        json!([
            { "op": "add", "path": "/data/n", "value": "1" },
            { "op": "remove", "path": "/data/k" },
        ])
        .to_string()
        .into_bytes(),
    )
    .expect("request");
    let patched: ConfigMap = client.request(request).await.expect("json patch");
    let data = patched.data.unwrap_or_default();
    assert_eq!(
        data.into_iter().collect::<Vec<_>>(),
        [("n".to_owned(), "1".to_owned())]
    );
}

#[tokio::test]
async fn no_op_patch_keeps_the_resource_version() {
    let (server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({}))]).await;
    let before = server.resource_version();
    let patch = json!({ "data": { "k": "v" } });
    let patched = merge_patch(&api, "a", &patch).await.expect("patch");
    assert_eq!(patched.metadata.resource_version, Some(before.to_string()));
}

#[tokio::test]
async fn server_side_apply_creates_a_missing_object() {
    let (_server, api) = task_server().await;
    let applied = apply(
        &api,
        &PatchParams::apply("test").force(),
        json!({ "prompt": "p" }),
    )
    .await
    .expect("apply");
    assert_eq!(applied.data["spec"]["prompt"], "p");
    assert_eq!(applied.metadata.generation, Some(1));
}

#[tokio::test]
async fn server_side_apply_records_the_field_manager() {
    let (_server, api) = task_server().await;
    let applied = apply_as(&api, "ralph-controller", json!({ "a": 1 })).await;
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [("ralph-controller".to_owned(), "Apply".to_owned())]
    );
}

#[tokio::test]
async fn server_side_apply_removes_fields_the_same_manager_no_longer_applies() {
    let (_server, api) = task_server().await;
    apply_as(&api, "m", json!({ "a": 1, "b": 2 })).await;
    let applied = apply_as(&api, "m", json!({ "a": 1 })).await;
    assert_eq!(applied.data["spec"], json!({ "a": 1, "featureRef": "f" }));
}

#[tokio::test]
async fn server_side_apply_keeps_fields_of_other_managers() {
    let (_server, api) = task_server().await;
    apply_as(&api, "one", json!({ "a": 1 })).await;
    let applied = apply_as(&api, "two", json!({ "b": 2 })).await;
    assert_eq!(
        applied.data["spec"],
        json!({ "a": 1, "b": 2, "featureRef": "f" })
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_on_another_managers_field_unless_forced() {
    let (_server, api) = task_server().await;
    apply_as(&api, "one", json!({ "a": 1 })).await;
    let change = task("t1", json!({ "a": 2 }));
    let status = refusal(
        api.patch("t1", &PatchParams::apply("two"), &Patch::Apply(&change))
            .await,
    );
    let forced = api
        .patch(
            "t1",
            &PatchParams::apply("two").force(),
            &Patch::Apply(&change),
        )
        .await
        .expect("forced apply");
    assert_eq!(status.code, 409);
    assert_mentions(&status.message, &["\"one\""]);
    assert_eq!(forced.data["spec"]["a"], 2);
}

#[tokio::test]
async fn apply_without_field_manager_is_rejected() {
    let server = server().await;
    let client = server.client();
    let request = axum::http::Request::patch(format!(
        "{}/apis/ralph.dev/v1alpha1/namespaces/default/tasks/t1",
        server.url()
    ))
    .header("content-type", "application/apply-patch+yaml")
    .body(serde_json::to_vec(&task("t1", json!({}))).expect("json"))
    .expect("request");
    let status = refusal(client.request::<DynamicObject>(request).await);
    assert_mentions(&status.message, &["fieldManager"]);
}

#[tokio::test]
async fn status_write_changes_only_the_status() {
    let (_server, api) = task_server().await;
    create_task(&api, "t1", json!({ "a": 1 })).await;
    let patch = json!({ "spec": { "a": 99 }, "status": { "phase": "Running" } });
    let patched = api
        .patch_status("t1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch status");
    assert_eq!(patched.data["status"]["phase"], "Running");
    assert_eq!(patched.data["spec"]["a"], 1);
}

#[tokio::test]
async fn main_resource_write_ignores_the_status() {
    let (_server, api) = task_server().await;
    create_task(&api, "t1", json!({ "a": 1 })).await;
    let patch = json!({ "spec": { "a": 2 }, "status": { "phase": "Running" } });
    let patched = merge_patch(&api, "t1", &patch).await.expect("patch");
    assert_eq!(patched.data["spec"]["a"], 2);
    assert!(patched.data.get("status").is_none());
}

#[tokio::test]
async fn status_applied_on_create_of_a_custom_resource_is_dropped() {
    let (_server, api) = task_server().await;
    let mut with_status = task("t1", json!({}));
    with_status.data["status"] = json!({ "phase": "Done" });
    let created = api
        .create(&PostParams::default(), &with_status)
        .await
        .expect("create");
    assert!(created.data.get("status").is_none());
}

#[tokio::test]
async fn generation_increments_on_spec_changes_only() {
    let (_server, api) = task_server().await;
    create_task(&api, "t1", json!({ "a": 1 })).await;
    let status = json!({ "status": { "phase": "Running" } });
    let after_status = api
        .patch_status("t1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let spec = json!({ "spec": { "a": 2 } });
    let after_spec = merge_patch(&api, "t1", &spec).await.expect("spec");
    assert_eq!(after_status.metadata.generation, Some(1));
    assert_eq!(after_spec.metadata.generation, Some(2));
}

#[tokio::test]
async fn strategic_merge_patch_on_a_custom_resource_is_unsupported() {
    let (_server, api) = task_server().await;
    create_task(&api, "t1", json!({})).await;
    let patch = json!({ "spec": { "a": 1 } });
    let status = refusal(
        api.patch("t1", &PatchParams::default(), &Patch::Strategic(&patch))
            .await,
    );
    assert_eq!(status.code, 415);
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let (_server, api) = pod_server().await;
    create_pod(
        &api,
        json!({ "containers": [{ "name": "a", "image": "x" }, { "name": "b", "image": "y" }] }),
    )
    .await;
    let patch = json!({ "spec": { "containers": [{ "name": "b", "image": "z" }] } });
    let patched = api
        .patch("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("patch");
    let images: Vec<_> = patched
        .spec
        .unwrap_or_default()
        .containers
        .into_iter()
        .map(|c| c.image.unwrap_or_default())
        .collect();
    assert_eq!(images, ["x", "z"]);
}

#[tokio::test]
async fn delete_with_a_stale_resource_version_precondition_conflicts() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({}))]).await;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let status = refusal(api.delete("a", &params).await);
    assert_eq!(status.code, 409);
    assert!(api.get_opt("a").await.expect("get").is_some());
}

#[tokio::test]
async fn delete_removes_the_object() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({}))]).await;
    let deleted_at_once = delete(&api, "a", &DeleteParams::default()).await;
    assert!(deleted_at_once, "deleted at once, reported with a Status");
    assert!(gone(&api, "a").await);
}

async fn owner_with_dependent(server: &FakeApiServer) -> (Api<DynamicObject>, Api<ConfigMap>) {
    let client = server.client();
    let tasks = tasks(&client);
    let owner = tasks
        .create(&PostParams::default(), &task("owner", json!({})))
        .await
        .expect("owner");
    let mut dependent = config_map("dependent", json!({}));
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "ralph.dev/v1alpha1".into(),
            kind: "Task".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap_or_default(),
            ..Default::default()
        },
    ]);
    let cms = config_maps(&client);
    cms.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    (tasks, cms)
}

#[tokio::test]
async fn deleting_an_owner_deletes_its_dependents() {
    let server = server().await;
    let (tasks, cms) = owner_with_dependent(&server).await;
    delete(&tasks, "owner", &DeleteParams::default()).await;
    assert!(gone(&cms, "dependent").await);
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents_without_the_reference() {
    let server = server().await;
    let (tasks, cms) = owner_with_dependent(&server).await;
    delete(&tasks, "owner", &DeleteParams::orphan()).await;
    let dependent = cms.get("dependent").await.expect("dependent kept");
    assert!(
        dependent
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_objects() {
    let server = server().await;
    let client = server.client();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({ "metadata": { "name": "doomed" } })).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client, "doomed");
    create_cms(&cms, &[("a", json!({}))]).await;
    delete(&namespaces, "doomed", &DeleteParams::default()).await;
    assert!(gone(&cms, "a").await);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_server, api) = config_map_server().await;
    let mut cm = config_map("a", json!({}));
    cm.metadata.finalizers = Some(vec!["ralph.dev/test".into()]);
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let deleted_at_once = delete(&api, "a", &DeleteParams::default()).await;
    let marked = api.get("a").await.expect("still there");
    let clear = json!({ "metadata": { "finalizers": null } });
    merge_patch(&api, "a", &clear)
        .await
        .expect("remove finalizer");
    assert!(!deleted_at_once);
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(gone(&api, "a").await);
}

#[tokio::test]
async fn bound_pod_deletion_waits_for_a_zero_grace_delete() {
    let (_server, api) = pod_server().await;
    create_pod(
        &api,
        json!({ "nodeName": "node-1", "containers": [{ "name": "a", "image": "x" }] }),
    )
    .await;
    delete(&api, "p", &DeleteParams::default()).await;
    let terminating = api.get("p").await.expect("still there");
    delete(&api, "p", &DeleteParams::default().grace_period(0)).await;
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(gone(&api, "p").await);
}

#[tokio::test]
async fn unbound_pod_is_deleted_at_once() {
    let (_server, api) = pod_server().await;
    let created = create_pod(
        &api,
        json!({ "containers": [{ "name": "a", "image": "x" }] }),
    )
    .await;
    delete(&api, "p", &DeleteParams::default()).await;
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    assert!(gone(&api, "p").await);
}

#[tokio::test]
async fn watcher_sees_creation_change_and_deletion() {
    let (_server, api) = config_map_server().await;
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while !matches!(next_event(&mut events).await, watcher::Event::InitDone) {}
    let mut seen = Vec::new();
    create_cms(&api, &[("a", json!({}))]).await;
    let patch = json!({ "data": { "k": "w" } });
    merge_patch(&api, "a", &patch).await.expect("patch");
    delete(&api, "a", &DeleteParams::default()).await;
    while seen.len() < 3 {
        match next_event(&mut events).await {
            watcher::Event::Apply(cm) => {
                seen.push(format!("apply {}", cm.data.unwrap_or_default()["k"]))
            }
            watcher::Event::Delete(_) => seen.push("delete".to_owned()),
            _ => {}
        }
    }
    assert_eq!(seen, ["apply v", "apply w", "delete"]);
}

#[tokio::test]
async fn streaming_list_watcher_sees_existing_objects() {
    let (_server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({})), ("b", json!({}))]).await;
    let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next_event(&mut events).await {
            watcher::Event::InitApply(cm) => initial.push(cm.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(initial, ["a", "b"]);
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_later_changes() {
    let (server, api) = config_map_server().await;
    let from = version_between_a_and_b(&server, &api).await;
    let first = first_event(&api, &WatchParams::default(), &from).await;
    let WatchEvent::Added(cm) = first else {
        panic!("expected ADDED, got {first:?}");
    };
    assert_eq!(cm.metadata.name.as_deref(), Some("b"));
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_gets_410_gone() {
    let (server, api) = config_map_server().await;
    let old = version_between_a_and_b(&server, &api).await;
    server.compact();
    let event = first_event(&api, &WatchParams::default(), &old).await;
    let WatchEvent::Error(status) = event else {
        panic!("expected an ERROR event, got {event:?}");
    };
    assert_eq!(status.code, 410);
}

#[tokio::test]
async fn label_selected_watch_reports_an_object_leaving_the_selection_as_deleted() {
    let (server, api) = config_map_server().await;
    create_cms(&api, &[("a", json!({ "app": "x" }))]).await;
    let from = server.resource_version().to_string();
    let mut stream = watch_from(&api, &WatchParams::default().labels("app=x"), &from).await;
    let relabel = json!({ "metadata": { "labels": { "app": "y" } } });
    merge_patch(&api, "a", &relabel).await.expect("relabel");
    let event = stream.try_next().await.expect("event").expect("open");
    assert!(matches!(event, WatchEvent::Deleted(_)), "{event:?}");
}

#[tokio::test]
async fn watch_with_bookmarks_receives_bookmarks() {
    let server = FakeApiServer::builder()
        .bookmark_interval(Duration::from_millis(20))
        .start()
        .await
        .expect("server");
    let api = config_maps(&server.client());
    let (from, mut stream) = watch_from_now(&server, &api).await;
    let event = stream.try_next().await.expect("event").expect("open");
    let WatchEvent::Bookmark(bookmark) = event else {
        panic!("expected a BOOKMARK, got {event:?}");
    };
    assert_eq!(bookmark.metadata.resource_version, from);
}

#[tokio::test]
async fn injected_fault_fails_the_next_matching_requests_only() {
    let (server, api) = config_map_server().await;
    server.fail_next(
        1,
        |r| r.verb == Verb::Create,
        ApiError::new(500, "InternalError", "injected"),
    );
    let first = try_create_cm(&api, "a").await;
    let second = try_create_cm(&api, "a").await;
    assert_eq!(refusal(first).code, 500);
    assert!(second.is_ok());
}

#[tokio::test]
async fn request_log_counts_writes_by_verb_and_resource() {
    let server = server().await;
    let api: Api<Lease> = Api::default_namespaced(server.client());
    let lease: Lease =
        serde_json::from_value(json!({ "metadata": { "name": "l" } })).expect("lease");
    api.create(&PostParams::default(), &lease)
        .await
        .expect("create");
    api.get("l").await.expect("get");
    delete(&api, "l", &DeleteParams::default()).await;
    let lease_writes = server.count_requests(|r| r.resource == "leases" && r.verb.is_write());
    assert_eq!(lease_writes, 2);
    assert_eq!(server.write_count(), 2);
}

#[tokio::test]
async fn created_crd_makes_its_type_served() {
    let server = server().await;
    let client = server.client();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = serde_json::from_value(json!({
        "metadata": { "name": "widgets.example.com" },
        "spec": {
            "group": "example.com",
            "names": { "plural": "widgets", "kind": "Widget" },
            "scope": "Namespaced",
            "versions": [{ "name": "v1", "served": true, "storage": true, "schema": { "openAPIV3Schema": { "type": "object" } } }],
        },
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::default_namespaced_with(client, &ApiResource::from_gvk_with_plural(&gvk, "widgets"));
    let widget = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": { "name": "w" },
    }))
    .expect("widget");
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("create widget");
    assert!(widgets.get_opt("w").await.expect("get").is_some());
}

#[tokio::test]
async fn version_endpoint_reports_the_configured_version() {
    let server = FakeApiServer::builder()
        .server_version(1, 28)
        .start()
        .await
        .expect("server");
    let info = server.client().apiserver_version().await.expect("version");
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "28"));
}

#[tokio::test]
async fn event_recorder_publishes_events() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let server = server().await;
    let client = server.client();
    let owner = tasks(&client)
        .create(&PostParams::default(), &task("t1", json!({})))
        .await
        .expect("task");
    let recorder = Recorder::new(client.clone(), Reporter::from("test"));
    let event = Event {
        type_: EventType::Normal,
        reason: "Claimed".into(),
        note: Some("claimed".into()),
        action: "Claim".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&owner, &tasks_resource());
    recorder
        .publish(&event, &reference)
        .await
        .expect("first publish");
    recorder
        .publish(&event, &reference)
        .await
        .expect("repeat publish patches the series");
    assert_eq!(
        server.object_count("events.k8s.io", "events", Some("default")),
        1
    );
}

fn tasks_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ralph.dev", "v1alpha1", "Task"),
        "tasks",
    )
}

#[tokio::test]
async fn binding_assigns_a_pod_to_a_node_once() {
    let (_server, api) = pod_server().await;
    create_pod(
        &api,
        json!({ "containers": [{ "name": "a", "image": "x" }] }),
    )
    .await;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": { "name": "p" },
        "target": { "apiVersion": "v1", "kind": "Node", "name": "node-1" },
    });
    let params = PostParams::default();
    let bind =
        || api.create_subresource::<_, kube::core::Status>("binding", "p", &params, &binding);
    bind().await.expect("bind");
    let again = bind().await;
    let bound = api.get("p").await.expect("get");
    assert_eq!(
        bound.spec.and_then(|s| s.node_name).as_deref(),
        Some("node-1")
    );
    assert_eq!(refusal(again).code, 409);
}

#[tokio::test]
async fn during_an_outage_every_request_gets_503() {
    let server = server().await;
    let api = config_maps(&client_without_retries(&server));
    server.start_outage();
    let error = api.get("a").await.expect_err("the server is down");
    let kube::Error::Api(status) = error else {
        panic!("expected an API status, got {error:?}");
    };
    assert_eq!(status.code, 503);
}

#[tokio::test]
async fn after_an_outage_the_server_answers_again() {
    let server = server().await;
    let api = config_maps(&client_without_retries(&server));
    server.start_outage();
    let _ = api.list(&ListParams::default()).await;
    server.end_outage();
    create_cms(&api, &[("a", json!({}))]).await;
    assert!(api.get_opt("a").await.expect("get").is_some());
}

#[tokio::test]
async fn an_outage_cuts_open_watches() {
    let (server, _api, _, mut stream) = watched_config_map_server().await;
    server.start_outage();
    let next = next_in_time(&mut stream).await;
    assert!(
        matches!(next, Ok(Ok(None) | Err(_))),
        "the watch ends: {next:?}"
    );
}

#[tokio::test]
async fn a_disconnect_ends_open_watches_but_not_the_server() {
    let (server, api, from, mut stream) = watched_config_map_server().await;
    server.disconnect_watches();
    let next = next_in_time(&mut stream).await;
    assert!(matches!(next, Ok(Ok(None))), "the watch ends: {next:?}");
    create_cms(&api, &[("a", json!({}))]).await;
    let event = first_event(&api, &WatchParams::default(), &from).await;
    assert!(matches!(event, WatchEvent::Added(_)), "got {event:?}");
}

#[tokio::test]
async fn a_lagging_watch_still_delivers_every_change_in_order() {
    let server = server().await;
    server.lag_watches("configmaps", Duration::from_millis(50));
    let api = config_maps(&server.client());
    let (_, mut stream) = watch_from_now(&server, &api).await;
    create_cms(&api, &[("a", json!({})), ("b", json!({}))]).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        if let Some(WatchEvent::Added(cm)) = stream.try_next().await.expect("event") {
            seen.extend(cm.metadata.name);
        }
    }
    assert_eq!(seen, ["a", "b"]);
}

/// A client that does not retry 503s itself (kube's default retry would wait out the
/// outage inside one call).
fn client_without_retries(server: &FakeApiServer) -> Client {
    let mut config = server.config("default");
    config.default_retry = false;
    Client::try_from(config).expect("kube client")
}

fn pods_reader() -> Vec<fake_apiserver::rbac::Rule> {
    fake_apiserver::rbac::rules_in(
        "rules:\n  - apiGroups: [\"\"]\n    resources: [\"pods\"]\n    verbs: [\"get\", \"list\"]\n",
    )
    .expect("rules")
}

#[tokio::test]
async fn a_user_under_rbac_is_forbidden_what_its_rules_do_not_grant() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let pods: Api<Pod> = Api::namespaced(server.client_as("default", "reader"), "default");
    let created = pods.create(&PostParams::default(), &Pod::default()).await;
    let status = refusal(created);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_mentions(&status.message, &["reader", "cannot create", "\"pods\""]);
}

#[tokio::test]
async fn a_user_under_rbac_may_do_what_its_rules_grant() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let pods: Api<Pod> = Api::namespaced(server.client_as("default", "reader"), "default");
    assert!(pods.get_opt("absent").await.expect("allowed").is_none());
}

#[tokio::test]
async fn a_rule_on_a_resource_does_not_grant_its_subresources() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let pods: Api<Pod> = Api::namespaced(server.client_as("default", "reader"), "default");
    let status = refusal(pods.get_status("any").await);
    assert_eq!(status.code, 403);
    assert_mentions(&status.message, &["pods/status"]);
}

#[tokio::test]
async fn requests_without_a_token_are_not_restricted() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let maps = config_maps(&server.client());
    try_create_cm(&maps, "admin-made").await.expect("created");
}

/// A client of the test's own (cluster-admin) identity impersonating `user`.
fn impersonating(server: &FakeApiServer, user: &str) -> Client {
    let mut config = server.config("default");
    config.auth_info.impersonate = Some(user.to_owned());
    Client::try_from(config).expect("client")
}

#[tokio::test]
async fn an_impersonated_user_is_held_to_its_rules() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let as_reader = impersonating(&server, "reader");
    let pods: Api<Pod> = Api::namespaced(as_reader.clone(), "default");
    assert!(pods.get_opt("absent").await.expect("allowed").is_none());
    let status = refusal(try_create_cm(&config_maps(&as_reader), "denied").await);
    assert_eq!(status.code, 403);
    assert_mentions(
        &status.message,
        &["reader", "cannot create", "\"configmaps\""],
    );
}

#[tokio::test]
async fn a_user_held_to_rules_may_not_impersonate() {
    let server = server().await;
    server.enforce_rbac("reader", pods_reader());
    let mut config = server.config_as("default", "reader");
    config.auth_info.impersonate = Some("admin-like".to_owned());
    let pods: Api<Pod> = Api::namespaced(Client::try_from(config).expect("client"), "default");
    let status = refusal(pods.get_opt("absent").await);
    assert_eq!(status.code, 403);
    assert_mentions(&status.message, &["reader", "cannot impersonate"]);
}

#[test]
fn the_charts_rbac_grants_the_controller_and_the_agents_their_rules() {
    let controller = fake_apiserver::rbac::controller_rules();
    let agent = fake_apiserver::rbac::agent_rules();
    let grants = |rules: &[fake_apiserver::rbac::Rule], resource: &str, verb: &str| {
        rules
            .iter()
            .any(|r| r.resources.iter().any(|x| x == resource) && r.verbs.iter().any(|v| v == verb))
    };
    assert!(grants(&controller, "tasks/status", "patch"));
    assert!(grants(&agent, "leases", "update"));
    assert!(
        grants(&agent, "configmaps", "create"),
        "a planning Pod uploads its answer"
    );
    assert!(!grants(&agent, "configmaps", "update"));
    assert!(!grants(&agent, "pods", "get"));
}
