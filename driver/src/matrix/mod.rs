//! The test matrix, YAML version 1: what servers and stress clients to run, and how.
//!
//! ```yaml
//! version: 1
//! run: { name: smoke, duration: 60s, poll_interval: 1s }
//! server_templates:
//!   cpu-python: { tritonserver: { binary: auto }, model_repositories: [../models] }
//! server_groups:
//!   triton: { template: cpu-python, instances: 1 }
//! client_templates:
//!   grpc-all: { worker: { binary: auto }, protocol: grpc, concurrency: 4 }
//! client_groups:
//!   grpc-clients: { template: grpc-all, instances: 1, target: triton }
//! ```
//!
//! [`load`] / [`parse`] read a matrix strictly: YAML syntax, duplicate keys, unknown fields,
//! wrong types, missing fields, an unsupported `version` and every semantic rule (names,
//! references, counts, durations, weights, ...) give [`Diagnostic`]s of the form
//! `FILE:LINE:COLUMN: FIELD.PATH: message`. A value that breaks its own rule (a bound, a
//! DNS label, a quantity, a URL, an item of a list or a value of a map: an argument, a
//! scenario's weight, ...) is refused where it is read ([`checked`]), every one of
//! them; a problem that stops
//! deserialisation (syntax, types, unknown or missing fields, `binary` and `image` both or
//! neither set) is reported after them and alone, since nothing after it can be trusted;
//! duplicate keys are all reported; once the file deserialises, every rule across fields
//! ([`validate`]) is checked too, and all problems are reported in file order.
//!
//! [`Matrix::servers`] and [`Matrix::clients`] expand the groups into the members the launchers
//! start; [`json_schema`] is the JSON schema of the format (committed as
//! `test-matrices/schema.json`).

pub mod bounds;
pub mod cells;
mod checked;
pub mod compare;
mod duration;
mod error;
mod expand;
pub mod faults;
pub mod fingerprint;
pub mod known;
pub mod model_config;
mod reference;
pub mod slo;
mod source;
pub mod sweep;
mod types;
mod validate;

use std::path::Path;

use serde_saphyr::{DefaultMessageFormatter, MessageFormatter};

pub use checked::{
    CHANGE_POINT_WINDOW, MAX_LABEL_LEN, MIN_EFFECT, REPEATS, RUN_LENGTH, WAIT, flag, is_dns_label,
};
pub use error::{Diagnostic, MatrixError, Position};
pub use expand::{ClientMember, ExternalServer, ServerMember, member_name};
pub use fingerprint::{FINGERPRINT_VERSION, fingerprint};
pub use reference::reference_markdown;
pub use source::FieldPath;
pub use types::{
    ARTIFACT_AUTO, Artifact, CapacityPhase, CapacitySettings, CellSchedule, ClientGroup,
    ClientTemplate, DEFAULT_CORR_ID_BLOCK_SIZE, Endpoint, EndpointPorts, FailFast, IssueMatch,
    KnownIssue, LoadMode, MATRIX_VERSION, MODEL_IMAGE_SOURCE, Matrix, ModelImage, ModelSpec,
    MountedConfig, PrometheusSource, Protocol, RegressionSettings, ReportSettings, Resources,
    RunMode, RunSettings, ServerGroup, ServerTemplate, ServerVolume, SloBound, SloMetric, SloRule,
    SpikeSettings, Toleration, TraceLevel, TraceMode, TraceSettings,
};
pub use types::{
    LAUNCHER_VOLUMES, MODEL_CONFIGS_VOLUME, MODEL_IMAGE_VOLUME, SHM_VOLUME, TMP_VOLUME,
    TRACES_VOLUME,
};
pub use validate::CORR_IDS_PER_STREAM;

use source::{Anchor, PathSeg, SourceMap};

/// Reads and validates the matrix at `path`. Diagnostics name the file as `path` is written;
/// the returned matrix remembers `path` for [`Matrix::resolve_local_path`].
pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
    let text = std::fs::read_to_string(path).map_err(|error| MatrixError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse_from(&text, &path.display().to_string(), Some(path))
}

/// Files a matrix names relative to itself (input data, request intervals), made absolute:
/// the worker runs in another directory.
fn resolve_relative_files(matrix: &mut Matrix, dir: &Path) {
    for t in matrix.client_templates.values_mut() {
        for m in &mut t.models {
            // An empty name stays empty: validation names it.
            if let Some(data) = &mut m.input_data
                && !matches!(data.trim(), "" | "zero" | "random")
                && Path::new(data.as_str()).is_relative()
            {
                *data = dir.join(&*data).display().to_string();
            }
        }
        if let Some(LoadMode::Intervals(file)) = &mut t.load
            && file.is_relative()
            && !file.as_os_str().is_empty()
        {
            *file = dir.join(&*file);
        }
    }
}

/// What a redacted matrix text says instead of itself when its env values cannot be cut out
/// one by one.
pub const WITHHELD_MATRIX: &str =
    "# (the matrix text is withheld: its env values could not be redacted one by one)\n";

/// `text` with the value of every `env:` entry replaced by `<redacted>`: a matrix shown to
/// others (`driver serve`) may carry credentials there. A text whose values cannot be cut out
/// exactly (it does not parse; a block or multi-line scalar) is withheld whole.
pub fn redact_env(text: &str) -> String {
    let Ok((map, _)) = source::SourceMap::scan(text) else {
        return WITHHELD_MATRIX.into();
    };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut values = map.env_values();
    // Right to left within a line, so earlier columns stay where they are.
    values.sort_by_key(|(at, _)| std::cmp::Reverse((at.line, at.column)));
    for (at, scalar) in values {
        let Some(line) = lines.get_mut(at.line as usize - 1) else {
            return WITHHELD_MATRIX.into();
        };
        let chars: Vec<char> = line.chars().collect();
        let start = at.column as usize - 1;
        let Some(end) = scalar_end(&chars, start, &scalar) else {
            return WITHHELD_MATRIX.into();
        };
        let redacted: String = chars[..start]
            .iter()
            .chain("<redacted>".chars().collect::<Vec<_>>().iter())
            .chain(chars[end..].iter())
            .collect();
        *line = redacted;
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Where the scalar token starting at `start` of `line` ends (exclusive), when it is all on
/// this line: a quoted one at its closing quote, a plain one after its text.
fn scalar_end(line: &[char], start: usize, scalar: &str) -> Option<usize> {
    match line.get(start)? {
        '"' => {
            let mut i = start + 1;
            while i < line.len() {
                match line[i] {
                    '\\' => i += 2,
                    '"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
            None
        }
        '\'' => {
            let mut i = start + 1;
            while i < line.len() {
                if line[i] == '\'' {
                    if line.get(i + 1) == Some(&'\'') {
                        i += 2;
                        continue;
                    }
                    return Some(i + 1);
                }
                i += 1;
            }
            None
        }
        '|' | '>' => None,
        _ => {
            let token: Vec<char> = scalar.chars().collect();
            let end = start + token.len();
            (line.get(start..end)? == token.as_slice()).then_some(end)
        }
    }
}

/// Parses and validates a matrix from `text`; `file_name` is what diagnostics call the file.
/// Relative files are relative to the working directory.
pub fn parse(text: &str, file_name: &str) -> Result<Matrix, MatrixError> {
    parse_from(text, file_name, None)
}

/// [`parse`] of the text of the file at `source` (None: not from a file), whose relative
/// paths are then relative to its directory.
fn parse_from(text: &str, file_name: &str, source: Option<&Path>) -> Result<Matrix, MatrixError> {
    parse_yaml(text, file_name, true, |matrix: &mut Matrix| {
        if let Some(source) = source {
            matrix.source_path = Some(source.to_path_buf());
            if let Some(dir) = source.parent() {
                resolve_relative_files(matrix, dir);
            }
        }
        validate::check(matrix)
    })
}

/// Reads and validates a known-issues file (`driver run --known-issues FILE`): a YAML list of
/// [`KnownIssue`]s, with the same strictness and `FILE:LINE:COLUMN: FIELD` diagnostics as a
/// matrix.
pub fn load_known_issues(path: &Path) -> Result<Vec<known::Known>, MatrixError> {
    let text = std::fs::read_to_string(path).map_err(|error| MatrixError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse_known_issues(&text, &path.display().to_string())
}

/// [`load_known_issues`] of `text`; `file_name` is what diagnostics call the file.
pub fn parse_known_issues(text: &str, file_name: &str) -> Result<Vec<known::Known>, MatrixError> {
    let mut read = Vec::new();
    parse_yaml(text, file_name, false, |issues: &mut Vec<KnownIssue>| {
        // A file of its own knows no matrix: the worker's scenario names only.
        let (problems, known) = validate::check_known_issues(FieldPath::root(), issues, false);
        read = known;
        problems
    })?;
    Ok(read)
}

/// Reads a YAML document strictly into `T`: (1) positions and duplicate keys (and, for a
/// matrix, its version), (2) the typed deserialisation, which reports every value refused by
/// its rule ([`checked`]) and then the first other error alone, (3) `check`'s rules, all of
/// them, located in the text.
fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    file_name: &str,
    matrix_version: bool,
    check: impl FnOnce(&mut T) -> Vec<validate::Issue>,
) -> Result<T, MatrixError> {
    // Pass 1: positions, duplicate keys, and the version before anything that depends on it.
    let scanned = SourceMap::scan(text);
    if let Ok((map, duplicates)) = &scanned {
        check_scan(map, duplicates, file_name, matrix_version)?;
    }

    // Pass 2: the typed, strict deserialisation.
    let (typed, refused) = deserialize_strict::<T>(text, file_name, &scanned);
    let mut document = typed.map_err(|stop| {
        let mut all = refused.clone();
        all.push(stop);
        MatrixError::Invalid(all)
    })?;
    let map = match scanned {
        Ok((map, _)) => map,
        Err(e) => {
            let position = e.location().as_ref().and_then(source::position);
            return Err(MatrixError::Invalid(vec![diagnostic(
                file_name,
                position,
                &FieldPath::root(),
                deserialize_message(&e, text),
            )]));
        }
    };

    // Pass 3: the rules across fields, all of them; none about a refused value, which was
    // read as the nearest one allowed.
    let issues = check(&mut document)
        .into_iter()
        .filter(|issue| !refused.iter().any(|r| r.path == issue.path.to_string()));
    let mut diagnostics = locate_issues(issues.collect(), &map, file_name);
    diagnostics.extend(refused);
    if diagnostics.is_empty() {
        Ok(document)
    } else {
        diagnostics.sort_by_key(|d| d.position);
        Err(MatrixError::Invalid(diagnostics))
    }
}

/// A diagnostic about `path` of the file diagnostics call `file_name`.
fn diagnostic(
    file_name: &str,
    position: Option<Position>,
    path: &FieldPath,
    message: String,
) -> Diagnostic {
    Diagnostic {
        file: file_name.to_string(),
        position,
        path: path.to_string(),
        message,
    }
}

/// [`parse_yaml`]'s pass 1 on a scanned text: every duplicate key, else (for a matrix) an
/// unsupported version, which would make the rest of the file read wrongly.
fn check_scan(
    map: &SourceMap,
    duplicates: &[source::Duplicate],
    file_name: &str,
    matrix_version: bool,
) -> Result<(), MatrixError> {
    if !duplicates.is_empty() {
        return Err(MatrixError::Invalid(
            duplicates
                .iter()
                .map(|d| {
                    let first = d
                        .first
                        .map(|p| format!(" (first at {p})"))
                        .unwrap_or_default();
                    let name = match d.path.0.last() {
                        Some(PathSeg::Key(k)) => k.as_str(),
                        _ => "",
                    };
                    diagnostic(
                        file_name,
                        d.at,
                        &d.path,
                        format!("duplicate key {name:?}{first}"),
                    )
                })
                .collect(),
        ));
    }
    let version = FieldPath::root().key("version");
    if matrix_version
        && let Some(v) = map.scalar(&version)
        && let Ok(n) = v.parse::<u64>()
        && n != u64::from(MATRIX_VERSION)
    {
        return Err(MatrixError::Invalid(vec![diagnostic(
            file_name,
            map.locate(&version, Anchor::Value),
            &version,
            format!("unsupported matrix version {n} (this driver reads version {MATRIX_VERSION})"),
        )]));
    }
    Ok(())
}

/// [`parse_yaml`]'s pass 2: the typed, strict deserialisation of `text`, located with the scan
/// of pass 1 where it succeeded: the document or the error that stopped it, and the values
/// refused by their rules before (a document read past them is for the rules across fields
/// only).
fn deserialize_strict<T: serde::de::DeserializeOwned>(
    text: &str,
    file_name: &str,
    scanned: &Result<(SourceMap, Vec<source::Duplicate>), serde_saphyr::Error>,
) -> (Result<T, Diagnostic>, Vec<Diagnostic>) {
    let read = || {
        let mut error_path = None;
        let typed: Result<T, _> = serde_saphyr::with_deserializer_from_str(text, |de| {
            serde_path_to_error::deserialize(de).map_err(|e| {
                error_path = Some(field_path(e.path()));
                e.into_inner()
            })
        });
        // Boxed: the error is large, and the reading loop passes it on.
        typed.map_err(|e| Box::new((error_path.unwrap_or_default(), e)))
    };
    let located = |path: &FieldPath, anchor| {
        let (map, _) = scanned.as_ref().ok()?;
        map.locate(path, anchor)
    };
    let (typed, refused) = checked::read_all(read);
    // A refused value is located where it is used (an alias's value, at the alias).
    let refused = refused.into_iter().map(|(refusal, anchor)| {
        let (path, e) = *refusal;
        let position =
            located(&path, anchor).or_else(|| e.location().as_ref().and_then(source::position));
        diagnostic(file_name, position, &path, deserialize_message(&e, text))
    });
    let typed = typed.map_err(|stop| {
        let (path, e) = *stop;
        let missing_field = matches!(
            e.without_snippet(),
            serde_saphyr::Error::SerdeMissingField { .. }
        );
        // A missing field is reported at the key of the mapping that lacks it.
        let position = if missing_field && !path.0.is_empty() {
            located(&path, Anchor::Key)
        } else {
            None
        }
        .or_else(|| e.location().as_ref().and_then(source::position))
        .or_else(|| located(&path, Anchor::Value));
        diagnostic(file_name, position, &path, deserialize_message(&e, text))
    });
    (typed, refused.collect())
}

/// [`parse_yaml`]'s pass 3: `check`'s issues as diagnostics located in the text, each naming
/// where its `also` place is.
fn locate_issues(
    issues: Vec<validate::Issue>,
    map: &SourceMap,
    file_name: &str,
) -> Vec<Diagnostic> {
    issues
        .into_iter()
        .map(|issue| {
            let mut message = issue.message;
            if let Some(also) = &issue.also {
                message.push_str(&format!(" (see {also}"));
                if let Some(p) = map.locate(also, Anchor::Key) {
                    message.push_str(&format!(" at {p}"));
                }
                message.push(')');
            }
            diagnostic(
                file_name,
                map.locate(&issue.path, issue.anchor),
                &issue.path,
                message,
            )
        })
        .collect()
}

impl Matrix {
    /// Where the `index`-th endpoint of server group `group` is in the file this matrix was
    /// loaded from, as `FILE:LINE:COLUMN` (of its `port` address when given and written as a
    /// mapping). None for a matrix not loaded from a file, or a file that changed since.
    pub fn locate_endpoint(&self, group: &str, index: u32, port: Option<&str>) -> Option<String> {
        let file = self.source_path.as_deref()?;
        let text = std::fs::read_to_string(file).ok()?;
        let (map, _) = SourceMap::scan(&text).ok()?;
        let entry = FieldPath::root()
            .key("server_groups")
            .key(group)
            .key("endpoints")
            .index(usize::try_from(index).ok()?);
        let position = port
            .and_then(|p| map.locate(&entry.key(p), Anchor::Value))
            .or_else(|| map.locate(&entry, Anchor::Value))?;
        Some(format!("{}:{position}", file.display()))
    }
}

impl Matrix {
    /// Where field `field` of the `index`-th fault is in the file this matrix was loaded
    /// from, as `FILE:LINE:COLUMN: faults[I].FIELD` (without the position when it cannot be
    /// found: a matrix not from a file, or a file that changed since).
    pub fn locate_fault(&self, index: usize, field: &str) -> String {
        // A dotted field is a path into the fault (`network.loss`).
        let path = field
            .split('.')
            .fold(FieldPath::root().key("faults").index(index), |p, key| {
                p.key(key)
            });
        self.locate(&path)
    }

    /// `FILE:LINE:COLUMN: sweep.parameters.PATH`: a sweep parameter (whose PATH holds dots),
    /// located in the matrix's file, for a problem found once the run reads files.
    pub fn locate_sweep_parameter(&self, parameter: &str) -> String {
        self.locate(
            &FieldPath::root()
                .key("sweep")
                .key("parameters")
                .key(parameter),
        )
    }

    /// `FILE:LINE:COLUMN: PATH` of a field's value, or the path alone when the file is gone.
    pub fn locate(&self, path: &FieldPath) -> String {
        let located = self.source_path.as_deref().and_then(|file| {
            let text = std::fs::read_to_string(file).ok()?;
            let (map, _) = SourceMap::scan(&text).ok()?;
            let position = map.locate(path, Anchor::Value)?;
            Some(format!("{}:{position}", file.display()))
        });
        match located {
            Some(at) => format!("{at}: {path}"),
            None => path.to_string(),
        }
    }
}

/// The JSON schema (draft 2020-12) of the matrix format, generated from the Rust types.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Matrix)).expect("a schema is JSON")
}

/// [`json_schema`] as committed in `test-matrices/schema.json`: pretty-printed, with a final
/// newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("a schema is JSON");
    text.push('\n');
    text
}

fn field_path(path: &serde_path_to_error::Path) -> FieldPath {
    use serde_path_to_error::Segment;
    FieldPath(
        path.iter()
            .map_while(|seg| match seg {
                Segment::Seq { index } => Some(PathSeg::Index(*index)),
                Segment::Map { key } => Some(PathSeg::Key(key.clone())),
                Segment::Enum { variant } => Some(PathSeg::Key(variant.clone())),
                _ => None,
            })
            .collect(),
    )
}

/// The message of a serde-saphyr error without its position (we print our own), made more
/// precise where serde-saphyr is terse.
fn deserialize_message(e: &serde_saphyr::Error, text: &str) -> String {
    let inner = e.without_snippet();
    if matches!(inner, serde_saphyr::Error::Eof { .. }) && text.trim().is_empty() {
        return "the file is empty; a matrix starts with `version: 1`".to_string();
    }
    if let serde_saphyr::Error::InvalidScalar { ty, location } = inner {
        let span = location.span();
        let found = span
            .byte_offset()
            .zip(span.byte_len())
            .and_then(|(start, len)| {
                let start = usize::try_from(start).ok()?;
                text.get(start..start + usize::try_from(len).ok()?)
            });
        let expected = match *ty {
            "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => {
                format!("a non-negative whole number ({ty})")
            }
            "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => format!("a whole number ({ty})"),
            "f32" | "f64" => "a number".to_string(),
            "bool" => "true or false".to_string(),
            other => other.to_string(),
        };
        return match found {
            Some(found) => format!("expected {expected}, found `{found}`"),
            None => format!("expected {expected}"),
        };
    }
    DefaultMessageFormatter.format_message(inner).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_redacted_and_nothing_else_is() {
        let text = "\
server_templates:
  cpu:
    env:
      TOKEN: s3cret
      QUOTED: \"a \\\"b\\\" c\"   # a comment stays
      SINGLE: 'it''s'
    args: [--token-file, s3cret]
client_templates:
  infer:
    env: { A: x1, B: \"y 2\" }
    name: x1
";
        let out = redact_env(text);
        assert_eq!(
            out,
            "\
server_templates:
  cpu:
    env:
      TOKEN: <redacted>
      QUOTED: <redacted>   # a comment stays
      SINGLE: <redacted>
    args: [--token-file, s3cret]
client_templates:
  infer:
    env: { A: <redacted>, B: <redacted> }
    name: x1
"
        );
        assert_eq!(
            redact_env("version: 1\n"),
            "version: 1\n",
            "no env: as it was"
        );
    }

    #[test]
    fn what_cannot_be_cut_out_exactly_is_withheld_whole() {
        let block = "server_templates:\n  cpu:\n    env:\n      KEY: |\n        s3cret\n";
        assert_eq!(redact_env(block), WITHHELD_MATRIX);
        assert_eq!(redact_env("env: [unclosed\n"), WITHHELD_MATRIX);
    }
}
