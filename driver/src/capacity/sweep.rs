//! Sweeps, pure: the variants of a `sweep:` (its grid), what each changes in the matrix and in
//! its models' configs, and the answer: variants ranked by capacity, the Pareto front of
//! capacity against cost, and the best. `crate::run` runs each variant as a capacity run.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::matrix::model_config;
use crate::matrix::sweep::{Sweep, SweepParam, SweepParamError};
use crate::matrix::{Matrix, ServerTemplate};

/// One point of the grid: each parameter's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// From 1, in grid order.
    pub index: usize,
    pub parameters: IndexMap<String, serde_json::Value>,
}

impl Variant {
    /// `PATH=VALUE, ...`, values as JSON.
    pub fn label(&self) -> String {
        parameters_label(&self.parameters)
    }
}

/// A variant's parameters in words: `PATH=VALUE, ...`, values as JSON.
pub fn parameters_label(parameters: &IndexMap<String, serde_json::Value>) -> String {
    parameters
        .iter()
        .map(|(p, v)| format!("{p}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every combination of the parameters' values, the first parameter varying slowest.
pub fn grid(sweep: &Sweep) -> Vec<Variant> {
    let mut combos: Vec<IndexMap<String, serde_json::Value>> = vec![IndexMap::new()];
    for (path, values) in &sweep.parameters {
        combos = combos
            .into_iter()
            .flat_map(|combo| {
                values.iter().map(move |v| {
                    let mut next = combo.clone();
                    next.insert(path.clone(), v.clone());
                    next
                })
            })
            .collect();
    }
    combos
        .into_iter()
        .enumerate()
        .map(|(i, parameters)| Variant {
            index: i + 1,
            parameters,
        })
        .collect()
}

/// A point of the grid: each parameter's value index.
pub type Point = Vec<usize>;

/// The grid's variant at `point` (indexes into each parameter's values), in [`grid`] order.
pub fn variant_at(sweep: &Sweep, point: &[usize]) -> Variant {
    let mut index = 0;
    let mut parameters = IndexMap::new();
    for ((path, values), &i) in sweep.parameters.iter().zip(point) {
        index = index * values.len() + i;
        parameters.insert(path.clone(), values[i].clone());
    }
    Variant {
        index: index + 1,
        parameters,
    }
}

/// Where the quick search starts: for each parameter, the value the configuration already has
/// (a model's config.pbtxt in `originals`, the server template's field), else its first.
pub fn quick_start(
    sweep: &Sweep,
    template: &ServerTemplate,
    originals: &BTreeMap<String, String>,
) -> Point {
    use crate::matrix::Artifact;
    sweep
        .parameters
        .iter()
        .map(|(path, values)| {
            let current: Option<serde_json::Value> = match SweepParam::parse(path) {
                Ok(SweepParam::ServerArgs) => serde_json::to_value(&template.args).ok(),
                Ok(SweepParam::ServerBinary) => match &template.tritonserver {
                    Artifact::Binary(b) => Some(b.as_str().into()),
                    Artifact::Image(_) => None,
                },
                Ok(SweepParam::ServerImage) => template.tritonserver.image().map(Into::into),
                Ok(SweepParam::ServerVersion) => template.version.as_deref().map(Into::into),
                Ok(SweepParam::ServerEnv(name)) => {
                    template.env.get(&name).map(|v| v.as_str().into())
                }
                Ok(SweepParam::ServerResources) => template
                    .resources
                    .as_ref()
                    .and_then(|r| serde_json::to_value(r).ok()),
                Ok(SweepParam::Model { model, path }) => {
                    // The value that leaves the config as it is.
                    let original = originals.get(&model);
                    let same = original.and_then(|text| {
                        let before = model_config::normalized(text).ok()?;
                        values.iter().position(|v| {
                            let mut config = model_config::parse(text).ok();
                            config.as_mut().is_some_and(|c| {
                                path.set(c, v).is_ok() && model_config::to_text(c) == before
                            })
                        })
                    });
                    return same.unwrap_or(0);
                }
                Err(_) => None,
            };
            current
                .and_then(|c| values.iter().position(|v| *v == c))
                .unwrap_or(0)
        })
        .collect()
}

/// What the quick search does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuickStep {
    /// Measure this point.
    Measure(Point),
    /// No neighbour of this point beats it by more than the spread (or the budget is spent).
    Done(Point),
}

/// The quick search's next step (pure: replayed from what is measured so far). From `start`,
/// the current point's unmeasured neighbours (one parameter one value up or down) are measured
/// one by one; then it moves to the best neighbour if that serves more than `1 + spread` times
/// the current capacity, else it is done. A point without an answer (failed, skipped, none
/// within the target) counts as 0. At most `budget` points are measured.
pub fn quick_step(
    lens: &[usize],
    start: &[usize],
    measured: &BTreeMap<Point, Option<f64>>,
    spread: f64,
    budget: usize,
) -> QuickStep {
    match quick_wave(lens, start, measured, spread, budget) {
        QuickWave::Measure(wave) => QuickStep::Measure(wave[0].clone()),
        QuickWave::Done(p) => QuickStep::Done(p),
    }
}

/// What the quick search measures before its next decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuickWave {
    /// These points (never empty), in the order [`quick_step`] measures them one by one: the
    /// current point if it is not measured yet, then its unmeasured neighbours, within the
    /// budget. None of them depends on another's result, so they may be measured at once.
    Measure(Vec<Point>),
    /// Where the search ended (see [`quick_step`]).
    Done(Point),
}

/// The quick search's current wave (pure, replayed as [`quick_step`]): every point it would
/// measure before it next decides whether to move. `quick_step` is its first point.
pub fn quick_wave(
    lens: &[usize],
    start: &[usize],
    measured: &BTreeMap<Point, Option<f64>>,
    spread: f64,
    budget: usize,
) -> QuickWave {
    let capacity = |p: &Point| measured.get(p).copied().flatten().unwrap_or(0.0);
    let mut current: Point = start.to_vec();
    loop {
        let mut neighbours = Vec::new();
        for (k, &len) in lens.iter().enumerate() {
            for next in [current[k].checked_sub(1), Some(current[k] + 1)] {
                if let Some(next) = next.filter(|&n| n < len) {
                    let mut p = current.clone();
                    p[k] = next;
                    neighbours.push(p);
                }
            }
        }
        let wave: Vec<Point> = std::iter::once(&current)
            .chain(&neighbours)
            .filter(|p| !measured.contains_key(*p))
            .cloned()
            .collect();
        if !wave.is_empty() {
            let room = budget.saturating_sub(measured.len());
            if room == 0 {
                return QuickWave::Done(best_measured(measured).unwrap_or(current));
            }
            return QuickWave::Measure(wave.into_iter().take(room).collect());
        }
        let best = neighbours
            .into_iter()
            .max_by(|a, b| capacity(a).total_cmp(&capacity(b)));
        match best {
            Some(b) if capacity(&b) > capacity(&current) * (1.0 + spread) && capacity(&b) > 0.0 => {
                current = b;
            }
            _ => return QuickWave::Done(current),
        }
    }
}

fn best_measured(measured: &BTreeMap<Point, Option<f64>>) -> Option<Point> {
    measured
        .iter()
        .filter_map(|(p, q)| Some((p, (*q)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(p, _)| p.clone())
}

/// The models whose configs the sweep changes, in parameter order.
pub fn swept_models(sweep: &Sweep) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for path in sweep.parameters.keys() {
        if let Ok(p) = SweepParam::parse(path)
            && let Some(m) = p.model()
            && !models.iter().any(|x| x == m)
        {
            models.push(m.to_string());
        }
    }
    models
}

/// Why a variant's model configs cannot be made: what is wrong, about the sweep parameter that
/// [`ModelConfigsError::param`] names.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigsError {
    /// A swept model's original config.pbtxt does not parse (boxed to keep the error small).
    #[error("its config.pbtxt does not parse: {source}")]
    Unparsed {
        model: String,
        #[source]
        source: Box<model_config::ConfigError>,
    },
    /// A parameter's PATH names no parameter.
    #[error("{source}")]
    Param {
        path: String,
        #[source]
        source: SweepParamError,
    },
    /// A value the model's config cannot take at the parameter's field (e.g. an entry past the
    /// end of a list).
    #[error("{source}")]
    Value {
        path: String,
        #[source]
        source: model_config::ConfigValueError,
    },
}

impl ModelConfigsError {
    /// The sweep parameter the error is about: its PATH, or `models.MODEL` for a config that
    /// does not parse.
    pub fn param(&self) -> String {
        match self {
            ModelConfigsError::Unparsed { model, .. } => format!("models.{model}"),
            ModelConfigsError::Param { path, .. } | ModelConfigsError::Value { path, .. } => {
                path.clone()
            }
        }
    }
}

/// Each swept model's config.pbtxt in `variant`: its original (`originals`, by model) with the
/// variant's values set. The error names the parameter and why (e.g. an entry past the end).
pub fn model_configs(
    originals: &BTreeMap<String, String>,
    variant: &Variant,
) -> Result<BTreeMap<String, String>, ModelConfigsError> {
    let mut configs = BTreeMap::new();
    for (model, text) in originals {
        let mut config =
            model_config::parse(text).map_err(|source| ModelConfigsError::Unparsed {
                model: model.clone(),
                source: Box::new(source),
            })?;
        for (path, value) in &variant.parameters {
            let param = SweepParam::parse(path).map_err(|source| ModelConfigsError::Param {
                path: path.clone(),
                source,
            })?;
            if let SweepParam::Model { model: m, path: p } = param
                && &m == model
            {
                p.set(&mut config, value)
                    .map_err(|source| ModelConfigsError::Value {
                        path: path.clone(),
                        source,
                    })?;
            }
        }
        configs.insert(model.clone(), model_config::to_text(&config));
    }
    Ok(configs)
}

/// How many model instances a config asks for: the sum of its `instance_group` counts (an
/// entry without a count is Triton's default, 1); no instance_group: 1.
pub fn model_instances(config_text: &str) -> Option<u32> {
    let config = model_config::parse(config_text).ok()?;
    let groups = config.get_field_by_name("instance_group")?;
    let groups = groups.as_list()?;
    if groups.is_empty() {
        return Some(1);
    }
    Some(
        groups
            .iter()
            .filter_map(|g| g.as_message())
            .map(|g| {
                g.get_field_by_name("count")
                    .and_then(|c| c.as_i32())
                    .filter(|c| *c > 0)
                    .map_or(1, |c| c as u32)
            })
            .sum(),
    )
}

/// Why a variant's matrix could not be made.
#[derive(Debug, thiserror::Error)]
pub enum VariantError {
    #[error(transparent)]
    Param(#[from] crate::matrix::sweep::SweepParamError),
    /// A value the parameter's field cannot take.
    #[error("{path}: {source}")]
    Value {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("not a sweep")]
    NotASweep,
    #[error("no server group {0:?}")]
    NoServerGroup(String),
    #[error("server group {0:?} has no template")]
    NoTemplate(String),
    #[error("no server template {0:?}")]
    NoServerTemplate(String),
}

/// Sets the variant's `server.*` values on a template.
pub fn apply_server(template: &mut ServerTemplate, variant: &Variant) -> Result<(), VariantError> {
    use crate::matrix::Artifact;
    let string = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    for (path, value) in &variant.parameters {
        match SweepParam::parse(path)? {
            SweepParam::ServerArgs => {
                template.args = serde_json::from_value(value.clone()).map_err(|source| {
                    VariantError::Value {
                        path: path.clone(),
                        source,
                    }
                })?;
            }
            SweepParam::ServerBinary => template.tritonserver = Artifact::Binary(string(value)),
            SweepParam::ServerImage => template.tritonserver = Artifact::Image(string(value)),
            SweepParam::ServerVersion => template.version = Some(string(value)),
            SweepParam::ServerEnv(name) => {
                template.env.insert(name, string(value));
            }
            SweepParam::ServerResources => {
                template.resources =
                    Some(serde_json::from_value(value.clone()).map_err(|source| {
                        VariantError::Value {
                            path: path.clone(),
                            source,
                        }
                    })?);
            }
            SweepParam::Model { .. } => {}
        }
    }
    Ok(())
}

/// The matrix a variant runs: the sweep's, with the swept group's template changed (a copy
/// when other groups use it too), its model repositories replaced by `repositories` (the
/// variant's, when it changes model configs), its own run name and no sweep.
pub fn variant_matrix(
    matrix: &Matrix,
    variant: &Variant,
    repositories: Option<Vec<String>>,
) -> Result<Matrix, VariantError> {
    let sweep = matrix.sweep.as_ref().ok_or(VariantError::NotASweep)?;
    let mut m = matrix.clone();
    m.sweep = None;
    let group = m
        .server_groups
        .get(&sweep.server_group)
        .ok_or_else(|| VariantError::NoServerGroup(sweep.server_group.clone()))?;
    let template_name = group
        .template
        .clone()
        .ok_or_else(|| VariantError::NoTemplate(sweep.server_group.clone()))?;
    let mut template = m
        .server_templates
        .get(&template_name)
        .cloned()
        .ok_or_else(|| VariantError::NoServerTemplate(template_name.clone()))?;
    apply_server(&mut template, variant)?;
    if let Some(repositories) = repositories {
        template.model_repositories = repositories;
    }
    let shared = m.server_groups.iter().any(|(name, g)| {
        name != &sweep.server_group && g.template.as_ref() == Some(&template_name)
    });
    if shared {
        let copy = format!("{template_name}-v{}", variant.index);
        m.server_templates.insert(copy.clone(), template);
        if let Some(g) = m.server_groups.get_mut(&sweep.server_group) {
            g.template = Some(copy);
        }
    } else {
        m.server_templates.insert(template_name, template);
    }
    m.run.name = variant_run_name(&matrix.run.name, variant.index);
    Ok(m)
}

/// `<name>-v<index>`, within a DNS label's 63 characters.
pub fn variant_run_name(name: &str, index: usize) -> String {
    let suffix = format!("-v{index}");
    let keep = crate::matrix::MAX_LABEL_LEN.saturating_sub(suffix.len());
    let mut base: String = name.chars().take(keep).collect();
    while base.ends_with('-') {
        base.pop();
    }
    format!("{base}{suffix}")
}

/// What became of a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VariantStatus {
    /// Its capacity search ran and gave an answer (see `ending` for how it ended).
    Measured,
    /// Its run failed (the server did not start, wrong answers, ...): `why`.
    Failed,
    /// Not run: it breaks a constraint (`why`), or the sweep was interrupted.
    Skipped,
    /// Measured, but what it measured breaks a constraint, or cannot show that it keeps it
    /// (`why`: `constraints.gpu_memory`); never the best.
    Excluded,
}

/// One variant in the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    pub index: usize,
    pub parameters: IndexMap<String, serde_json::Value>,
    pub status: VariantStatus,
    /// Its capacity run (None: not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The most QPS measured within the target (None: none met it).
    pub max_qps: Option<f64>,
    /// Its 95% interval, as another run of the variant would scatter (see
    /// [`capacity_interval`]; None: fewer than two windows pooled into it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps_interval: Option<(f64, f64)>,
    pub p99_ms: Option<f64>,
    /// The group's total concurrency of the answer.
    pub concurrency: Option<u32>,
    /// How the capacity search ended (converged, not_saturated, unreachable, ...).
    pub ending: Option<String>,
    /// The swept models' instances (the cost where there is no GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_instances: Option<u32>,
    /// GPUs per server (`server.resources.gpus`); 0: none.
    #[serde(default)]
    pub gpus: u32,
    /// The group's servers' peak resident memory during the run, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_memory_bytes: Option<f64>,
    /// The most GPU memory one of the group's servers used during the run (Triton's
    /// `nv_gpu_memory_used_bytes`, summed over its GPUs), bytes; None: none exported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<f64>,
    /// Triton's `nv_cpu_utilization` averaged over the run (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_utilization: Option<f64>,
    /// What the group's servers said they are (`triton 2.51.0`), each once: the release a
    /// version sweep (`server.tritonserver.binary` or `.image`) really measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_versions: Vec<String>,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl VariantResult {
    /// What it costs: model instances, times the GPUs where it has any.
    pub fn cost(&self) -> Option<u32> {
        self.model_instances.map(|i| i * self.gpus.max(1))
    }
}

/// The best variant: its second measurement and what to deploy.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestVariant {
    pub index: usize,
    pub parameters: IndexMap<String, serde_json::Value>,
    pub max_qps: f64,
    /// The confirming run's capacity (None: not confirmed, `confirm_best: false`, or it failed).
    pub confirmed_qps: Option<f64>,
    pub confirm_run_id: Option<String>,
    /// Each swept model's full config.pbtxt in this variant.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub configs: BTreeMap<String, String>,
    /// Each swept model's change from its original config (normalized text, unified lines).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_diffs: BTreeMap<String, String>,
    /// A model repository holding this variant's configs, ready to serve (None: only server
    /// settings vary).
    pub model_repository: Option<String>,
}

/// A sweep's answer (report.json `sweep`), saved as the sweep run's document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepAnswer {
    pub server_group: String,
    pub search: String,
    pub target_p99_ms: f64,
    /// Variants in the grid and variants measured (run, failed or not).
    pub grid_size: usize,
    pub measured: usize,
    /// Every variant, best capacity first; failed and skipped last.
    pub variants: Vec<VariantResult>,
    /// Indexes of the variants no other beats on capacity without costing more.
    pub pareto: Vec<usize>,
    pub best: Option<BestVariant>,
    /// Measured variants whose capacity's interval overlaps the best's: not told apart from
    /// it by this sweep (see [`ties`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tied_with_best: Vec<usize>,
}

impl SweepAnswer {
    /// A variant's parameters in words, with the release its servers stated when the variants'
    /// releases differ (a version sweep: a binary's path or an image tag alone does not say
    /// which Triton answered).
    pub fn variant_label(&self, v: &VariantResult) -> String {
        let label = parameters_label(&v.parameters);
        let releases: BTreeSet<&Vec<String>> = self
            .variants
            .iter()
            .filter(|v| !v.server_versions.is_empty())
            .map(|v| &v.server_versions)
            .collect();
        if releases.len() > 1 && !v.server_versions.is_empty() {
            format!("{label} ({})", v.server_versions.join(", "))
        } else {
            label
        }
    }
}

impl stress_common::store::Document for SweepAnswer {
    const KIND: &'static str = "sweep_answer";
}

/// What a variant's run says of `constraints.gpu_memory`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GpuMemoryCheck {
    /// Its servers' peak is within the limit.
    Within,
    /// Its servers' peak (bytes) is over the limit (bytes).
    Over { peak: f64, limit: u64 },
    /// Its servers exported no GPU memory metric (CPU only, or no GPU metrics): the constraint
    /// cannot be checked, so it does not pass.
    NotMeasured,
}

impl GpuMemoryCheck {
    /// The words a variant that does not keep the constraint is listed with (None: it does).
    pub fn why(&self) -> Option<String> {
        match self {
            GpuMemoryCheck::Within => None,
            GpuMemoryCheck::Over { peak, limit } => Some(format!(
                "over constraints.gpu_memory {}: its servers used {} of GPU memory at their peak",
                gib(*limit as f64),
                gib(*peak)
            )),
            GpuMemoryCheck::NotMeasured => Some(
                "gpu_memory not measured: the servers exported no nv_gpu_memory_used_bytes".into(),
            ),
        }
    }
}

/// Bytes in GiB, two decimals.
fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / f64::from(1u32 << 30))
}

/// Whether the peak GPU memory a variant's servers used (`peak`, bytes; None: not exported)
/// keeps to `limit` bytes.
pub fn check_gpu_memory(limit: u64, peak: Option<f64>) -> GpuMemoryCheck {
    match peak {
        None => GpuMemoryCheck::NotMeasured,
        Some(peak) if peak > limit as f64 => GpuMemoryCheck::Over { peak, limit },
        Some(_) => GpuMemoryCheck::Within,
    }
}

/// Judges a measured variant against the constraints only its run can tell
/// (`gpu_memory_limit`, bytes): one that breaks them, or whose run cannot show it keeps them,
/// becomes [`VariantStatus::Excluded`] with why (its measurements stay). Others are left as
/// they are.
pub fn judge_measured_constraints(result: &mut VariantResult, gpu_memory_limit: Option<u64>) {
    if result.status != VariantStatus::Measured {
        return;
    }
    if let Some(why) =
        gpu_memory_limit.and_then(|l| check_gpu_memory(l, result.gpu_memory_bytes).why())
    {
        result.status = VariantStatus::Excluded;
        result.why = Some(why);
    }
}

/// Best capacity first (measured variants by max QPS, those without an answer after them),
/// then those excluded by a constraint, then failed, then skipped; ties in grid order.
pub fn rank(variants: &mut [VariantResult]) {
    let class = |v: &VariantResult| match (v.status, v.max_qps) {
        (VariantStatus::Measured, Some(_)) => 0,
        (VariantStatus::Measured, None) => 1,
        (VariantStatus::Excluded, _) => 2,
        (VariantStatus::Failed, _) => 3,
        (VariantStatus::Skipped, _) => 4,
    };
    variants.sort_by(|a, b| {
        class(a)
            .cmp(&class(b))
            .then(
                b.max_qps
                    .unwrap_or(0.0)
                    .total_cmp(&a.max_qps.unwrap_or(0.0)),
            )
            .then(a.index.cmp(&b.index))
    });
}

/// A variant's capacity `qps` with its 95% interval, from the QPS of the windows pooled into it
/// (`window_qps`, at least two): their spread's relative standard error, widened as one run of
/// a pair is (`judge::change::one_run_rel_se`: a variant is one run on a fresh server, and the
/// run-to-run spread the A/A measured is most of its uncertainty), on the log scale.
pub fn capacity_interval(window_qps: &[f64], qps: f64) -> Option<(f64, f64)> {
    let n = window_qps.len();
    if n < 2 || qps <= 0.0 || !qps.is_finite() {
        return None;
    }
    let mean = window_qps.iter().sum::<f64>() / n as f64;
    let var = window_qps.iter().map(|q| (q - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let rel_se = var.sqrt() / (n as f64).sqrt() / qps;
    let half = crate::judge::change::t_quantile((n - 1) as f64)
        * crate::judge::change::one_run_rel_se("qps", rel_se);
    Some((qps * (-half).exp(), qps * half.exp()))
}

/// Of ranked `variants`, the measured ones whose capacity interval overlaps the best's (the
/// first): non-overlapping intervals are a real difference, overlapping ones are not shown to be
/// one. None without the best's interval; a variant without its own is not called tied.
pub fn ties(variants: &[VariantResult]) -> Vec<usize> {
    let answered = |v: &&VariantResult| v.status == VariantStatus::Measured && v.max_qps.is_some();
    let Some(best) = variants.iter().find(answered) else {
        return Vec::new();
    };
    let Some((low, _)) = best.qps_interval else {
        return Vec::new();
    };
    variants
        .iter()
        .filter(answered)
        .filter(|v| v.index != best.index)
        .filter(|v| v.qps_interval.is_some_and(|(_, high)| high >= low))
        .map(|v| v.index)
        .collect()
}

/// The measured variants no other one dominates: another at least as much capacity at no more
/// cost (instances x GPUs) and no more memory, better in one of them. In rank order.
pub fn pareto(variants: &[VariantResult]) -> Vec<usize> {
    let answered: Vec<&VariantResult> = variants
        .iter()
        .filter(|v| v.status == VariantStatus::Measured && v.max_qps.is_some())
        .collect();
    let at_most = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => a <= b,
        _ => true,
    };
    let less = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if a < b);
    let cost = |v: &VariantResult| v.cost().map(f64::from);
    answered
        .iter()
        .filter(|v| {
            !answered.iter().any(|o| {
                let (oq, vq) = (o.max_qps.unwrap_or(0.0), v.max_qps.unwrap_or(0.0));
                o.index != v.index
                    && oq >= vq
                    && at_most(cost(o), cost(v))
                    && at_most(o.server_memory_bytes, v.server_memory_bytes)
                    && (oq > vq
                        || less(cost(o), cost(v))
                        || less(o.server_memory_bytes, v.server_memory_bytes))
            })
        })
        .map(|v| v.index)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sweep(parameters: &[(&str, Vec<serde_json::Value>)]) -> Sweep {
        Sweep {
            server_group: "triton".into(),
            model: None,
            parameters: parameters
                .iter()
                .map(|(p, v)| (p.to_string(), v.clone()))
                .collect(),
            search: Default::default(),
            parallel: 1,
            max_variants: 64,
            confirm_best: true,
            constraints: None,
        }
    }

    #[test]
    fn the_grid_is_every_combination_first_parameter_slowest() {
        let s = sweep(&[
            (
                "models.m.instance_group[0].count",
                vec![json!(1), json!(2), json!(4)],
            ),
            ("server.args", vec![json!([]), json!(["--log-verbose=1"])]),
        ]);
        let g = grid(&s);
        assert_eq!(g.len(), 6);
        assert_eq!(s.grid_size(), 6);
        let firsts: Vec<&serde_json::Value> = g
            .iter()
            .map(|v| &v.parameters["models.m.instance_group[0].count"])
            .collect();
        assert_eq!(
            firsts,
            [
                &json!(1),
                &json!(1),
                &json!(2),
                &json!(2),
                &json!(4),
                &json!(4)
            ]
        );
        assert_eq!(
            g.iter().map(|v| v.index).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            g[1].label(),
            "models.m.instance_group[0].count=1, server.args=[\"--log-verbose=1\"]"
        );
    }

    #[test]
    fn a_point_is_its_grid_variant() {
        let s = sweep(&[
            (
                "models.m.instance_group[0].count",
                vec![json!(1), json!(2), json!(4)],
            ),
            ("server.args", vec![json!([]), json!(["--log-verbose=1"])]),
        ]);
        let g = grid(&s);
        for a in 0..3 {
            for b in 0..2 {
                let v = variant_at(&s, &[a, b]);
                assert_eq!(v, g[v.index - 1]);
            }
        }
    }

    #[test]
    fn the_quick_search_starts_from_the_configuration_as_it_is() {
        let s = sweep(&[
            (
                "models.m.instance_group[0].count",
                vec![json!(1), json!(2), json!(4)],
            ),
            ("server.args", vec![json!([]), json!(["--log-verbose=1"])]),
            ("server.env.OMP_NUM_THREADS", vec![json!("1"), json!("2")]),
        ]);
        let originals = BTreeMap::from([(
            "m".to_string(),
            "name: \"m\" instance_group [ { count: 2 kind: KIND_CPU } ]".to_string(),
        )]);
        let template: ServerTemplate = serde_json::from_value(json!({
            "tritonserver": { "binary": "auto" },
            "model_repositories": ["models"],
            "args": ["--log-verbose=1"],
        }))
        .unwrap();
        // count 2 is the config's; the args are the template's; the variable is unset: first.
        assert_eq!(quick_start(&s, &template, &originals), vec![1, 1, 0]);
    }

    /// Runs the quick search to its end over a capacity surface; returns where it ended and
    /// how many points it measured.
    fn climb(
        lens: &[usize],
        start: &[usize],
        surface: impl Fn(&[usize]) -> Option<f64>,
    ) -> (Point, usize) {
        let mut measured = BTreeMap::new();
        loop {
            match quick_step(lens, start, &measured, 0.05, 64) {
                QuickStep::Measure(p) => {
                    assert!(!measured.contains_key(&p), "{p:?} measured twice");
                    let q = surface(&p);
                    measured.insert(p, q);
                }
                QuickStep::Done(p) => return (p, measured.len()),
            }
        }
    }

    #[test]
    fn the_quick_search_climbs_to_the_best_in_fewer_measurements_than_the_grid() {
        // Capacity grows with instances (first parameter), and peaks at the middle delay.
        let counts = [1.0, 2.0, 4.0, 8.0];
        let delays = [0.6, 1.0, 0.8, 0.5, 0.3];
        let surface = |p: &[usize]| Some(20.0 * counts[p[0]] * delays[p[1]]);
        let (best, n) = climb(&[4, 5], &[1, 0], surface);
        assert_eq!(best, vec![3, 1]);
        assert!(n < 20, "{n} of 20 measured");
        // A failed point (no answer) is never the way up: a local search stops before it when
        // no other neighbour is better (what the grid is for).
        let with_hole = |p: &[usize]| (p != [2, 1]).then(|| 20.0 * counts[p[0]] * delays[p[1]]);
        let (best, _) = climb(&[4, 5], &[0, 1], with_hole);
        assert_eq!(best, vec![1, 1], "stops short of the failed variant");
    }

    #[test]
    fn the_quick_search_stops_where_no_neighbour_beats_the_spread() {
        // Flat within 3%: the start is as good as any, measured with its two neighbours only.
        let flat = |p: &[usize]| Some(100.0 + p[0] as f64);
        let (best, n) = climb(&[5], &[2], flat);
        assert_eq!((best, n), (vec![2], 3));
        // The budget bounds what is measured; the best measured is the answer.
        let rising = |p: &[usize]| Some(10.0 * (1 + p[0]) as f64);
        let mut measured = BTreeMap::new();
        let mut steps = 0;
        while let QuickStep::Measure(p) = quick_step(&[10], &[0], &measured, 0.05, 3) {
            measured.insert(p.clone(), rising(&p));
            steps += 1;
        }
        assert_eq!(steps, 3);
        assert_eq!(
            quick_step(&[10], &[0], &measured, 0.05, 3),
            QuickStep::Done(vec![2])
        );
    }

    #[test]
    fn model_configs_change_only_their_model_and_count_instances() {
        let originals = BTreeMap::from([
            (
                "m".to_string(),
                "name: \"m\" instance_group [ { count: 2 kind: KIND_CPU } ]".to_string(),
            ),
            ("other".to_string(), "name: \"other\"".to_string()),
        ]);
        let v = Variant {
            index: 1,
            parameters: IndexMap::from([(
                "models.m.instance_group[0].count".to_string(),
                json!(4),
            )]),
        };
        let configs = model_configs(&originals, &v).unwrap();
        assert_eq!(model_instances(&configs["m"]), Some(4));
        assert_eq!(model_instances(&originals["m"]), Some(2));
        assert_eq!(model_instances(&configs["other"]), Some(1));
        assert_eq!(
            configs["other"],
            model_config::normalized(&originals["other"]).unwrap()
        );
        let past_the_end = Variant {
            index: 2,
            parameters: IndexMap::from([(
                "models.m.instance_group[1].count".to_string(),
                json!(4),
            )]),
        };
        let err = model_configs(&originals, &past_the_end).unwrap_err();
        assert_eq!(err.param(), "models.m.instance_group[1].count");
        assert!(
            matches!(
                &err,
                ModelConfigsError::Value {
                    source: model_config::ConfigValueError::PastTheEnd {
                        len: 1,
                        index: 1,
                        ..
                    },
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "`instance_group[1].count`: the config's `instance_group` has 1 entry (index 1 is \
             past the end)"
        );
        let unknown = Variant {
            index: 3,
            parameters: IndexMap::from([("models.m".to_string(), json!(4))]),
        };
        let err = model_configs(&originals, &unknown).unwrap_err();
        assert_eq!(err.param(), "models.m");
        assert!(
            matches!(
                &err,
                ModelConfigsError::Param {
                    source: SweepParamError::NoModelField(_),
                    ..
                }
            ),
            "{err:?}"
        );
        let unparsed = BTreeMap::from([("m".to_string(), "max_batch_size: [".to_string())]);
        let err = model_configs(&unparsed, &v).unwrap_err();
        assert_eq!(err.param(), "models.m");
        assert!(
            matches!(
                &err,
                ModelConfigsError::Unparsed { source, .. }
                    if matches!(**source, model_config::ConfigError::Text(_))
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("its config.pbtxt does not parse: "),
            "{err}"
        );
    }

    fn measured(index: usize, qps: Option<f64>, instances: u32, memory: f64) -> VariantResult {
        VariantResult {
            index,
            parameters: IndexMap::new(),
            status: VariantStatus::Measured,
            run_id: None,
            max_qps: qps,
            qps_interval: None,
            p99_ms: None,
            concurrency: None,
            ending: None,
            model_instances: Some(instances),
            gpus: 0,
            server_memory_bytes: Some(memory),
            gpu_memory_bytes: None,
            server_cpu_utilization: None,
            server_versions: Vec::new(),
            why: None,
        }
    }

    #[test]
    fn gpu_memory_over_the_limit_or_not_measured_excludes_a_variant_from_the_best() {
        const GIB: u64 = 1 << 30;
        assert_eq!(
            check_gpu_memory(8 * GIB, Some(7.5 * GIB as f64)),
            GpuMemoryCheck::Within
        );
        assert_eq!(
            check_gpu_memory(8 * GIB, Some(8.0 * GIB as f64)),
            GpuMemoryCheck::Within,
            "at the limit is within it"
        );
        assert_eq!(
            check_gpu_memory(8 * GIB, Some(9.25 * GIB as f64)),
            GpuMemoryCheck::Over {
                peak: 9.25 * GIB as f64,
                limit: 8 * GIB
            }
        );
        assert_eq!(check_gpu_memory(8 * GIB, None), GpuMemoryCheck::NotMeasured);

        let with_gpu = |index, qps, gpu: Option<f64>| {
            let mut v = measured(index, Some(qps), 1, 1.0);
            v.gpu_memory_bytes = gpu;
            v
        };
        // The fastest uses too much; the next keeps to it; the third exported nothing.
        let mut v = vec![
            with_gpu(1, 80.0, Some(9.25 * GIB as f64)),
            with_gpu(2, 40.0, Some(6.0 * GIB as f64)),
            with_gpu(3, 60.0, None),
        ];
        for r in &mut v {
            judge_measured_constraints(r, Some(8 * GIB));
        }
        assert_eq!(v[0].status, VariantStatus::Excluded);
        assert_eq!(
            v[0].why.as_deref(),
            Some(
                "over constraints.gpu_memory 8.00 GiB: its servers used 9.25 GiB of GPU memory \
                 at their peak"
            )
        );
        assert_eq!(v[1].status, VariantStatus::Measured);
        assert_eq!(v[1].why, None);
        assert_eq!(v[2].status, VariantStatus::Excluded);
        assert_eq!(
            v[2].why.as_deref(),
            Some("gpu_memory not measured: the servers exported no nv_gpu_memory_used_bytes")
        );
        // Their measurements stay; they rank after every variant that keeps the constraints,
        // and are not on the front.
        assert_eq!(v[0].max_qps, Some(80.0));
        rank(&mut v);
        assert_eq!(v.iter().map(|v| v.index).collect::<Vec<_>>(), [2, 1, 3]);
        assert_eq!(pareto(&v), [2]);
        // Without the constraint nothing is judged; a failed variant stays failed.
        let mut free = with_gpu(4, 80.0, None);
        judge_measured_constraints(&mut free, None);
        assert_eq!(free.status, VariantStatus::Measured);
        let mut failed = with_gpu(5, 80.0, None);
        failed.status = VariantStatus::Failed;
        judge_measured_constraints(&mut failed, Some(GIB));
        assert_eq!(failed.status, VariantStatus::Failed);
    }

    #[test]
    fn variants_rank_by_capacity_and_the_front_keeps_what_no_other_beats_at_its_cost() {
        let mut failed = measured(5, None, 1, 1.0);
        failed.status = VariantStatus::Failed;
        let mut v = vec![
            failed,
            measured(1, Some(20.0), 1, 100.0),
            measured(2, Some(40.0), 2, 150.0),
            measured(3, Some(80.0), 4, 200.0),
            // As much as 3 at more cost: dominated.
            measured(4, Some(80.0), 8, 300.0),
            measured(6, None, 1, 1.0),
        ];
        rank(&mut v);
        assert_eq!(
            v.iter().map(|v| v.index).collect::<Vec<_>>(),
            [3, 4, 2, 1, 6, 5]
        );
        assert_eq!(pareto(&v), [3, 2, 1]);
    }

    #[test]
    fn a_variants_label_names_its_release_only_where_the_releases_differ() {
        let on = |index: usize, binary: &str, release: &str| {
            let mut v = measured(index, Some(20.0), 1, 1.0);
            v.parameters
                .insert("server.tritonserver.binary".into(), binary.into());
            v.server_versions = vec![release.to_string()];
            v
        };
        let answer = |variants: Vec<VariantResult>| SweepAnswer {
            server_group: "triton".into(),
            search: "grid".into(),
            target_p99_ms: 10.0,
            grid_size: variants.len(),
            measured: variants.len(),
            variants,
            pareto: Vec::new(),
            best: None,
            tied_with_best: Vec::new(),
        };
        let versions = answer(vec![
            on(1, "auto", "triton 2.51.0"),
            on(2, "old/tritonserver", "triton 2.44.0"),
        ]);
        assert_eq!(
            versions.variant_label(&versions.variants[1]),
            "server.tritonserver.binary=\"old/tritonserver\" (triton 2.44.0)"
        );
        // One release throughout (any other sweep): the parameters alone.
        let same = answer(vec![
            on(1, "auto", "triton 2.51.0"),
            on(2, "copy/tritonserver", "triton 2.51.0"),
        ]);
        assert_eq!(
            same.variant_label(&same.variants[0]),
            "server.tritonserver.binary=\"auto\""
        );
    }

    #[test]
    fn variant_run_names_stay_dns_labels() {
        assert_eq!(variant_run_name("sweep", 3), "sweep-v3");
        let long = "a".repeat(70);
        let name = variant_run_name(&long, 12);
        assert!(crate::matrix::is_dns_label(&name), "{name}");
        assert!(name.ends_with("-v12"));
    }

    #[test]
    fn a_variant_s_capacity_carries_an_interval_as_wide_as_a_rerun_scatters() {
        // Four windows within 2% of each other: the interval is the run-to-run spread's, not
        // the windows' alone, and it holds the answer.
        let (low, high) = capacity_interval(&[100.0, 102.0, 98.0, 101.0], 100.0).unwrap();
        assert!(low < 100.0 && high > 100.0, "{low} {high}");
        assert!(
            high / low > 1.08,
            "widened past the windows' own ±2%: {low} {high}"
        );
        // Noisier windows, a wider interval.
        let (noisy_low, noisy_high) =
            capacity_interval(&[80.0, 120.0, 90.0, 110.0], 100.0).unwrap();
        assert!(noisy_high / noisy_low > high / low);
        assert_eq!(capacity_interval(&[100.0], 100.0), None, "one window");
        assert_eq!(capacity_interval(&[0.0, 0.0], 0.0), None, "no capacity");
    }

    #[test]
    fn variants_whose_intervals_overlap_the_best_s_are_tied_with_it() {
        let with = |index, qps, interval: Option<(f64, f64)>| {
            let mut v = measured(index, Some(qps), 1, 1.0);
            v.qps_interval = interval;
            v
        };
        let mut variants = vec![
            with(3, 80.0, Some((74.0, 86.0))),
            with(1, 100.0, Some((92.0, 108.0))),
            with(2, 95.0, Some((88.0, 103.0))),
            with(4, 94.0, None),
        ];
        variants.push(VariantResult {
            status: VariantStatus::Failed,
            ..with(5, 99.0, Some((90.0, 110.0)))
        });
        rank(&mut variants);
        assert_eq!(
            ties(&variants),
            vec![2],
            "3 is slower beyond doubt; 4 has no interval"
        );
        // Without the best's interval nothing is called tied.
        variants[0].qps_interval = None;
        assert_eq!(ties(&variants), Vec::<usize>::new());
    }
}
