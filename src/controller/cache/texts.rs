//! The texts a reconcile reads that no cache keeps whole: Tasks' descriptions (prompt
//! texts) and the Feature's spec, plan and knowledge texts, each from a cache when it holds
//! it, else read live.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use super::trim::is_whole;
use crate::api::{Feature, Task, TextSource};
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::runtime::context::Context;
use crate::engine::prompt::FeatureText;

/// Why a text could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TextError {
    /// An API call failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The feature's text source names what cannot be read.
    #[error("Feature {feature}: cannot read {what}: {problem}")]
    Unreadable {
        /// The feature.
        feature: String,
        /// The field naming the text, e.g. `spec.context.spec`.
        what: &'static str,
        /// Why.
        problem: String,
    },
}

/// The descriptions (prompt texts) of the Tasks `names` of `feature`: neither the Task nor
/// the Feature cache keeps them ([`CachedTask`], [`super::trim::trim_feature`]). A Task applied from one
/// of the Feature's templates has its template's text, from the Feature's whole spec (one
/// GET per Feature generation while the spec cache holds it; a spec newer than the cache's
/// is the user's latest text, and used); a standalone Task's is the one its watch delivered
/// for its generation ([`super::descriptions`]), else read live. A Task that is gone has
/// none.
pub(crate) async fn descriptions(
    ctx: &Context,
    feature: &Feature,
    siblings: &BTreeMap<String, Arc<CachedTask>>,
    names: &[&str],
) -> Result<BTreeMap<String, String>, CallError> {
    let mut texts = BTreeMap::new();
    let mut spec = None;
    for name in names {
        let sibling = siblings.get(*name);
        let template = sibling.and_then(|t| template_name(feature, t));
        let mut text = None;
        if let Some(template) = template {
            if spec.is_none() && !is_whole(feature) {
                spec = ctx
                    .cache
                    .specs
                    .spec(&ctx.client, ctx.api_timeout, feature)
                    .await?;
            }
            let whole = spec.as_deref().unwrap_or(feature);
            text = whole
                .spec
                .tasks
                .iter()
                .find(|t| t.name == template)
                .map(|t| t.fields.description.clone());
        }
        // A standalone Task, or a template gone from the newest spec: the Task holds what
        // it was applied with (kept from the watch while a standalone Task may run).
        text = text.or_else(|| sibling.and_then(|t| ctx.cache.descriptions.of(t)));
        if text.is_none() {
            text = read_description(ctx, feature, name).await?;
        }
        if let Some(text) = text {
            texts.insert((*name).to_owned(), text);
        }
    }
    Ok(texts)
}

/// The name of the template of `feature` that `task` was applied from, if it is one of its
/// templated Tasks.
fn template_name<'t>(feature: &Feature, task: &'t CachedTask) -> Option<&'t str> {
    let origin = task.origin();
    let template_name = origin.template?;
    let templated = origin.is_templated_by(feature.metadata.uid.as_deref()?);
    let in_plan = feature.spec.tasks.iter().any(|t| t.name == template_name);
    (templated && in_plan).then_some(template_name)
}

async fn read_description(
    ctx: &Context,
    feature: &Feature,
    name: &str,
) -> Result<Option<String>, CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let live = bounded(
        ctx.api_timeout,
        format!("get Task {namespace}/{name}"),
        api.get_opt(name),
    )
    .await?;
    Ok(live.map(|task| task.spec.fields.description))
}

/// The feature's spec and plan texts, read only when an attempt starts in this reconcile.
pub(crate) async fn feature_texts(
    feature: &Feature,
    ctx: &Context,
    starting: bool,
) -> Result<FeatureText, TextError> {
    let name = feature.name_any();
    let mut texts = FeatureText {
        name: name.clone(),
        spec: None,
        plan: None,
    };
    if !starting {
        return Ok(texts);
    }
    let context = &feature.spec.context;
    texts.spec = read_text(feature, ctx, context.spec.as_ref(), "spec.context.spec").await?;
    texts.plan = read_text(feature, ctx, context.plan.as_ref(), "spec.context.plan").await?;
    Ok(texts)
}

/// The text `source` names (inline or a ConfigMap key, read live), `what` naming the field in
/// errors.
pub(crate) async fn read_text(
    feature: &Feature,
    ctx: &Context,
    source: Option<&TextSource>,
    what: &'static str,
) -> Result<Option<String>, TextError> {
    let Some(source) = source else {
        return Ok(None);
    };
    if let Some(inline) = &source.inline {
        return Ok(Some(inline.clone()));
    }
    let Some(selector) = &source.config_map_key_ref else {
        return Ok(None);
    };
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let problem = |problem: String| TextError::Unreadable {
        feature: feature.name_any(),
        what,
        problem,
    };
    let config_map = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{}", selector.name),
        api.get_opt(&selector.name),
    )
    .await?;
    match config_map
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove(&selector.key))
    {
        Some(text) => Ok(Some(text)),
        None if selector.optional == Some(true) => Ok(None),
        None => Err(problem(format!(
            "ConfigMap {} has no key {}",
            selector.name, selector.key
        ))),
    }
}
