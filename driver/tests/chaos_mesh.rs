//! The Chaos Mesh objects `driver chaos-mesh` renders (`launcher::kube::chaos_mesh`), checked as
//! fixtures: a matrix with faults of every kind is planned as a run plans it, rendered, and the
//! Workflow, and each PodChaos / NetworkChaos spec it embeds as an object of its own, validated
//! against the `v1alpha1` `openAPIV3Schema` of chaos-mesh v2.8.3's CRDs (vendored unchanged in
//! `tests/fixtures/chaos-mesh/`) with the `jsonschema` crate. Nothing here has a Chaos Mesh
//! controller: these checks are all the objects have had.
//!
//! Beyond the schema, as the API server and Chaos Mesh's admission webhook would: no field the
//! schema does not know (the API server's strict field validation; a structural schema would
//! otherwise drop a misspelt field without a word), and the webhook rules the Workflow relies on
//! (`api/v1alpha1/workflow_webhook.go`, `networkchaos_webhook.go` at v2.8.3). Every check is
//! shown to refuse a broken object.

use driver::launcher::kube::chaos_mesh;
use driver::matrix::faults::{FaultKind, Injection};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chaos-mesh");
const TAG: &str = "v2.8.3";
const RUN: &str = "ci-1";
const NAMESPACE: &str = "stress";

/// One vendored CRD: its kind and the validator of its `v1alpha1` schema.
struct Crd {
    kind: String,
    schema: Value,
    validator: jsonschema::Validator,
}

impl Crd {
    fn load(file: &str) -> Crd {
        let path = Path::new(FIXTURES).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Value = serde_saphyr::from_str(&text).unwrap();
        let version = doc["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "v1alpha1")
            .expect("a v1alpha1 version");
        let schema = version["schema"]["openAPIV3Schema"].clone();
        // An OpenAPI v3.0 schema object is JSON Schema draft 4 (draft-wright-00) plus keywords
        // of its own (`nullable`, `x-kubernetes-*`), which the validator ignores as unknown.
        let validator = jsonschema::draft4::new(&schema).expect("the CRD's schema compiles");
        Crd {
            kind: doc["spec"]["names"]["kind"].as_str().unwrap().to_string(),
            schema,
            validator,
        }
    }

    /// What the schema, and the API server's strict field validation, refuse in `object`.
    fn problems(&self, object: &Value) -> Vec<String> {
        let mut out: Vec<String> = self
            .validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        unknown_fields(object, &self.schema, "", &mut out);
        out
    }

    /// What the schema alone (the `jsonschema` validator) refuses.
    fn schema_problems(&self, object: &Value) -> Vec<String> {
        self.validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }
}

struct Crds {
    workflow: Crd,
    pod_chaos: Crd,
    network_chaos: Crd,
}

fn crds() -> Crds {
    let crds = Crds {
        workflow: Crd::load("chaos-mesh.org_workflows.yaml"),
        pod_chaos: Crd::load("chaos-mesh.org_podchaos.yaml"),
        network_chaos: Crd::load("chaos-mesh.org_networkchaos.yaml"),
    };
    assert_eq!(crds.workflow.kind, "Workflow");
    assert_eq!(crds.pod_chaos.kind, "PodChaos");
    assert_eq!(crds.network_chaos.kind, "NetworkChaos");
    crds
}

/// Fields the schema does not declare, as the API server's strict field validation
/// (`fieldValidation=Strict`, kubectl's default) refuses them. The root's `metadata` is the API
/// server's own ObjectMeta, not the CRD's.
fn unknown_fields(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true || path == "/metadata" {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let at = format!("{path}/{key}");
                match (&schema["properties"][key], &schema["additionalProperties"]) {
                    (Value::Object(_), _) => {
                        unknown_fields(v, &schema["properties"][key], &at, out)
                    }
                    (_, Value::Bool(true)) => {}
                    (_, extra @ Value::Object(_)) => unknown_fields(v, extra, &at, out),
                    _ => out.push(format!("{at}: unknown field {key:?}")),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                unknown_fields(v, &schema["items"], &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Go's `time.ParseDuration`, which Chaos Mesh reads a `deadline` with.
fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let re = regex::Regex::new(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)").unwrap();
    let mut total = 0f64;
    let mut covered = 0;
    for c in re.captures_iter(s) {
        let whole = c.get(0).unwrap();
        if whole.start() != covered {
            return None;
        }
        covered = whole.end();
        let n: f64 = c[1].parse().ok()?;
        total += n * match &c[2] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            _ => 3600.0,
        };
    }
    (covered == s.len() && covered > 0).then(|| Duration::from_secs_f64(total))
}

/// Whether `s` is a DNS-1123 subdomain, as Chaos Mesh wants a template's name.
fn is_dns_subdomain(s: &str) -> bool {
    let re =
        regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .unwrap();
    s.len() <= 253 && re.is_match(s)
}

/// The rules of Chaos Mesh's admission webhook that the rendered Workflow relies on
/// (workflow_webhook.go, networkchaos_webhook.go), and the Workflow name's use as a label value.
fn webhook_problems(w: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let name = w["metadata"]["name"].as_str().unwrap_or_default();
    if !driver::matrix::is_dns_label(name) {
        out.push(format!(
            "metadata.name {name:?}: the nodes' label chaos-mesh.org/workflow needs a name of at most 63"
        ));
    }
    let templates = w["spec"]["templates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if templates.is_empty() {
        out.push("templates in workflow could not be empty".into());
    }
    let names: Vec<&str> = templates
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default())
        .collect();
    let known: BTreeSet<&str> = names.iter().copied().collect();
    if known.len() != names.len() {
        out.push(format!("template name must be unique: {names:?}"));
    }
    let entry = w["spec"]["entry"].as_str().unwrap_or_default();
    if !known.contains(entry) {
        out.push(format!(
            "entry: can not find a template with name {entry:?}"
        ));
    }
    for t in &templates {
        let name = t["name"].as_str().unwrap_or_default();
        if !is_dns_subdomain(name) {
            out.push(format!("{name:?}: field name must be DNS-1123 subdomain"));
        }
        if let Some(d) = t.get("deadline")
            && d.as_str().and_then(parse_go_duration).is_none()
        {
            out.push(format!("{name}: deadline {d} is not a Go duration"));
        }
        let chaos_key = |kind: &str| {
            let mut k = kind.to_string();
            k[..1].make_ascii_lowercase();
            k
        };
        match t["templateType"].as_str().unwrap_or_default() {
            "Suspend" => {
                if t["deadline"].as_str().unwrap_or_default().is_empty() {
                    out.push(format!(
                        "{name}: deadline in template with type Suspend could not be empty"
                    ));
                }
            }
            "Serial" | "Parallel" => {
                for c in t["children"].as_array().into_iter().flatten() {
                    if !known.contains(c.as_str().unwrap_or_default()) {
                        out.push(format!("{name}: can not find a template with name {c}"));
                    }
                }
            }
            kind @ ("PodChaos" | "NetworkChaos") => {
                let spec = &t[chaos_key(kind)];
                if !spec.is_object() {
                    out.push(format!("{name}: the value of chaos {kind} is required"));
                }
                if spec.get("duration").is_some() {
                    out.push(format!(
                        "{name}: should not define duration in chaos when using Workflow, use \
                         Template#Deadline instead"
                    ));
                }
                // A chaos node ends at its deadline only: without one its branch stops there.
                if t.get("deadline").is_none() {
                    out.push(format!(
                        "{name}: a chaos template without a deadline never ends"
                    ));
                }
                if kind == "NetworkChaos"
                    && matches!(spec["direction"].as_str(), Some("from" | "both"))
                    && spec.get("target").is_none()
                {
                    out.push(format!(
                        "{name}: `from` and `both` direction cannot be used when targets is empty \
                         in netem action"
                    ));
                }
            }
            other => out.push(format!("{name}: unexpected template type {other:?}")),
        }
    }
    out
}

/// Each embedded chaos spec of the Workflow as the object of its own kind that Chaos Mesh creates.
fn embedded(w: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for t in w["spec"]["templates"].as_array().unwrap() {
        for (key, kind) in [("podChaos", "PodChaos"), ("networkChaos", "NetworkChaos")] {
            if let Some(spec) = t.get(key) {
                out.push(json!({
                    "apiVersion": chaos_mesh::API_VERSION,
                    "kind": kind,
                    "metadata": { "name": t["name"], "namespace": NAMESPACE },
                    "spec": spec,
                }));
            }
        }
    }
    out
}

/// Everything wrong with a rendered Workflow: its schema, its embedded chaos's, the webhook's.
fn all_problems(crds: &Crds, w: &Value) -> Vec<String> {
    let mut out = crds.workflow.problems(w);
    out.extend(webhook_problems(w));
    for object in embedded(w) {
        let crd = match object["kind"].as_str() {
            Some("PodChaos") => &crds.pod_chaos,
            _ => &crds.network_chaos,
        };
        out.extend(
            crd.problems(&object)
                .into_iter()
                .map(|p| format!("{} {}: {p}", object["kind"], object["metadata"]["name"])),
        );
    }
    out
}

/// When each chaos template starts, from the Workflow's start, as Chaos Mesh runs a Workflow: a
/// Parallel starts its children at once, a Serial each child when the one before it has ended,
/// and a Suspend or chaos node lasts its deadline.
fn chaos_starts(w: &Value) -> BTreeMap<String, Duration> {
    let templates: BTreeMap<&str, &Value> = w["spec"]["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t))
        .collect();
    fn walk(
        name: &str,
        start: Duration,
        templates: &BTreeMap<&str, &Value>,
        starts: &mut BTreeMap<String, Duration>,
    ) -> Duration {
        let t = templates[name];
        let children = || {
            t["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
        };
        match t["templateType"].as_str().unwrap() {
            "Parallel" => children()
                .map(|c| walk(c, start, templates, starts))
                .max()
                .unwrap_or(start),
            "Serial" => children().fold(start, |at, c| walk(c, at, templates, starts)),
            kind => {
                if kind != "Suspend" {
                    starts.insert(name.to_string(), start);
                }
                start + parse_go_duration(t["deadline"].as_str().unwrap()).unwrap()
            }
        }
    }
    let mut starts = BTreeMap::new();
    walk(
        w["spec"]["entry"].as_str().unwrap(),
        Duration::ZERO,
        &templates,
        &mut starts,
    );
    starts
}

/// The fixture matrix's faults, planned as `driver run` plans them, and its Workflow.
fn rendered() -> (Vec<Injection>, Value) {
    let matrix = Path::new(FIXTURES).join("every-kind.yaml");
    let plan = driver::run::planned_faults(&matrix, RUN, None).expect("the fixture plans");
    let mut objects = chaos_mesh::render(&plan, RUN, NAMESPACE);
    assert_eq!(objects.len(), 1, "one Workflow");
    (plan, objects.remove(0))
}

fn template_mut<'a>(w: &'a mut Value, name: &str) -> &'a mut Value {
    w["spec"]["templates"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no template {name}"))
}

#[test]
fn the_vendored_crds_are_the_release_the_renderer_names() {
    assert!(chaos_mesh::CHECKED_AGAINST.ends_with(TAG));
    for file in [
        "chaos-mesh.org_podchaos.yaml",
        "chaos-mesh.org_networkchaos.yaml",
        "chaos-mesh.org_workflows.yaml",
    ] {
        let text = std::fs::read_to_string(Path::new(FIXTURES).join(file)).unwrap();
        let header: String = text.lines().take(4).collect::<Vec<_>>().join("\n");
        assert!(
            header.contains("https://github.com/chaos-mesh/chaos-mesh")
                && header.contains(&format!("tag {TAG} (commit "))
                && header.contains(&format!("config/crd/bases/{file}")),
            "{file}: {header}"
        );
    }
    crds();
}

#[test]
fn faults_of_every_kind_render_objects_the_crds_and_the_webhook_accept() {
    let crds = crds();
    let (plan, w) = rendered();
    let kinds: BTreeSet<&str> = plan.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(kinds, ["kill", "network", "pause", "restart"].into());
    let members: BTreeSet<&str> = plan.iter().map(|i| i.member.as_str()).collect();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(plan.iter().any(|i| {
        i.network
            .as_ref()
            .is_some_and(|n| n.delay.is_some() && n.jitter.is_some() && n.loss.is_some())
    }));

    let problems = all_problems(&crds, &w);
    assert!(problems.is_empty(), "{problems:#?}");
    let embedded = embedded(&w);
    let of_kind = |k: &str| embedded.iter().filter(|o| o["kind"] == k).count();
    // kill, pause, 4 restarts; the two network faults: delay + loss, and delay.
    assert_eq!((of_kind("PodChaos"), of_kind("NetworkChaos")), (6, 3));

    // As YAML (what `driver chaos-mesh` prints) and back: the same object.
    let yaml = serde_saphyr::to_string(&w).unwrap();
    let back: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(back, w, "{yaml}");
}

#[test]
fn each_fault_starts_at_its_planned_time_from_the_workflows_start() {
    let (plan, w) = rendered();
    let starts = chaos_starts(&w);
    let mut expected = BTreeMap::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for i in &plan {
        let k = seen.entry(i.member.as_str()).or_default();
        *k += 1;
        let prefixes: &[&str] = match i.kind {
            FaultKind::Kill => &["kill"],
            FaultKind::Restart => &["restart"],
            FaultKind::Pause => &["pause"],
            FaultKind::Evict
            | FaultKind::Drain
            | FaultKind::StoreRestart
            | FaultKind::ApiOutage => {
                panic!("the test matrix has no evict or store-restart: chaos-mesh refuses them")
            }
            FaultKind::Network => {
                let n = i.network.as_ref().unwrap();
                match (n.delay.is_some() || n.jitter.is_some(), n.loss.is_some()) {
                    (true, true) => &["delay", "loss"],
                    (true, false) => &["delay"],
                    _ => &["loss"],
                }
            }
        };
        for p in prefixes {
            expected.insert(format!("{p}-{}-{k}", i.member), i.at);
        }
    }
    assert_eq!(starts, expected);
}

#[test]
fn a_broken_object_is_refused() {
    let crds = crds();
    let (_, good) = rendered();
    assert!(all_problems(&crds, &good).is_empty());
    type Break = fn(&mut Value);
    // Each refused by the `jsonschema` validator of the Workflow CRD's schema itself, and a broken
    // chaos spec (the first eight) by its own kind's CRD as well.
    let schema_breaks: &[(&str, Break)] = &[
        ("an unknown pod action", |w| {
            template_mut(w, "kill-triton-0-1")["podChaos"]["action"] = json!("pod-explode")
        }),
        ("no selector", |w| {
            template_mut(w, "pause-triton-1-1")["podChaos"]
                .as_object_mut()
                .unwrap()
                .remove("selector");
        }),
        ("no mode", |w| {
            template_mut(w, "loss-triton-2-1")["networkChaos"]
                .as_object_mut()
                .unwrap()
                .remove("mode");
        }),
        ("a negative grace period", |w| {
            template_mut(w, "kill-triton-0-1")["podChaos"]["gracePeriod"] = json!(-1)
        }),
        ("a grace period as text", |w| {
            template_mut(w, "kill-triton-0-1")["podChaos"]["gracePeriod"] = json!("0")
        }),
        ("a latency in two units", |w| {
            template_mut(w, "delay-triton-2-1")["networkChaos"]["delay"]["latency"] = json!("1m30s")
        }),
        ("an unknown direction", |w| {
            template_mut(w, "delay-triton-2-1")["networkChaos"]["direction"] = json!("sideways")
        }),
        ("a loss as a number", |w| {
            template_mut(w, "loss-triton-2-1")["networkChaos"]["loss"]["loss"] = json!(5)
        }),
        ("no entry", |w| {
            w["spec"].as_object_mut().unwrap().remove("entry");
        }),
        ("a template without a type", |w| {
            template_mut(w, "wait-triton-0-1")
                .as_object_mut()
                .unwrap()
                .remove("templateType");
        }),
    ];
    for (n, (what, break_it)) in schema_breaks.iter().enumerate() {
        let mut w = good.clone();
        break_it(&mut w);
        assert!(
            !crds.workflow.schema_problems(&w).is_empty(),
            "{what}: accepted by the Workflow's schema"
        );
        let by_own_kind = embedded(&w).iter().any(|o| {
            let crd = if o["kind"] == "PodChaos" {
                &crds.pod_chaos
            } else {
                &crds.network_chaos
            };
            !crd.schema_problems(o).is_empty()
        });
        assert_eq!(by_own_kind, n < 8, "{what}: refused by the chaos's own CRD");
    }
    // Refused by the strict field check and the webhook's rules (the schema allows them).
    let other_breaks: &[(&str, Break)] = &[
        ("a misspelt field", |w| {
            template_mut(w, "restart-triton-0-2")["podChaos"]["gracePeriods"] = json!(30)
        }),
        ("a duration inside a workflow's chaos", |w| {
            template_mut(w, "pause-triton-1-1")["podChaos"]["duration"] = json!("5s")
        }),
        ("a Suspend without a deadline", |w| {
            template_mut(w, "wait-triton-0-1")
                .as_object_mut()
                .unwrap()
                .remove("deadline");
        }),
        ("a deadline Go cannot read", |w| {
            template_mut(w, "wait-triton-0-1")["deadline"] = json!("20 seconds")
        }),
        ("both directions without a target", |w| {
            template_mut(w, "delay-triton-2-1")["networkChaos"]
                .as_object_mut()
                .unwrap()
                .remove("target");
        }),
        ("a child that is no template", |w| {
            template_mut(w, "member-triton-0")["children"][0] = json!("wait-nowhere")
        }),
        ("two templates of one name", |w| {
            template_mut(w, "wait-triton-1-1")["name"] = json!("wait-triton-0-1")
        }),
        ("a template name that is no DNS name", |w| {
            template_mut(w, "faults")["name"] = json!("All_Faults");
            w["spec"]["entry"] = json!("All_Faults");
        }),
    ];
    for (what, break_it) in other_breaks {
        let mut w = good.clone();
        break_it(&mut w);
        assert!(
            !all_problems(&crds, &w).is_empty(),
            "{what}: accepted by every check"
        );
    }
    // And a Workflow whose name is too long to label its nodes with.
    let long = chaos_mesh::render(&rendered().0, &"a".repeat(43), NAMESPACE);
    assert!(!webhook_problems(&long[0]).is_empty());
}
