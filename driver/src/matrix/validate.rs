//! Semantic checks: the rules across fields (a value's own rule is [`super::checked`]'s, where
//! it is read), and the map keys' (names a refusal inside serde could not locate). Every
//! problem found is reported, each with the field path it is about and which end of the
//! `key: value` pair to point at.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::bounds::{MAX_MEMBERS, is_protected_host_path};

use stress_common::scenario::Scenario;
use stress_common::schedule::RequestIntervals;

use super::checked::{LABEL_RULE, MAX_LABEL_LEN, is_dns_label, is_env_name};
use super::source::{Anchor, FieldPath};
use super::types::{
    ClientGroup, ClientTemplate, Endpoint, LoadMode, MATRIX_VERSION, Matrix, ModelImage, Protocol,
    Resources, RunMode, ServerGroup, ServerTemplate, ServerVolume, TraceMode, TraceSettings,
};
use super::types::{LAUNCHER_VOLUMES, MODEL_CONFIGS_VOLUME, MODEL_IMAGE_VOLUME};

pub use stress_common::contract::CORR_IDS_PER_STREAM;

/// One semantic problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// What it is about.
    pub path: FieldPath,
    /// Point at the key or at the value.
    pub anchor: Anchor,
    /// What is wrong.
    pub message: String,
    /// Another place the message is about, which the diagnostic points to as well.
    pub also: Option<FieldPath>,
}

impl Issue {
    /// An issue about one place.
    pub fn at(path: FieldPath, anchor: Anchor, message: String) -> Self {
        Self {
            path,
            anchor,
            message,
            also: None,
        }
    }
}

/// Whether two absolute paths name the same directory (a trailing '/' aside).
fn same_dir(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// An address that is not `HOST:PORT` with a port a server can listen on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error(
        "{0:?} is not HOST:PORT (a host name or IP address and a port, without a scheme, e.g. \"triton.staging:8001\")"
    )]
    NotHostPort(String),
    #[error("port {port} of {address:?} is out of range (1 to 65535)")]
    PortOutOfRange { address: String, port: String },
}

/// Whether `address` is `HOST:PORT` (see [`Checker::address`]); the error says what is wrong.
pub fn check_address(address: &str) -> Result<(), AddressError> {
    let form = || AddressError::NotHostPort(address.to_string());
    let (host, port) = address.rsplit_once(':').ok_or_else(form)?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            !v6.is_empty()
                && v6
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || ":.".contains(c))
        }
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
                && !host.starts_with(['-', '.'])
                && !host.ends_with(['-', '.'])
        }
    };
    if !host_ok || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(form());
    }
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(()),
        _ => Err(AddressError::PortOutOfRange {
            address: address.to_string(),
            port: port.to_string(),
        }),
    }
}

fn defined_list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        "none defined".to_string()
    } else {
        format!("defined: {}", names.join(", "))
    }
}

struct Checker {
    issues: Vec<Issue>,
    /// The SLO rules that read, in order.
    slo: Vec<crate::matrix::slo::Rule>,
}

impl Checker {
    fn push(&mut self, path: FieldPath, anchor: Anchor, message: impl Into<String>) {
        self.issues.push(Issue::at(path, anchor, message.into()));
    }

    fn label(&mut self, path: FieldPath, anchor: Anchor, what: &str, name: &str) {
        if !is_dns_label(name) {
            self.push(
                path,
                anchor,
                format!("{what} {name:?} is not a DNS-1123 label ({LABEL_RULE})"),
            );
        }
    }

    fn at_least_one(&mut self, path: FieldPath, value: u64) {
        if value == 0 {
            self.push(path, Anchor::Value, "must be at least 1, found 0");
        }
    }

    fn trace(&mut self, path: FieldPath, trace: &Option<TraceSettings>) {
        let Some(t) = trace else { return };
        if t.mode == TraceMode::Triton {
            // OpenTelemetry's 0 traces only requests with a context; files have no such use.
            self.at_least_one(path.key("rate"), t.rate.into());
        }
        if t.mode == TraceMode::Triton && t.url.is_some() {
            self.push(
                path.key("url"),
                Anchor::Key,
                "`url` is for mode opentelemetry (triton mode writes files in the run directory)",
            );
        }
        if t.mode == TraceMode::Triton && !t.resource.is_empty() {
            self.push(
                path.key("resource"),
                Anchor::Key,
                "`resource` is for mode opentelemetry",
            );
        }
        if t.mode == TraceMode::Triton {
            for (key, given) in [
                ("queue_size", t.queue_size.is_some()),
                ("export_delay", t.export_delay.is_some()),
            ] {
                if given {
                    let message = format!("`{key}` is for mode opentelemetry");
                    self.push(path.key(key), Anchor::Key, message);
                }
            }
        }
        if t.mode == TraceMode::Opentelemetry && t.log_frequency.is_some() {
            self.push(
                path.key("log_frequency"),
                Anchor::Key,
                "`log_frequency` is for mode triton (trace files)",
            );
        }
    }

    fn server_template(&mut self, path: FieldPath, t: &ServerTemplate) {
        if t.model_repositories.is_empty() {
            self.push(
                path.key("model_repositories"),
                Anchor::Value,
                "at least one model repository is required",
            );
        }
        self.trace(path.key("trace"), &t.trace);
        self.volumes(path.key("volumes"), &t.volumes);
        if let Some(m) = &t.model_image {
            self.model_image(path.key("model_image"), m, t);
        }
    }

    /// `model_image`: an image to copy from, absolute paths, and a `path` that Triton serves
    /// (listed in `model_repositories`) and no other volume of the pod takes.
    fn model_image(&mut self, path: FieldPath, m: &ModelImage, t: &ServerTemplate) {
        let ppath = path.key("path");
        if let Some((name, _)) = LAUNCHER_VOLUMES
            .iter()
            .find(|(_, mount)| same_dir(mount, &m.path))
        {
            self.push(
                ppath.clone(),
                Anchor::Value,
                format!(
                    "path {:?} is where the kube launcher mounts its own volume {name:?}; choose another",
                    m.path
                ),
            );
        }
        if let Some(i) = t
            .volumes
            .iter()
            .position(|v| same_dir(&v.mount_path, &m.path))
        {
            self.push(
                ppath.clone(),
                Anchor::Value,
                format!("path {:?} is also volumes[{i}]'s mount_path", m.path),
            );
        }
        if !t.model_repositories.iter().any(|r| same_dir(r, &m.path)) {
            self.push(
                ppath,
                Anchor::Value,
                format!(
                    "path {:?} is not among model_repositories ({}), so Triton would not serve the copied models (add it there)",
                    m.path,
                    t.model_repositories.join(", ")
                ),
            );
        }
    }

    fn volumes(&mut self, path: FieldPath, volumes: &[ServerVolume]) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, v) in volumes.iter().enumerate() {
            let vpath = path.index(i);
            let reserved = LAUNCHER_VOLUMES
                .iter()
                .map(|(name, _)| *name)
                .chain([MODEL_IMAGE_VOLUME, MODEL_CONFIGS_VOLUME]);
            if reserved.clone().any(|r| r == v.name) {
                self.push(
                    vpath.key("name"),
                    Anchor::Value,
                    format!(
                        "volume name {:?} is the kube launcher's own (reserved: {})",
                        v.name,
                        reserved.collect::<Vec<_>>().join(", ")
                    ),
                );
            } else if let Some(first) = seen.insert(&v.name, i) {
                self.push(
                    vpath.key("name"),
                    Anchor::Value,
                    format!("duplicate volume name {:?} (also volumes[{first}])", v.name),
                );
            }
            if !v.mount_path.starts_with('/') {
                self.push(
                    vpath.key("mount_path"),
                    Anchor::Value,
                    format!("mount_path {:?} must be an absolute path", v.mount_path),
                );
            }
            let sources = [
                v.host_path.is_some(),
                v.persistent_volume_claim.is_some(),
                v.config_map.is_some(),
            ]
            .iter()
            .filter(|s| **s)
            .count();
            if sources != 1 {
                self.push(
                    vpath,
                    Anchor::Key,
                    format!(
                        "exactly one of host_path, persistent_volume_claim or config_map must be set, found {sources}"
                    ),
                );
            }
        }
    }

    fn client_template(&mut self, path: FieldPath, t: &ClientTemplate) {
        if let Some(scenarios) = &t.scenarios {
            let spath = path.key("scenarios");
            if scenarios.is_empty() {
                self.push(
                    spath.clone(),
                    Anchor::Value,
                    "at least one scenario is required (omit `scenarios` to run all of them at their default weights)",
                );
            }
            let mut seen: HashMap<Scenario, &str> = HashMap::new();
            for name in scenarios.keys() {
                let wpath = spath.key(name.clone());
                match Scenario::parse(name) {
                    None => {
                        let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                        self.push(
                            wpath.clone(),
                            Anchor::Key,
                            format!("unknown scenario {name:?} (known: {})", known.join(", ")),
                        );
                    }
                    Some(s) => {
                        if let Some(first) = seen.insert(s, name) {
                            self.push(
                                wpath.clone(),
                                Anchor::Key,
                                format!("scenario {s} is listed twice (as {first:?} and {name:?})"),
                            );
                        }
                    }
                }
            }
        }
        // `load` is checked with the bounds (LoadMode::check).
        self.models(path.clone(), t);
        let answer_checks = [
            ("tolerance", t.tolerance.is_some()),
            ("consistency", t.consistency),
        ];
        for (field, given) in answer_checks {
            if given && !t.runs_infer() {
                let message = format!(
                    "`{field}` checks the answers of the Infer scenario, which this template does not run (give `models`, or list Infer in `scenarios`)"
                );
                self.push(path.key(field), Anchor::Key, message);
            }
        }
        if let Some(client) = &t.client {
            self.foreign_client(path.clone(), client, t);
        }
    }

    /// A template's foreign client: an interface the worker speaks, a program to start, and
    /// none of the worker's own scenario settings beside it.
    fn foreign_client(
        &mut self,
        template: FieldPath,
        c: &super::types::ForeignClient,
        t: &ClientTemplate,
    ) {
        let path = template.key("client");
        let speaks = stress_common::foreign::INTERFACE;
        if c.interface != speaks {
            let message = format!(
                "interface {} is not spoken here: the worker speaks interface {speaks} (docs/clients.md)",
                c.interface
            );
            self.push(path.key("interface"), Anchor::Value, message);
        }
        if c.image.is_some() && t.worker.image().is_none() {
            let message = "a client image runs the worker copied from the worker's image: \
                           give `worker: {image: ...}` (the kube launcher), or leave `image` out";
            self.push(path.key("image"), Anchor::Value, message);
        }
        if t.scenarios.is_some() {
            let message = "a client program runs its own scenarios: `scenarios` is for the worker's own (leave it out)";
            self.push(template.key("scenarios"), Anchor::Key, message);
        }
        if t.trace_share.is_some() {
            let message = "a client program sends its own requests, which the worker cannot trace: `trace_share` is for the worker's own scenarios";
            self.push(template.key("trace_share"), Anchor::Key, message);
        }
    }

    /// The `models:` of a client template: names the worker's flags can carry, weights and
    /// batch sizes of at least 1, one batch size per worker, and `Infer` in a given mix.
    fn models(&mut self, path: FieldPath, t: &ClientTemplate) {
        let mpath = path.key("models");
        if !t.models.is_empty()
            && let Some(scenarios) = &t.scenarios
            && !scenarios
                .keys()
                .any(|n| Scenario::parse(n) == Some(Scenario::Infer))
        {
            self.push(
                mpath.clone(),
                Anchor::Key,
                "models are driven by the Infer scenario, but `scenarios` does not list Infer (add it, or omit `scenarios` to run only Infer)",
            );
        }
        let mut seen: HashMap<(String, Option<u64>), usize> = HashMap::new();
        // The worker's per-model flags (`-b MODEL=N`) name a model, not a version.
        let mut batch_of: HashMap<&str, (u32, usize)> = HashMap::new();
        for (i, m) in t.models.iter().enumerate() {
            let p = mpath.index(i);
            if let Some(first) = seen.insert((m.name.clone(), m.version), i) {
                self.push(
                    p.key("name"),
                    Anchor::Value,
                    format!(
                        "model {} is listed twice (first as models[{first}])",
                        m.label()
                    ),
                );
            }
            for (input, dims) in &m.shape {
                let spath = p.key("shape").key(input.clone());
                if dims.is_empty() {
                    self.push(spath, Anchor::Value, "needs at least one dim");
                } else if let Some(d) = dims.iter().find(|d| **d < 0) {
                    self.push(
                        spath,
                        Anchor::Value,
                        format!("dims must be whole numbers >= 0, found {d}"),
                    );
                }
            }
            if let Some(data) = &m.input_data
                && data.trim().is_empty()
            {
                self.push(
                    p.key("input_data"),
                    Anchor::Value,
                    "must be zero, random or a file, found an empty string",
                );
            }
            match (m.batch_size, batch_of.get(m.name.as_str())) {
                (Some(b), Some(&(first, at))) if b != first => self.push(
                    p.key("batch_size"),
                    Anchor::Value,
                    format!(
                        "batch size {b} differs from models[{at}]'s {first}: versions of one model share its batch size"
                    ),
                ),
                (Some(b), None) => {
                    batch_of.insert(&m.name, (b, i));
                }
                _ => {}
            }
        }
    }

    /// A group of existing servers: no template, an instance count that agrees, and every
    /// entry an address (or addresses) the client groups that target it can use.
    fn external_group(&mut self, path: FieldPath, m: &Matrix, name: &str, g: &ServerGroup) {
        if g.template.is_some() {
            self.push(
                path.key("template"),
                Anchor::Key,
                "a group either launches servers from a template or names existing ones: `template` and `endpoints` exclude each other",
            );
        }
        if let Some(n) = g.instances
            && usize::try_from(n).ok() != Some(g.endpoints.len())
        {
            self.push(
                path.key("instances"),
                Anchor::Value,
                format!(
                    "{n} instances, but {} endpoints (omit `instances` with `endpoints`)",
                    g.endpoints.len()
                ),
            );
        }
        // The protocol of every client group that targets this one, by group name.
        let clients: Vec<(&String, Protocol)> = m
            .client_groups
            .iter()
            .filter(|(_, c)| c.target == name)
            .filter_map(|(n, c)| Some((n, m.client_templates.get(&c.template)?.protocol)))
            .collect();
        let epath = path.key("endpoints");
        for (i, endpoint) in g.endpoints.iter().enumerate() {
            let p = epath.index(i);
            match endpoint {
                Endpoint::Address(address) => {
                    self.address(p.clone(), address);
                    let grpc = clients.iter().find(|(_, pr)| *pr == Protocol::Grpc);
                    let http = clients.iter().find(|(_, pr)| *pr == Protocol::Http);
                    match (grpc, http) {
                        (Some((g, _)), Some((h, _))) => self.push(
                            p,
                            Anchor::Value,
                            format!(
                                "client groups {g} (grpc) and {h} (http) both target this group, so one `HOST:PORT` cannot serve both: give the ports by protocol ({{grpc: HOST:PORT, http: HOST:PORT}})"
                            ),
                        ),
                        (None, None) => self.push(
                            p,
                            Anchor::Value,
                            format!(
                                "no client group targets server group {name:?}, so the protocol of this port is unknown: write {{grpc: HOST:PORT}} or {{http: HOST:PORT}}"
                            ),
                        ),
                        _ => {}
                    }
                }
                Endpoint::Ports(ports) => {
                    for (key, value) in [
                        ("grpc", &ports.grpc),
                        ("http", &ports.http),
                        ("metrics", &ports.metrics),
                    ] {
                        if let Some(address) = value {
                            self.address(p.key(key), address);
                        }
                    }
                    if ports.grpc.is_none() && ports.http.is_none() {
                        self.push(
                            p,
                            Anchor::Value,
                            "needs a `grpc` or an `http` address (HOST:PORT)",
                        );
                        continue;
                    }
                    for (client, protocol) in &clients {
                        let (key, given) = match protocol {
                            Protocol::Grpc => ("grpc", &ports.grpc),
                            Protocol::Http => ("http", &ports.http),
                        };
                        if given.is_none() {
                            self.push(
                                p.clone(),
                                Anchor::Value,
                                format!(
                                    "client group {client} speaks {key}, but this endpoint has no `{key}` address"
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    /// `HOST:PORT`: a host name, an IPv4 address or a bracketed IPv6 address, and a port in
    /// 1..=65535; no scheme, no path.
    fn address(&mut self, path: FieldPath, address: &str) {
        if let Err(why) = check_address(address) {
            self.push(path, Anchor::Value, why.to_string());
        }
    }

    fn member_names(&mut self, path: FieldPath, run: &str, group: &str, instances: u32) {
        if instances == 0 || !is_dns_label(run) || !is_dns_label(group) {
            return;
        }
        let longest = format!("{run}-{group}-{}", instances - 1);
        if longest.len() > MAX_LABEL_LEN {
            self.push(
                path,
                Anchor::Key,
                format!(
                    "member name {longest:?} is {} characters long, more than the {MAX_LABEL_LEN} of a DNS-1123 label (shorten run.name or the group name)",
                    longest.len()
                ),
            );
        }
    }
}

/// The bounds of [`super::bounds`], checked first: nothing later expands or allocates in
/// proportion to a value that is out of them.
impl Checker {
    fn count_at_most(&mut self, path: FieldPath, value: u64, max: u64, what: &str) {
        if value > max {
            self.push(
                path,
                Anchor::Value,
                format!("{value} {what} is more than the {max} allowed"),
            );
        }
    }

    fn bounds(&mut self, m: &Matrix) {
        for (name, t) in &m.server_templates {
            let path = FieldPath::root().key("server_templates").key(name.clone());
            self.server_template_bounds(path, t);
        }
        for (name, t) in &m.client_templates {
            let path = FieldPath::root().key("client_templates").key(name.clone());
            self.client_template_bounds(path, t);
        }
        self.member_bounds(m);
    }

    /// The bounds of a server template at `path`: its arguments, host paths and trace settings.
    fn server_template_bounds(&mut self, path: FieldPath, t: &ServerTemplate) {
        for (i, v) in t.volumes.iter().enumerate() {
            if let Some(host) = &v.host_path
                && is_protected_host_path(host)
                && (!v.read_only || host.trim_end_matches('/').is_empty())
            {
                self.push(
                    path.key("volumes").index(i).key("host_path"),
                    Anchor::Value,
                    format!(
                        "host path {host:?} is the node's own (its root or a system directory); \
                         mount a directory made for the models, read-only where it can be"
                    ),
                );
            }
        }
    }

    /// The bounds of a client template at `path`: its load, weights, batch sizes and
    /// arguments.
    fn client_template_bounds(&mut self, path: FieldPath, t: &ClientTemplate) {
        if let Some(load) = &t.load {
            let field = match load {
                LoadMode::Rate(_) | LoadMode::Poisson(_) => "rate",
                LoadMode::Concurrency(_) => "concurrency",
                LoadMode::Intervals(_) => "request_intervals",
            };
            let checked = match load {
                LoadMode::Intervals(file) => RequestIntervals::read(file)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                other => other.check().map_err(|e| e.to_string()),
            };
            if let Err(e) = checked {
                self.push(path.key("load").key(field), Anchor::Value, e);
            }
        }
    }

    /// Members in all, summed without overflow: checked before anything expands them.
    fn member_bounds(&mut self, m: &Matrix) {
        let root = FieldPath::root();
        let mut members: u64 = 0;
        let issues_before = self.issues.len();
        for (name, g) in &m.server_groups {
            let path = root.key("server_groups").key(name.clone());
            // (`instances` is bounded where it is read.)
            let n = match g.instances {
                Some(n) => u64::from(n),
                None => g.endpoints.len() as u64,
            };
            if g.instances.is_none() {
                self.count_at_most(path.key("endpoints"), n, MAX_MEMBERS, "servers");
            }
            members = members.saturating_add(n);
        }
        for g in m.client_groups.values() {
            members = members.saturating_add(g.instances.into());
        }
        // One group over the limit is said there; only groups within it can add up past it.
        if members > MAX_MEMBERS && self.issues.len() == issues_before {
            self.push(
                root.key("client_groups"),
                Anchor::Key,
                format!("{members} members (servers and clients) in all is more than the {MAX_MEMBERS} a run takes"),
            );
        }
    }
}

/// The rules of `faults:` (pure): names, targets, timing, kinds and their settings, and no two
/// faults on one member at once. Whether the launcher can inject a kind is the run's check.
fn check_faults(m: &Matrix) -> Vec<Issue> {
    let mut issues = Vec::new();
    let root = FieldPath::root().key("faults");
    if m.faults.is_empty() {
        return issues;
    }
    if m.run.mode != RunMode::Soak {
        issues.push(Issue::at(
            root.clone(),
            Anchor::Key,
            "faults are injected in soak mode only (a capacity search under injected faults \
             would measure the faults)"
                .into(),
        ));
    }
    let load = m.run.duration;
    let mut twice = Vec::new();
    let mut names: std::collections::HashMap<&str, usize> = Default::default();
    for (i, f) in m.faults.iter().enumerate() {
        let path = root.index(i);
        if !is_dns_label(&f.name) {
            issues.push(Issue::at(
                path.key("name"),
                Anchor::Value,
                format!("fault name {:?} is not a DNS-1123 label", f.name),
            ));
        } else if let Some(first) = names.insert(f.name.as_str(), i) {
            twice.push(Issue {
                path: path.key("name"),
                anchor: Anchor::Value,
                message: format!("fault name {:?} is used twice", f.name),
                also: Some(root.index(first).key("name")),
            });
        }
        if let Err(why) = m.fault_target_members(&f.target) {
            issues.push(Issue::at(
                path.key("target"),
                Anchor::Value,
                why.to_string(),
            ));
        }
        fault_fixed_target(&mut issues, &path, m, f);
        fault_client_target(&mut issues, &path, m, f);
        fault_timing(&mut issues, &path, f, load);
        fault_duration(&mut issues, &path, f);
        fault_network(&mut issues, &path, f);
        if f.expect.recover_within.is_zero() {
            issues.push(Issue::at(
                path.key("expect").key("recover_within"),
                Anchor::Value,
                "must be longer than zero".into(),
            ));
        }
    }
    issues.extend(twice);
    if issues.is_empty()
        && let Some(overlap) = fault_overlap(m, &root, load)
    {
        issues.push(overlap);
    }
    issues
}

/// A fault's `at` or `every` (one of them), and whether an injection and its recovery fit
/// in the load phase of `load`.
fn fault_timing(
    issues: &mut Vec<Issue>,
    path: &FieldPath,
    f: &super::faults::Fault,
    load: Duration,
) {
    use super::faults::human;
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    match (f.at, f.every) {
        (Some(_), Some(_)) => push(
            path.key("every"),
            Anchor::Key,
            "give `at` (once) or `every` (repeatedly), not both".into(),
        ),
        (None, None) => push(
            path.clone(),
            Anchor::Key,
            "missing `at` (once, from the start of the load phase) or `every` (repeatedly)".into(),
        ),
        (Some(at), None) if at >= load => push(
            path.key("at"),
            Anchor::Value,
            format!(
                "the fault at {} comes after the run's end (run.duration {})",
                human(at),
                human(load)
            ),
        ),
        (Some(at), None) if at + f.window() > load => push(
            path.key("at"),
            Anchor::Value,
            format!(
                "the run ends ({}) before the fault's recovery can be judged (injected at {}, \
                 lasting {}, recovery allowed {}): inject it earlier or run longer",
                human(load),
                human(at),
                human(f.duration.unwrap_or_default()),
                human(f.expect.recover_within)
            ),
        ),
        (None, Some(every)) if every + f.window() > load => push(
            path.key("every"),
            Anchor::Value,
            format!(
                "no injection fits the run: the first comes at {} and its recovery may take \
                 until {}, after the run's end ({})",
                human(every),
                human(every + f.window()),
                human(load)
            ),
        ),
        _ => {}
    }
}

/// Only `evict` and `drain` target workers (a client group or member): the kube launcher
/// applies the evicted pod again and the member carries on from what it reported; the other
/// kinds act on servers.
fn fault_client_target(
    issues: &mut Vec<Issue>,
    path: &FieldPath,
    m: &Matrix,
    f: &super::faults::Fault,
) {
    if !f.kind.targets_workers() && m.client_target_members(&f.target).is_some() {
        issues.push(Issue::at(
            path.key("target"),
            Anchor::Value,
            format!(
                "`{}` names workers: only kinds evict and drain target them (kind {} acts on \
                 servers)",
                f.target,
                f.kind.as_str()
            ),
        ));
    }
}

/// A kind with a fixed target (`store-restart`: `store`, `api-outage`: `api-server`) names it,
/// and no other kind names those.
fn fault_fixed_target(
    issues: &mut Vec<Issue>,
    path: &FieldPath,
    m: &Matrix,
    f: &super::faults::Fault,
) {
    use super::faults::FaultKind;
    let message = match (f.kind.fixed_target(), FaultKind::fixed_to(&f.target)) {
        (Some((fixed, what)), _) if f.target != fixed || m.server_groups.contains_key(fixed) => {
            format!(
                "kind {} acts on {what}: its target is `{fixed}`",
                f.kind.as_str()
            )
        }
        (None, Some(kind)) if !m.server_groups.contains_key(&f.target) => format!(
            "`{}` is not a server: only kind {} targets it",
            f.target,
            kind.as_str()
        ),
        _ => return,
    };
    issues.push(Issue::at(path.key("target"), Anchor::Value, message));
}

/// A fault's `duration`: given for a kind that lasts (its length is checked where it is read),
/// absent for an instant.
fn fault_duration(issues: &mut Vec<Issue>, path: &FieldPath, f: &super::faults::Fault) {
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    match (f.kind.lasts(), f.duration) {
        (true, None) => push(
            path.clone(),
            Anchor::Key,
            format!("missing `duration`: how long the {} lasts", f.kind.as_str()),
        ),
        (false, Some(_)) => push(
            path.key("duration"),
            Anchor::Key,
            format!(
                "a {} is an instant: it has no duration (its server's start-up is part of \
                 the recovery)",
                f.kind.as_str()
            ),
        ),
        _ => {}
    }
}

/// A fault's `network:` settings: present for (and only for) kind network, and sensible.
fn fault_network(issues: &mut Vec<Issue>, path: &FieldPath, f: &super::faults::Fault) {
    use super::faults::FaultKind;
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    match (&f.network, f.kind) {
        (None, FaultKind::Network) => push(
            path.clone(),
            Anchor::Key,
            "missing `network: {delay, jitter, loss}`: what the network does".into(),
        ),
        (Some(_), kind) if kind != FaultKind::Network => push(
            path.key("network"),
            Anchor::Key,
            format!(
                "`network` is read only with kind: network, not {}",
                kind.as_str()
            ),
        ),
        (Some(n), _) if n.delay.is_none() && n.jitter.is_none() && n.loss.is_none() => push(
            path.key("network"),
            Anchor::Key,
            "give at least one of delay, jitter and loss".into(),
        ),
        _ => {}
    }
}

/// The first two injections of the faults' schedule that overlap on one member, for faults
/// (at `root`) that are otherwise right.
fn fault_overlap(m: &Matrix, root: &FieldPath, load: Duration) -> Option<Issue> {
    use super::faults::{default_seed, first_overlap, human, schedule};
    let seed = m.run.seed.unwrap_or_else(|| default_seed(&m.run.name));
    let plan = schedule(&m.faults, |t| m.fault_target_members(t).ok(), load, seed);
    let (later, earlier) = first_overlap(&plan)?;
    let f = &m.faults[later.fault_index];
    let field = if f.at.is_some() { "at" } else { "every" };
    Some(Issue {
        path: root.index(later.fault_index).key(field),
        anchor: Anchor::Value,
        message: format!(
            "{} at {} overlaps {} on {} (injected at {}, its recovery allowed until {}): \
             faults on one member must not overlap; space them further apart or lower \
             expect.recover_within",
            later.name,
            human(later.at),
            earlier.name,
            later.member,
            human(earlier.at),
            human(earlier.window_end())
        ),
        also: Some(root.index(earlier.fault_index).key("name")),
    })
}

/// The rules of known issues (in a matrix under `known_issues`, or a known-issues file at its
/// root): unique non-empty ids, a reason, a regular expression that compiles, a known scenario,
/// a date `until` that parses, a rate above zero.
/// Whether a client template runs a foreign client, whose scenario names are free-form.
fn has_foreign_clients(m: &Matrix) -> bool {
    m.client_templates.values().any(|t| t.client.is_some())
}

/// The known issues' problems; `free_scenarios`: any scenario name may be matched (a foreign
/// client names its own).
pub fn check_known_issues(
    root: FieldPath,
    issues: &[super::KnownIssue],
    free_scenarios: bool,
) -> (Vec<Issue>, Vec<super::known::Known>) {
    let mut c = Checker {
        issues: Vec::new(),
        slo: Vec::new(),
    };
    let mut read = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, issue) in issues.iter().enumerate() {
        let path = root.index(i);
        if issue.id.trim().is_empty() {
            c.push(path.key("id"), Anchor::Value, "an id is required");
        } else if let Some(first) = seen.insert(issue.id.as_str(), i) {
            c.issues.push(Issue {
                path: path.key("id"),
                anchor: Anchor::Value,
                message: format!("known issue id {:?} is used twice", issue.id),
                also: Some(root.index(first).key("id")),
            });
        }
        if issue.reason.trim().is_empty() {
            c.push(
                path.key("reason"),
                Anchor::Value,
                "say why it is known (the report shows it)",
            );
        }
        let matches = path.key("match");
        let message = regex::Regex::new(&issue.matches.message);
        if let Err(e) = &message {
            // The regex crate's message spans lines; the first says what is wrong.
            let why = e.to_string();
            let why = why
                .lines()
                .rev()
                .find(|l| l.starts_with("error:"))
                .unwrap_or_else(|| why.lines().next().unwrap_or_default());
            c.push(
                matches.key("message"),
                Anchor::Value,
                format!(
                    "not a regular expression: {}",
                    why.trim_start_matches("error:").trim()
                ),
            );
        }
        if let Some(scenario) = &issue.matches.scenario
            && Scenario::parse(scenario).is_none()
            && !free_scenarios
        {
            c.push(
                matches.key("scenario"),
                Anchor::Value,
                format!(
                    "unknown scenario {scenario:?} (known: {})",
                    Scenario::ALL
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        let until = issue
            .until
            .as_deref()
            .map(str::parse::<jiff::civil::Date>)
            .transpose();
        if let (Some(text), Err(_)) = (&issue.until, &until) {
            c.push(
                path.key("until"),
                Anchor::Value,
                format!("a date is YYYY-MM-DD, found {text:?}"),
            );
        }
        if let (Ok(message), Ok(until)) = (message, until) {
            read.push(super::known::Known {
                issue: issue.clone(),
                message,
                until,
            });
        }
    }
    (c.issues, read)
}

/// Checks a deserialised matrix, returning every problem found.
/// The problems of `m`, each with its field; when there are none, `m` gets what was read
/// on the way ([`Matrix::slo_rules`], [`Matrix::known`]), so nothing downstream reads those
/// strings again.
pub fn check(m: &mut Matrix) -> Vec<Issue> {
    let (issues, read) = check_reading(m);
    if issues.is_empty() {
        m.slo_rules = read.slo;
        m.known = read.known;
    }
    issues
}

/// What the checks read on the way: the values the matrix keeps once it is valid.
struct Read {
    slo: Vec<crate::matrix::slo::Rule>,
    known: Vec<super::known::Known>,
}

fn check_reading(m: &Matrix) -> (Vec<Issue>, Read) {
    let mut c = Checker {
        issues: Vec::new(),
        slo: Vec::new(),
    };
    let root = FieldPath::root();
    c.bounds(m);
    c.version(m);
    c.run(m);
    c.templates(m);
    c.server_groups(m);
    c.client_groups(m);
    let (issues, known) = check_known_issues(
        root.key("known_issues"),
        &m.known_issues,
        has_foreign_clients(m),
    );
    c.issues.extend(issues);
    c.capacity(m);
    c.issues.extend(check_faults(m));
    c.issues.extend(check_compare(m));
    c.issues.extend(check_sweep(m));
    c.slo_rules(m, root.key("run").key("slo"), &m.run.slo, None);
    for (name, g) in &m.client_groups {
        let path = root.key("client_groups").key(name.clone()).key("slo");
        c.slo_rules(m, path, &g.slo, Some(name));
    }
    (c.issues, Read { slo: c.slo, known })
}

/// The sections of a matrix, checked one by one by [`check`].
impl Checker {
    fn version(&mut self, m: &Matrix) {
        if m.version != MATRIX_VERSION {
            self.push(
                FieldPath::root().key("version"),
                Anchor::Value,
                format!(
                    "unsupported matrix version {} (this driver reads version {MATRIX_VERSION})",
                    m.version
                ),
            );
        }
    }

    /// `run:`, but for its SLO rules (checked with the client groups').
    fn run(&mut self, m: &Matrix) {
        let run = FieldPath::root().key("run");
        let human = |d: std::time::Duration| humantime::format_duration(d).to_string();
        // (A zero run length and the poll interval's bounds are refused where they are read.)
        if m.run.poll_interval > m.run.duration {
            self.push(
                run.key("poll_interval"),
                Anchor::Value,
                format!(
                    "poll interval {} is longer than the run duration {}",
                    human(m.run.poll_interval),
                    human(m.run.duration)
                ),
            );
        }

        if m.run.repeat > 1 && m.sweep.is_some() {
            self.push(
                run.key("repeat"),
                Anchor::Value,
                "a sweep measures each variant and confirms the best: leave `repeat` out",
            );
        }
        if m.run.cells == super::CellSchedule::InTurn
            && (m.run.repeat > 1 || m.compare.is_some() || m.sweep.is_some())
        {
            self.push(
                run.key("cells"),
                Anchor::Value,
                "cells in turn are runs of their own: not with `repeat`, `compare` or a sweep",
            );
        }
    }

    fn templates(&mut self, m: &Matrix) {
        let root = FieldPath::root();
        for (name, t) in &m.server_templates {
            let path = root.key("server_templates").key(name.clone());
            self.label(path.clone(), Anchor::Key, "server template name", name);
            self.server_template(path, t);
        }
        for (name, t) in &m.client_templates {
            let path = root.key("client_templates").key(name.clone());
            self.label(path.clone(), Anchor::Key, "client template name", name);
            self.client_template(path, t);
        }
    }

    fn server_groups(&mut self, m: &Matrix) {
        let root = FieldPath::root();
        if m.server_groups.is_empty() {
            self.push(
                root.key("server_groups"),
                Anchor::Key,
                "at least one server group is required",
            );
        }
        for (name, g) in &m.server_groups {
            let path = root.key("server_groups").key(name.clone());
            self.label(path.clone(), Anchor::Key, "server group name", name);
            if g.is_external() {
                self.external_group(path.clone(), m, name, g);
            } else {
                self.launched_group(path.clone(), m, g);
            }
            self.member_names(path, &m.run.name, name, g.member_count());
        }
    }

    /// A server group of servers to launch: its template and instances.
    fn launched_group(&mut self, path: FieldPath, m: &Matrix, g: &ServerGroup) {
        match &g.template {
            None => self.push(
                path.clone(),
                Anchor::Key,
                "either `template` and `instances` (servers to launch) or `endpoints` (servers that already run) is required",
            ),
            Some(t) if !m.server_templates.contains_key(t) => self.push(
                path.key("template"),
                Anchor::Value,
                format!(
                    "undefined server template {t:?} ({})",
                    defined_list(m.server_templates.keys())
                ),
            ),
            Some(_) => {}
        }
        match g.instances {
            Some(_) => {}
            None if g.template.is_some() => self.push(
                path.clone(),
                Anchor::Key,
                "missing field `instances` (how many servers of the template to launch)",
            ),
            None => {}
        }
    }

    /// The client groups, and the correlation-id blocks of all their clients, which must fit
    /// in 64 bits.
    fn client_groups(&mut self, m: &Matrix) {
        let root = FieldPath::root();
        if m.client_groups.is_empty() {
            self.push(
                root.key("client_groups"),
                Anchor::Key,
                "at least one client group is required",
            );
        }
        let mut corr_ids_end: Option<u64> = Some(1);
        for (name, g) in &m.client_groups {
            let path = root.key("client_groups").key(name.clone());
            self.client_group(path.clone(), m, name, g);
            let end = corr_ids_end.and_then(|end| {
                u64::from(g.instances)
                    .checked_mul(g.corr_id_block_size)
                    .and_then(|n| end.checked_add(n))
            });
            if end.is_none() && corr_ids_end.is_some() {
                self.push(
                    path.key("corr_id_block_size"),
                    Anchor::Value,
                    "the correlation-id blocks of the clients up to this group do not fit in 64 bits",
                );
            }
            corr_ids_end = end;
            self.member_names(path, &m.run.name, name, g.instances);
        }
    }

    /// One client group: its name, template, target, instances and correlation-id block.
    fn client_group(&mut self, path: FieldPath, m: &Matrix, name: &str, g: &ClientGroup) {
        let root = FieldPath::root();
        self.label(path.clone(), Anchor::Key, "client group name", name);
        if m.server_groups.contains_key(name) {
            self.push(
                path.clone(),
                Anchor::Key,
                format!(
                    "{name:?} names both a server group and a client group; group names must be unique"
                ),
            );
            if let Some(issue) = self.issues.last_mut() {
                issue.also = Some(root.key("server_groups").key(name.to_string()));
            }
        }
        if !m.client_templates.contains_key(&g.template) {
            self.push(
                path.key("template"),
                Anchor::Value,
                format!(
                    "undefined client template {:?} ({})",
                    g.template,
                    defined_list(m.client_templates.keys())
                ),
            );
        }
        if !m.server_groups.contains_key(&g.target) {
            self.push(
                path.key("target"),
                Anchor::Value,
                format!(
                    "undefined server group {:?} ({})",
                    g.target,
                    defined_list(m.server_groups.keys())
                ),
            );
        }
        if let Some(t) = m.client_templates.get(&g.template) {
            let needed = u64::from(t.concurrency) * CORR_IDS_PER_STREAM;
            if g.corr_id_block_size < needed {
                self.push(
                    path.key("corr_id_block_size"),
                    Anchor::Value,
                    format!(
                        "block of {} correlation ids is smaller than the {needed} that {} streams need ({CORR_IDS_PER_STREAM} each; template {:?} has concurrency {})",
                        g.corr_id_block_size, t.concurrency, g.template, t.concurrency
                    ),
                );
            }
            self.traced_target(&path, m, g, t);
        }
    }

    /// A group that traces (`trace_share`) makes the servers it targets export OpenTelemetry
    /// spans, and one server cannot also write Triton's trace files.
    fn traced_target(&mut self, path: &FieldPath, m: &Matrix, g: &ClientGroup, t: &ClientTemplate) {
        let traces = t.trace_share.is_some_and(|s| s.get() > 0.0);
        let Some(server_template) = m
            .server_groups
            .get(&g.target)
            .and_then(|sg| sg.template.as_ref())
            .filter(|_| traces)
        else {
            return;
        };
        let Some(trace) = m
            .server_templates
            .get(server_template)
            .and_then(|st| st.trace.as_ref())
        else {
            return;
        };
        if trace.writes_files() {
            let message = format!(
                "server template {server_template:?} writes Triton's trace files (trace.mode triton), and client template {:?} traces requests to its servers (trace_share), which makes them export OpenTelemetry spans: one server cannot do both (drop one, or use trace.mode opentelemetry)",
                g.template
            );
            let at = FieldPath::root()
                .key("server_templates")
                .key(server_template.clone())
                .key("trace");
            self.push(at, Anchor::Key, message);
            if let Some(issue) = self.issues.last_mut() {
                issue.also = Some(path.key("template"));
            }
        }
    }
}

impl Checker {
    /// Each SLO rule parses for its metric and names a scenario and model the clients in its
    /// scope (a group's, or all) can run.
    /// A rule that does not read, at its field (the rule itself when it lacks a bound).
    fn bad_rule(&mut self, rpath: &FieldPath, e: crate::matrix::slo::BadRule) {
        if e.field == "metric" {
            self.push(rpath.clone(), Anchor::Key, e.message);
        } else {
            self.push(rpath.key(e.field), Anchor::Value, e.message);
        }
    }

    fn slo_rules(
        &mut self,
        m: &Matrix,
        path: FieldPath,
        rules: &[super::types::SloRule],
        group: Option<&String>,
    ) {
        let templates: Vec<(&String, &super::types::ClientTemplate)> = match group {
            Some(g) => m
                .client_groups
                .get(g)
                .and_then(|g| m.client_templates.get_key_value(&g.template))
                .into_iter()
                .collect(),
            None => m.client_templates.iter().collect(),
        };
        for (i, rule) in rules.iter().enumerate() {
            let rpath = path.index(i);
            match crate::matrix::slo::Rule::parse(rule, group.map(String::as_str)) {
                Ok(read) => self.slo.push(read),
                Err(e) => self.bad_rule(&rpath, e),
            }
            // A foreign client's scenarios are free-form.
            if let Some(s) = &rule.scenario
                && Scenario::parse(s).is_none()
                && !has_foreign_clients(m)
            {
                self.push(
                    rpath.key("scenario"),
                    Anchor::Value,
                    format!(
                        "unknown scenario {s:?}; one of {}",
                        Scenario::ALL
                            .iter()
                            .map(|s| s.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            if let Some(model) = &rule.model
                && !templates
                    .iter()
                    .any(|(_, t)| t.models.iter().any(|s| s.name == *model))
            {
                let names: Vec<&str> = templates.iter().map(|(n, _)| n.as_str()).collect();
                self.push(
                    rpath.key("model"),
                    Anchor::Value,
                    format!(
                        "model {model:?} is not among the `models:` of client template(s) {}",
                        names.join(", ")
                    ),
                );
            }
        }
    }

    /// The individual and exploration phases switch the workers among their template's
    /// `models:`; every exploration mix names only models every template has.
    fn capacity_mixes(&mut self, m: &Matrix, cap: &super::types::CapacitySettings) {
        use super::types::CapacityPhase;
        let root = FieldPath::root();
        let path = root.key("capacity");
        let exploring = cap.phases.contains(&CapacityPhase::Exploration);
        if cap
            .phases
            .iter()
            .any(|p| matches!(p, CapacityPhase::Individual | CapacityPhase::Exploration))
        {
            for (name, t) in &m.client_templates {
                if t.models.is_empty() {
                    self.push(
                        root.key("client_templates").key(name.clone()),
                        Anchor::Key,
                        "the individual and exploration phases switch among the template's `models:`, and it has none",
                    );
                }
            }
        }
        if exploring && cap.exploration.is_empty() {
            self.push(
                path.key("phases"),
                Anchor::Value,
                "phase exploration needs `capacity.exploration`: a list of mixes",
            );
        }
        if !exploring && !cap.exploration.is_empty() {
            self.push(
                path.key("exploration"),
                Anchor::Key,
                "mixes to explore, but `phases` has no exploration",
            );
        }
        for (i, mix) in cap.exploration.iter().enumerate() {
            let mpath = path.key("exploration").index(i);
            if mix.is_empty() {
                self.push(
                    mpath.clone(),
                    Anchor::Value,
                    "a mix needs at least one model",
                );
            }
            for model in mix.keys() {
                self.mix_model(m, mpath.key(model.clone()), model);
            }
        }
    }

    /// A mix's `NAME[@VERSION]` names a model of every template with models, and a version only
    /// where the template's model names that version: the worker plans each model at its
    /// template's version (none: the server's choice), and takes a mix only in those terms
    /// (worker/src/scenarios/infer.rs, `selects`); any other mix fails it at the phase's start.
    fn mix_model(&mut self, m: &Matrix, at: FieldPath, model: &str) {
        let (name, version) = match model.split_once('@') {
            Some((name, version)) => (name, Some(version)),
            None => (model, None),
        };
        let planned = |s: &super::types::ModelSpec| {
            s.name == name && version.is_none_or(|v| s.version.is_some_and(|n| n.to_string() == v))
        };
        for (tname, t) in &m.client_templates {
            if !t.models.is_empty() && !t.models.iter().any(planned) {
                let what = match version {
                    Some(v) => format!(
                        "model {name} version {v} is not among client template {tname}'s models (a mix names a version where the template's model names it)"
                    ),
                    None => format!("model {name} is not among client template {tname}'s models"),
                };
                self.push(at.clone(), Anchor::Key, what);
            }
        }
    }

    /// The spike phase and its `spike:` block go together; the jump can be measured.
    fn spike(&mut self, cap: &super::types::CapacitySettings) {
        use super::types::CapacityPhase;
        let path = FieldPath::root().key("capacity");
        let at = cap.phases.iter().position(|p| *p == CapacityPhase::Spike);
        let spike = match (at, &cap.spike) {
            (None, None) => return,
            (Some(i), None) => {
                return self.push(
                    path.key("phases").index(i),
                    Anchor::Value,
                    "phase spike needs `capacity.spike: {target_rps, duration}`",
                );
            }
            (None, Some(_)) => {
                return self.push(
                    path.key("spike"),
                    Anchor::Key,
                    "a spike is set, but `phases` has no spike",
                );
            }
            (Some(_), Some(s)) => s,
        };
        let path = path.key("spike");
        for (field, value) in [
            ("duration", spike.duration),
            ("recovery_timeout", spike.recovery_timeout),
        ] {
            if value < cap.check_interval {
                self.push(
                    path.key(field),
                    Anchor::Value,
                    format!(
                        "{} is shorter than capacity.check_interval {}: not one check window would fit in it",
                        humantime::format_duration(value),
                        humantime::format_duration(cap.check_interval)
                    ),
                );
            }
        }
    }

    /// `run.mode: capacity` and its `capacity:` block go together; the controller's numbers are
    /// in range; the client groups it drives can be driven (closed loop, Load / Infer only, at
    /// least one request in flight per worker).
    fn capacity(&mut self, m: &Matrix) {
        let root = FieldPath::root();
        let mode = root.key("run").key("mode");
        let path = root.key("capacity");
        let cap = match (m.run.mode, &m.capacity) {
            (RunMode::Soak, None) => return,
            (RunMode::Soak, Some(_)) => {
                return self.push(
                    path,
                    Anchor::Key,
                    "`capacity:` is read only in capacity mode: set run.mode: capacity, or remove it",
                );
            }
            (RunMode::Capacity, None) => {
                return self.push(
                    mode,
                    Anchor::Value,
                    "capacity mode needs a top-level `capacity:` block (at least target_p99)",
                );
            }
            (RunMode::Capacity, Some(cap)) => cap,
        };
        self.capacity_counts(&path, m.run.poll_interval, cap);
        self.capacity_mixes(m, cap);
        self.spike(cap);
        self.capacity_clients(&path, m, cap);
    }

    /// `capacity:` (at `path`): its concurrencies, check counts, check interval (no shorter
    /// than the run's `poll_interval`) and phases.
    fn capacity_counts(
        &mut self,
        path: &FieldPath,
        poll_interval: Duration,
        cap: &super::types::CapacitySettings,
    ) {
        if let Some(min) = cap.min_concurrency
            && min > cap.max_concurrency
        {
            self.push(
                path.key("min_concurrency"),
                Anchor::Value,
                format!(
                    "min_concurrency {min} is above max_concurrency {}",
                    cap.max_concurrency
                ),
            );
        }
        if cap.check_interval < poll_interval {
            self.push(
                path.key("check_interval"),
                Anchor::Value,
                format!(
                    "check interval {} is shorter than the poll interval {} (workers report once per poll)",
                    humantime::format_duration(cap.check_interval),
                    humantime::format_duration(poll_interval)
                ),
            );
        }
        if cap.phases.is_empty() {
            self.push(
                path.key("phases"),
                Anchor::Value,
                "needs at least one phase",
            );
        }
        for (i, phase) in cap.phases.iter().enumerate() {
            if cap.phases[..i].contains(phase) {
                self.push(
                    path.key("phases").index(i),
                    Anchor::Value,
                    format!("phase {} is listed twice", phase.as_str()),
                );
            }
        }
    }

    /// The client groups and templates of a capacity search (`capacity:` at `path`): workers
    /// within its concurrencies, closed-loop load of the Load and Infer scenarios.
    fn capacity_clients(
        &mut self,
        path: &FieldPath,
        m: &Matrix,
        cap: &super::types::CapacitySettings,
    ) {
        let root = FieldPath::root();
        let min = cap.min_concurrency.unwrap_or(1);
        for (name, g) in &m.client_groups {
            if g.instances > min && g.instances <= cap.max_concurrency {
                self.push(
                    path.key(if cap.min_concurrency.is_some() {
                        "min_concurrency"
                    } else {
                        "max_concurrency"
                    }),
                    Anchor::Value,
                    format!(
                        "client group {name} has {} workers, each keeping at least one request in flight: min_concurrency must be at least {}",
                        g.instances, g.instances
                    ),
                );
            } else if g.instances > cap.max_concurrency {
                self.push(
                    path.key("max_concurrency"),
                    Anchor::Value,
                    format!(
                        "client group {name} has {} workers, more than max_concurrency {}",
                        g.instances, cap.max_concurrency
                    ),
                );
            }
        }
        for (name, t) in &m.client_templates {
            let tpath = root.key("client_templates").key(name.clone());
            if t.load.as_ref().is_some_and(|l| !l.is_closed_loop()) {
                self.push(
                    tpath.key("load"),
                    Anchor::Key,
                    "capacity mode drives a closed-loop concurrency: remove the open-loop `load`",
                );
            }
            if let Some(scenarios) = &t.scenarios {
                for s in scenarios.keys() {
                    let scenario = Scenario::parse(s);
                    if !matches!(scenario, Some(Scenario::Load | Scenario::Infer) | None) {
                        self.push(
                            tpath.key("scenarios").key(s.clone()),
                            Anchor::Key,
                            format!(
                                "capacity mode drives the Load and Infer scenarios only, not {s}"
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// The rules of `sweep:` that need no file: a capacity-mode matrix, a launched server group,
/// known PATHs, values of their fields' types, no empty list, a grid within `max_variants`.
/// Whether each swept model's config exists and takes every value is checked before the run
/// starts (`run::sweep`).
/// The comparison's rules across the matrix: both templates exist and differ, the group is
/// known, the count is in range, no repeat, sweep or capacity mode beside it, and both
/// templates serve the same models where their repositories can be read here.
fn check_compare(m: &Matrix) -> Vec<Issue> {
    let Some(c) = &m.compare else {
        return Vec::new();
    };
    let root = FieldPath::root().key("compare");
    let mut issues = Vec::new();
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    let templates: Vec<&str> = m.server_templates.keys().map(String::as_str).collect();
    for (side, name) in [("a", &c.a), ("b", &c.b)] {
        if !m.server_templates.contains_key(name) {
            push(
                root.key(side),
                Anchor::Value,
                format!(
                    "no server template {name:?} (templates: {})",
                    templates.join(", ")
                ),
            );
        }
    }
    if c.a == c.b {
        push(
            root.key("b"),
            Anchor::Value,
            "is side a: compare two templates".into(),
        );
    }
    match &c.server_group {
        Some(g) if !m.server_groups.contains_key(g) => push(
            root.key("server_group"),
            Anchor::Value,
            format!("no server group {g:?}"),
        ),
        None if m.server_groups.len() != 1 => push(
            root.clone(),
            Anchor::Key,
            "name the `server_group` whose template alternates (the matrix has several)".into(),
        ),
        _ => {}
    }
    if m.sweep.is_some() || m.run.repeat > 1 || m.run.mode == RunMode::Capacity {
        push(
            root.clone(),
            Anchor::Key,
            "a comparison runs soak blocks of its own: not with `sweep`, `run.repeat` or capacity mode".into(),
        );
    }
    if let (Some(a), Some(b)) = (served(m, &c.a), served(m, &c.b))
        && a != b
    {
        let only = |x: &BTreeSet<String>, y: &BTreeSet<String>| {
            let models: Vec<String> = x.difference(y).cloned().collect();
            if models.is_empty() {
                "none".to_string()
            } else {
                models.join(", ")
            }
        };
        push(
            root.key("b"),
            Anchor::Value,
            format!(
                "templates {:?} and {:?} do not serve the same models (only in {:?}: {}; only in {:?}: {})",
                c.a,
                c.b,
                c.a,
                only(&a, &b),
                c.b,
                only(&b, &a)
            ),
        );
    }
    issues
}

/// The models a template's repositories hold (their folders with a config.pbtxt), when every
/// repository is a folder here; None when one is not (an image's, a remote one).
fn served(m: &Matrix, template: &str) -> Option<BTreeSet<String>> {
    let t = m.server_templates.get(template)?;
    let mut models = BTreeSet::new();
    for repo in &t.model_repositories {
        let dir = m.resolve_local_path(repo);
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            if entry.path().join("config.pbtxt").is_file() {
                models.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    Some(models)
}

fn check_sweep(m: &Matrix) -> Vec<Issue> {
    let Some(sweep) = &m.sweep else {
        return Vec::new();
    };
    let mut issues = Vec::new();
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    let root = FieldPath::root().key("sweep");
    if m.run.mode != RunMode::Capacity {
        push(
            root.clone(),
            Anchor::Key,
            "a sweep ranks variants by their capacity: it needs `run.mode: capacity`".into(),
        );
    }
    if !m.faults.is_empty() {
        push(
            root.clone(),
            Anchor::Key,
            "a sweep measures capacity; injected faults would be measured with it".into(),
        );
    }
    match m.server_groups.get(&sweep.server_group) {
        None => push(
            root.key("server_group"),
            Anchor::Value,
            format!(
                "no server group {:?} (groups: {})",
                sweep.server_group,
                m.server_groups
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(g) if g.is_external() => push(
            root.key("server_group"),
            Anchor::Value,
            format!(
                "server group {:?} names existing servers (`endpoints`): a sweep launches the \
                 servers it configures",
                sweep.server_group
            ),
        ),
        Some(_) => {}
    }
    if sweep.parameters.is_empty() {
        push(
            root.key("parameters"),
            Anchor::Key,
            "no parameters: name at least one PATH and its values".into(),
        );
    }
    sweep_parameters(&mut issues, &root, sweep);
    sweep_limits(&mut issues, &root, sweep);
    issues
}

/// A sweep's parameters (`sweep:` at `root`): each a PATH it knows, with values that fit it,
/// none twice.
fn sweep_parameters(issues: &mut Vec<Issue>, root: &FieldPath, sweep: &super::sweep::Sweep) {
    use super::sweep::SweepParam;
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    for (text, values) in &sweep.parameters {
        let path = root.key("parameters").key(text.as_str());
        let param = match SweepParam::parse(text) {
            Ok(SweepParam::ServerEnv(name)) if !is_env_name(&name) => {
                push(
                    path,
                    Anchor::Key,
                    format!("`{text}`: {name:?} is not an environment variable's name"),
                );
                continue;
            }
            Ok(p) => p,
            Err(why) => {
                push(path, Anchor::Key, why.to_string());
                continue;
            }
        };
        if values.is_empty() {
            push(
                path.clone(),
                Anchor::Value,
                "an empty list of values".into(),
            );
        }
        for (i, value) in values.iter().enumerate() {
            if let Err(why) = check_sweep_value(&param, value) {
                push(path.index(i), Anchor::Value, why.to_string());
            }
        }
        if let Some(again) = (1..values.len()).find(|&i| values[..i].contains(&values[i])) {
            push(
                path.index(again),
                Anchor::Value,
                format!("value {} is listed twice", values[again]),
            );
        }
    }
}

/// A sweep's size and constraints (`sweep:` at `root`): how many variants, how many at once,
/// and the limits a variant must keep to.
fn sweep_limits(issues: &mut Vec<Issue>, root: &FieldPath, sweep: &super::sweep::Sweep) {
    use super::sweep::MAX_SWEEP_VARIANTS;
    let mut push = |path: FieldPath, anchor: Anchor, message: String| {
        issues.push(Issue::at(path, anchor, message))
    };
    if !(1..=MAX_SWEEP_VARIANTS).contains(&sweep.max_variants) {
        push(
            root.key("max_variants"),
            Anchor::Value,
            format!(
                "must be from 1 to {MAX_SWEEP_VARIANTS}, found {}",
                sweep.max_variants
            ),
        );
    } else if sweep.search == super::sweep::SweepSearch::Grid
        && sweep.grid_size() > u64::from(sweep.max_variants)
    {
        let sizes: Vec<String> = sweep
            .parameters
            .iter()
            .map(|(p, v)| format!("{p}: {}", v.len()))
            .collect();
        push(
            root.key("parameters"),
            Anchor::Key,
            format!(
                "the grid has {} variants ({}), more than max_variants {}: fewer values, a \
                 larger max_variants, or `search: quick`",
                sweep.grid_size(),
                sizes.join(" x "),
                sweep.max_variants
            ),
        );
    }
    if sweep.parallel == 0 {
        push(
            root.key("parallel"),
            Anchor::Value,
            "must be at least 1 (the variants measured at once)".into(),
        );
    }
    if let Some(c) = &sweep.constraints
        && c.model_instances_max == Some(0)
    {
        push(
            root.key("constraints").key("model_instances_max"),
            Anchor::Value,
            "must be at least 1".into(),
        );
    }
    if let Some(text) = sweep
        .constraints
        .as_ref()
        .and_then(|c| c.gpu_memory.as_deref())
    {
        match super::sweep::parse_size(text) {
            Err(e) => push(
                root.key("constraints").key("gpu_memory"),
                Anchor::Value,
                e.to_string(),
            ),
            Ok(0) => push(
                root.key("constraints").key("gpu_memory"),
                Anchor::Value,
                "must be more than 0 bytes".into(),
            ),
            Ok(_) => {}
        }
    }
}

/// A sweep value of the wrong type for its parameter.
#[derive(Debug, thiserror::Error)]
pub enum SweepValueError {
    /// `server.args` takes the whole argument list.
    #[error("server.args takes a list of strings (the whole argument list), found {0}")]
    ServerArgs(serde_json::Value),
    /// A parameter that takes a non-empty string (`param`: its PATH).
    #[error("{param} takes a non-empty string, found {value}")]
    NotANonEmptyString {
        param: &'static str,
        value: serde_json::Value,
    },
    /// `server.env.NAME` takes a string.
    #[error("server.env.{name} takes a string, found {value} (quote it: \"{value}\")")]
    EnvNotAString {
        name: String,
        value: serde_json::Value,
    },
    /// `server.resources` takes what a template's `resources` does.
    #[error("server.resources: {0}")]
    Resources(#[source] serde_json::Error),
    /// A value the model config's field cannot take.
    #[error(transparent)]
    Model(#[from] super::model_config::ConfigValueError),
}

/// Whether `value` is of the type the sweep parameter takes.
fn check_sweep_value(
    param: &super::sweep::SweepParam,
    value: &serde_json::Value,
) -> Result<(), SweepValueError> {
    use super::sweep::SweepParam;
    let string = |param: &'static str| match value {
        serde_json::Value::String(s) if !s.is_empty() => Ok(()),
        _ => Err(SweepValueError::NotANonEmptyString {
            param,
            value: value.clone(),
        }),
    };
    match param {
        SweepParam::ServerArgs => match value.as_array() {
            Some(items) if items.iter().all(|a| a.is_string()) => Ok(()),
            _ => Err(SweepValueError::ServerArgs(value.clone())),
        },
        SweepParam::ServerBinary => string("server.tritonserver.binary"),
        SweepParam::ServerImage => string("server.tritonserver.image"),
        SweepParam::ServerVersion => string("server.version"),
        SweepParam::ServerEnv(name) => match value {
            serde_json::Value::String(_) => Ok(()),
            _ => Err(SweepValueError::EnvNotAString {
                name: name.clone(),
                value: value.clone(),
            }),
        },
        SweepParam::ServerResources => serde_json::from_value::<Resources>(value.clone())
            .map(drop)
            .map_err(SweepValueError::Resources),
        SweepParam::Model { path, .. } => path.value_of(value).map(drop).map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_value_of_the_wrong_type_says_which() {
        use super::super::model_config::ConfigValueError;
        use super::super::sweep::SweepParam;
        use serde_json::json;
        let check = |path: &str, value: serde_json::Value| {
            check_sweep_value(&SweepParam::parse(path).unwrap(), &value)
        };
        assert!(check("server.args", json!(["--log-verbose=1"])).is_ok());
        assert!(check("server.env.FOO", json!("1")).is_ok());
        assert!(check("models.m.max_batch_size", json!(8)).is_ok());
        let err = check("server.args", json!("x")).unwrap_err();
        assert!(matches!(&err, SweepValueError::ServerArgs(v) if v == "x"));
        assert_eq!(
            err.to_string(),
            "server.args takes a list of strings (the whole argument list), found \"x\""
        );
        let err = check("server.tritonserver.image", json!("")).unwrap_err();
        assert!(matches!(
            err,
            SweepValueError::NotANonEmptyString {
                param: "server.tritonserver.image",
                ..
            }
        ));
        assert!(matches!(
            check("server.version", json!(5)),
            Err(SweepValueError::NotANonEmptyString {
                param: "server.version",
                ..
            })
        ));
        let err = check("server.env.FOO", json!(5)).unwrap_err();
        assert!(matches!(&err, SweepValueError::EnvNotAString { name, .. } if name == "FOO"));
        assert_eq!(
            err.to_string(),
            "server.env.FOO takes a string, found 5 (quote it: \"5\")"
        );
        let err = check("server.resources", json!({"bogus": 1})).unwrap_err();
        assert!(matches!(err, SweepValueError::Resources(_)), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("server.resources: unknown field `bogus`")
        );
        let err = check("models.m.max_batch_size", json!("8")).unwrap_err();
        assert!(
            matches!(
                err,
                SweepValueError::Model(ConfigValueError::NotAnInteger { .. })
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "`max_batch_size` takes an integer, found \"8\""
        );
    }

    #[test]
    fn dns_labels() {
        for ok in ["a", "0", "smoke", "grpc-clients", "a-1", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn addresses() {
        for ok in [
            "triton:8001",
            "10.0.0.7:1",
            "triton.staging.svc.cluster.local:65535",
            "[::1]:8000",
            "my_host:80",
        ] {
            assert_eq!(check_address(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "triton",
            ":8001",
            "triton:",
            "http://triton:8000",
            "triton:8000/v2",
            "triton:80a",
            "-triton:80",
            "[]:80",
            "a b:80",
        ] {
            let e = check_address(bad).unwrap_err();
            assert_eq!(e, AddressError::NotHostPort(bad.to_string()));
            assert!(e.to_string().contains("is not HOST:PORT"), "{bad}: {e}");
        }
        assert_eq!(
            check_address("triton:0").unwrap_err().to_string(),
            "port 0 of \"triton:0\" is out of range (1 to 65535)"
        );
        for big in ["triton:65536", "triton:99999999999"] {
            assert!(matches!(
                check_address(big),
                Err(AddressError::PortOutOfRange { .. })
            ));
        }
    }

    /// A matrix with the given server groups (indented by two), a gRPC client group `g` on
    /// server group `a` and, when `http` is set, an HTTP client group `h` on it too.
    fn with_groups(groups: &str, http: bool) -> String {
        let mut m = format!(
            "version: 1
run: {{name: ep, duration: 10s}}
server_templates:
  t: {{tritonserver: {{binary: auto}}, model_repositories: [m]}}
server_groups:
{groups}client_templates:
  grpc: {{worker: {{binary: auto}}, protocol: grpc}}
  http: {{worker: {{binary: auto}}, protocol: http}}
client_groups:
  g: {{template: grpc, instances: 1, target: a}}
"
        );
        if http {
            m.push_str("  h: {template: http, instances: 1, target: a}\n");
        }
        m
    }

    fn errors(text: &str) -> Vec<String> {
        match super::super::parse(text, "ep.yaml") {
            Ok(_) => Vec::new(),
            Err(e) => e.diagnostics().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn endpoints_instead_of_a_template() {
        let ok = with_groups(
            "  a:\n    endpoints: [\"triton-a:8001\", {grpc: \"10.0.0.2:8001\", metrics: \"10.0.0.2:8002\"}]\n",
            false,
        );
        assert_eq!(errors(&ok), Vec::<String>::new());
        let m = super::super::parse(&ok, "ep.yaml").unwrap();
        assert!(m.servers().is_empty(), "nothing to launch");
        let ext = m.external_servers();
        assert_eq!(ext.len(), 2);
        assert_eq!(
            (
                ext[0].name.as_str(),
                ext[0].address().as_str(),
                ext[0].field()
            ),
            (
                "a-0",
                "grpc=triton-a:8001",
                "server_groups.a.endpoints[0]".to_string()
            )
        );
        assert_eq!(ext[1].address(), "grpc=10.0.0.2:8001 metrics=10.0.0.2:8002");
        assert_eq!(
            ext[1].port_field("grpc"),
            "server_groups.a.endpoints[1].grpc"
        );
        assert_eq!(ext[0].port_field("grpc"), "server_groups.a.endpoints[0]");
        assert_eq!(m.clients()[0].targets, ["a-0", "a-1"]);

        // Both protocols: ports by protocol, each client group's own present.
        let both = with_groups(
            "  a:\n    instances: 1\n    endpoints: [{grpc: \"h:8001\", http: \"h:8000\"}]\n",
            true,
        );
        assert_eq!(errors(&both), Vec::<String>::new());
        let m = super::super::parse(&both, "ep.yaml").unwrap();
        assert_eq!(m.external_servers()[0].address(), "grpc=h:8001 http=h:8000");
    }

    #[test]
    fn endpoint_mistakes_are_named_by_file_line_and_field() {
        let cases: [(&str, bool, &[&str]); 9] = [
            (
                "  a:\n    template: t\n    endpoints: [\"h:8001\"]\n",
                false,
                &[
                    "ep.yaml:7:5: server_groups.a.template: a group either launches servers from a template or names existing ones: `template` and `endpoints` exclude each other",
                ],
            ),
            (
                "  a:\n    instances: 2\n    endpoints: [\"h:8001\"]\n",
                false,
                &[
                    "ep.yaml:7:16: server_groups.a.instances: 2 instances, but 1 endpoints (omit `instances` with `endpoints`)",
                ],
            ),
            (
                "  a:\n    endpoints: [\"h:0\", \"http://h:8001\"]\n",
                false,
                &[
                    "ep.yaml:7:17: server_groups.a.endpoints[0]: port 0 of \"h:0\" is out of range (1 to 65535)",
                    "ep.yaml:7:24: server_groups.a.endpoints[1]: \"http://h:8001\" is not HOST:PORT (a host name or IP address and a port, without a scheme, e.g. \"triton.staging:8001\")",
                ],
            ),
            (
                "  a:\n    endpoints: [\"h:8001\"]\n",
                true,
                &[
                    "ep.yaml:7:17: server_groups.a.endpoints[0]: client groups g (grpc) and h (http) both target this group, so one `HOST:PORT` cannot serve both: give the ports by protocol ({grpc: HOST:PORT, http: HOST:PORT})",
                ],
            ),
            (
                "  a:\n    endpoints: [{http: \"h:8000\"}]\n",
                false,
                &[
                    "ep.yaml:7:17: server_groups.a.endpoints[0]: client group g speaks grpc, but this endpoint has no `grpc` address",
                ],
            ),
            (
                "  a:\n    endpoints: [{metrics: \"h:8002\"}]\n",
                false,
                &[
                    "ep.yaml:7:17: server_groups.a.endpoints[0]: needs a `grpc` or an `http` address (HOST:PORT)",
                ],
            ),
            (
                "  a:\n    endpoints: [{grpc: \"h:8001\", metrics: \"h\"}]\n",
                false,
                &[
                    "ep.yaml:7:43: server_groups.a.endpoints[0].metrics: \"h\" is not HOST:PORT (a host name or IP address and a port, without a scheme, e.g. \"triton.staging:8001\")",
                ],
            ),
            (
                "  a: {endpoints: [\"h:8001\"]}\n  b: {endpoints: [\"h:8002\"]}\n",
                false,
                &[
                    "ep.yaml:7:19: server_groups.b.endpoints[0]: no client group targets server group \"b\", so the protocol of this port is unknown: write {grpc: HOST:PORT} or {http: HOST:PORT}",
                ],
            ),
            (
                "  a: {instances: 1}\n  b: {template: t}\n",
                false,
                &[
                    "ep.yaml:6:3: server_groups.a: either `template` and `instances` (servers to launch) or `endpoints` (servers that already run) is required",
                    "ep.yaml:7:3: server_groups.b: missing field `instances` (how many servers of the template to launch)",
                ],
            ),
        ];
        for (groups, http, want) in cases {
            assert_eq!(errors(&with_groups(groups, http)), want, "{groups}");
        }
        // A mapping's unknown key is reported as such.
        let typo = errors(&with_groups(
            "  a:\n    endpoints: [{grcp: \"h:8001\"}]\n",
            false,
        ));
        assert_eq!(typo.len(), 1);
        assert!(
            typo[0].starts_with("ep.yaml:7:")
                && typo[0].contains("server_groups.a.endpoints[0].grcp")
                && typo[0].contains("unknown field `grcp`"),
            "{typo:?}"
        );
    }

    #[test]
    fn env_names() {
        for ok in ["A", "_X", "CUDA_VISIBLE_DEVICES", "a1"] {
            assert!(is_env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A.B", "A B"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }

    /// `compare:` — a matrix with two templates over `repo_a` and `repo_b`, compared, written beside them.
    fn ab_matrix(dir: &std::path::Path, compare: &str) -> Result<crate::matrix::Matrix, String> {
        let text = format!(
            "version: 1\n\
             run: {{name: ab, duration: 10s}}\n\
             server_templates:\n  \
               old: {{tritonserver: {{binary: auto}}, model_repositories: [repo_a]}}\n  \
               new: {{tritonserver: {{binary: auto}}, model_repositories: [repo_b]}}\n\
             server_groups:\n  triton: {{template: old, instances: 1}}\n\
             client_templates:\n  c: {{worker: {{binary: auto}}, protocol: grpc, models: [{{name: m1}}]}}\n\
             client_groups:\n  clients: {{template: c, instances: 1, target: triton}}\n\
             compare: {compare}\n"
        );
        let path = dir.join("ab.yaml");
        std::fs::write(&path, text).unwrap();
        crate::matrix::load(&path).map_err(|e| e.to_string())
    }

    fn ab_model(dir: &std::path::Path, repo: &str, name: &str) {
        std::fs::create_dir_all(dir.join(repo).join(name)).unwrap();
        std::fs::write(dir.join(repo).join(name).join("config.pbtxt"), "").unwrap();
    }

    #[test]
    fn each_side_is_the_group_with_its_template() {
        let tmp = tempfile::tempdir().unwrap();
        for repo in ["repo_a", "repo_b"] {
            ab_model(tmp.path(), repo, "m1");
        }
        let m = ab_matrix(tmp.path(), "{a: old, b: new}").unwrap();
        let c = m.compare.as_ref().unwrap();
        assert_eq!((m.compare_group(), c.repeats), (Some("triton"), 3));
        let b = m.compare_side(&c.b);
        assert_eq!(b.server_groups["triton"].template.as_deref(), Some("new"));
        assert!(b.compare.is_none());
        assert_ne!(
            crate::matrix::fingerprint(&b),
            crate::matrix::fingerprint(&m.compare_side(&c.a)),
            "each side is a history of its own"
        );
    }

    #[test]
    fn templates_that_do_not_serve_the_same_models_are_bad_input() {
        let tmp = tempfile::tempdir().unwrap();
        ab_model(tmp.path(), "repo_a", "m1");
        ab_model(tmp.path(), "repo_b", "m1");
        ab_model(tmp.path(), "repo_b", "m2");
        let e = ab_matrix(tmp.path(), "{a: old, b: new, repeats: 1}").unwrap_err();
        assert!(
            e.contains("12:22: compare.b: templates \"old\" and \"new\" do not serve the same models (only in \"old\": none; only in \"new\": m2)"),
            "{e}"
        );
        assert!(
            e.contains("compare.repeats: must be from 2 to 50 runs of each side, found 1"),
            "{e}"
        );
        let e = ab_matrix(tmp.path(), "{a: old, b: old}").unwrap_err();
        assert!(
            e.contains("compare.b: is side a: compare two templates"),
            "{e}"
        );
        let e = ab_matrix(tmp.path(), "{a: old, b: newer}").unwrap_err();
        assert!(
            e.contains("compare.b: no server template \"newer\" (templates: old, new)"),
            "{e}"
        );
    }
}
