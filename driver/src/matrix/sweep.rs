//! `sweep:` in a capacity-mode matrix: which configuration of a server group serves most at the
//! target p99. Each variant (a point of the parameters' grid) gets its own servers and a capacity
//! search; `capacity::sweep` expands and ranks them, `run::sweep` runs them.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::model_config::ConfigPath;

/// The most variants a sweep may measure (`max_variants` is at most this).
pub const MAX_SWEEP_VARIANTS: u32 = 1024;

/// Which configuration serves most at the target: every combination of `parameters` (a grid)
/// gets its own servers of `server_group` and a capacity search; the report ranks them and
/// names the best with its config.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The server group whose configuration varies (launched, not `endpoints`).
    pub server_group: String,

    /// The model whose capacity ranks the variants (a capacity result row of that model, e.g.
    /// from the `individual` phase). Omitted: the first result of the group's first phase.
    pub model: Option<String>,

    /// The values each parameter takes, by PATH: `server.args` (the whole list),
    /// `server.tritonserver.binary`, `server.tritonserver.image`, `server.version`,
    /// `server.env.NAME`, `server.resources`, or `models.NAME.FIELD` — a field of model
    /// NAME's config.pbtxt in the group's model repository, any field of model_config.proto,
    /// dotted, `[i]` for an entry of a repeated field and `[KEY]` for one of a map
    /// (`models.m.instance_group[0].count`, `models.m.dynamic_batching.max_queue_delay_microseconds`,
    /// `models.m.parameters[KEY].string_value`); a message field takes a mapping, and `null`
    /// clears a top-level one.
    #[schemars(with = "IndexMap<String, Vec<serde_json::Value>>")]
    pub parameters: IndexMap<String, Vec<serde_json::Value>>,

    /// `grid`: every combination, in order (the first parameter varies slowest); `quick`: a
    /// hill climb from the configuration as it is, one parameter at a time.
    #[serde(default)]
    pub search: SweepSearch,

    /// Variants measured at once (default 1), each with its own servers, workers and launcher
    /// (on Kubernetes, its own pods); the best variant's second measurement runs alone. On one
    /// small machine keep 1: parallel servers and workers share its cores and confound each
    /// other's capacity (a model bound by sleeping, like `fixed_capacity`, is not).
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub parallel: u32,

    /// The largest grid allowed (`grid`), or the most variants measured (`quick`).
    #[serde(default = "default_max_variants")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_variants: u32,

    /// Measure the best variant once more and report both measurements (default true).
    #[serde(default = "yes")]
    pub confirm_best: bool,

    /// Limits a variant must keep: one over `model_instances_max` is listed as skipped and not
    /// measured; one over `gpu_memory` (known only once measured) is listed as excluded. Neither
    /// is ever the best.
    pub constraints: Option<SweepConstraints>,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_max_variants() -> u32 {
    64
}

/// How the variants are chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SweepSearch {
    /// Every combination of the parameters' values.
    #[default]
    Grid,
    /// A hill climb: from the configuration as it is (each parameter's value that the model's
    /// config or the server template already has, else its first), measure the neighbours (one
    /// parameter one value up or down its list) and move to the best while it beats the current
    /// one by more than the capacity search's own tolerance; at most `max_variants` measured.
    Quick,
}

impl SweepSearch {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepSearch::Grid => "grid",
            SweepSearch::Quick => "quick",
        }
    }
}

/// Limits a variant must keep.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepConstraints {
    /// The most model instances (the sum of the swept models' `instance_group` counts): a
    /// variant over it is skipped, not measured.
    #[schemars(range(min = 1))]
    pub model_instances_max: Option<u32>,

    /// The most GPU memory any one of a variant's servers may use (Triton's
    /// `nv_gpu_memory_used_bytes`, summed over the server's GPUs, at its peak during the
    /// variant's run), a size such as `8GiB`, `512MiB`, `8Gi` or `8GB` (binary units `KiB`..`TiB`
    /// or `Ki`..`Ti`, decimal `kB`..`TB` or `k`..`T`, or bytes). A variant over it, or whose
    /// servers exported no GPU memory metric (a constraint that cannot be checked does not
    /// pass), is measured but excluded: never the best.
    #[schemars(
        pattern(r"^[0-9]+(\.[0-9]+)?\s*(B|[kKMGT]B?|[KMGT]iB?)?$"),
        example = "8GiB"
    )]
    pub gpu_memory: Option<String>,
}

impl SweepConstraints {
    /// `gpu_memory` in bytes (None: not set, or not a size; validation refuses that).
    pub fn gpu_memory_bytes(&self) -> Option<u64> {
        parse_size(self.gpu_memory.as_deref()?).ok()
    }
}

/// A size that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeError {
    #[error("{0:?} is not a size: write a number and a unit, e.g. 8GiB, 512MiB, 8Gi or 8GB")]
    NotASize(String),
    #[error("{0:?} is more bytes than a 64-bit count holds")]
    TooLarge(String),
}

/// Bytes in a size: a number (decimals allowed) and a unit: `B` or none (bytes), binary
/// `KiB`/`Ki` .. `TiB`/`Ti` (powers of 1024), decimal `kB`/`k` .. `TB`/`T` (powers of 1000).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let bad = || SizeError::NotASize(text.to_string());
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let is_number = !number.is_empty()
        && !number.starts_with('.')
        && !number.ends_with('.')
        && number.matches('.').count() <= 1;
    if !is_number {
        return Err(bad());
    }
    let number: f64 = number.parse().map_err(|_| bad())?;
    let factor: f64 = match unit.trim_start() {
        "" | "B" => 1.0,
        "k" | "K" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        "Ki" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "Ti" | "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = (number * factor).round();
    if bytes >= u64::MAX as f64 {
        return Err(SizeError::TooLarge(text.to_string()));
    }
    Ok(bytes as u64)
}

/// A sweep parameter's PATH, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepParam {
    ServerArgs,
    ServerBinary,
    ServerImage,
    ServerVersion,
    ServerEnv(String),
    ServerResources,
    /// A field of the named model's config.
    Model {
        model: String,
        path: ConfigPath,
    },
}

/// A sweep PATH that names no parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepParamError {
    #[error("`{0}`: a model parameter is `models.NAME.FIELD`")]
    NoModelField(String),
    #[error("`{0}`: the model name is empty")]
    EmptyModelName(String),
    /// A model config FIELD that model_config.proto does not have (or a bad index).
    #[error("{0}")]
    Field(#[source] super::model_config::ConfigPathError),
    #[error(
        "unknown parameter `{0}`: use server.args, server.tritonserver.binary, \
         server.tritonserver.image, server.version, server.env.NAME, server.resources or \
         models.NAME.FIELD"
    )]
    Unknown(String),
}

impl SweepParam {
    /// Parses a PATH; the error lists what is accepted.
    pub fn parse(text: &str) -> Result<Self, SweepParamError> {
        if let Some(rest) = text.strip_prefix("models.") {
            let (model, field) = rest
                .split_once('.')
                .ok_or_else(|| SweepParamError::NoModelField(text.to_string()))?;
            if model.is_empty() {
                return Err(SweepParamError::EmptyModelName(text.to_string()));
            }
            return Ok(SweepParam::Model {
                model: model.to_string(),
                path: ConfigPath::parse(field).map_err(SweepParamError::Field)?,
            });
        }
        Ok(match text {
            "server.args" => SweepParam::ServerArgs,
            "server.tritonserver.binary" => SweepParam::ServerBinary,
            "server.tritonserver.image" => SweepParam::ServerImage,
            "server.version" => SweepParam::ServerVersion,
            "server.resources" => SweepParam::ServerResources,
            _ => match text.strip_prefix("server.env.") {
                // Whether NAME is a variable's name is validation's.
                Some(name) if !name.is_empty() => SweepParam::ServerEnv(name.to_string()),
                _ => return Err(SweepParamError::Unknown(text.to_string())),
            },
        })
    }

    /// The model this parameter changes the config of.
    pub fn model(&self) -> Option<&str> {
        match self {
            SweepParam::Model { model, .. } => Some(model),
            _ => None,
        }
    }
}

impl Sweep {
    /// How many variants the grid has (saturating).
    pub fn grid_size(&self) -> u64 {
        self.parameters
            .values()
            .fold(1u64, |n, values| n.saturating_mul(values.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("8Gi"), Ok(8 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_size("8 G"), Ok(8_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("100B"), Ok(100));
        for bad in [
            "", "GiB", "8 gigs", "8XB", "-1GiB", "1.2.3GiB", ".5GiB", "8GiBs",
        ] {
            assert_eq!(
                parse_size(bad),
                Err(SizeError::NotASize(bad.to_string())),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_size("99999999TiB"),
            Err(SizeError::TooLarge(_))
        ));
    }

    #[test]
    fn paths_parse_to_what_they_change() {
        assert_eq!(SweepParam::parse("server.args"), Ok(SweepParam::ServerArgs));
        assert_eq!(
            SweepParam::parse("server.env.OMP_NUM_THREADS"),
            Ok(SweepParam::ServerEnv("OMP_NUM_THREADS".into()))
        );
        let p = SweepParam::parse("models.fixed_capacity.instance_group[0].count").unwrap();
        assert_eq!(p.model(), Some("fixed_capacity"));
        let kind = |text| match SweepParam::parse(text) {
            Err(SweepParamError::Unknown(_)) => "unknown",
            Err(SweepParamError::NoModelField(_)) => "no field",
            Err(SweepParamError::EmptyModelName(_)) => "no model",
            Err(SweepParamError::Field(_)) => "field",
            Ok(_) => "ok",
        };
        for (bad, why) in [
            ("server.nope", "unknown"),
            ("server.env.", "unknown"),
            ("tritonserver", "unknown"),
            ("models.m", "no field"),
            ("models..count", "no model"),
            ("models.m.nope", "field"),
        ] {
            assert_eq!(kind(bad), why, "{bad}");
        }
    }
}
