//! The report as text (report.txt, `driver report --format text`): the root cause first, the
//! SLO verdicts and regressions, the L0 tables, the run over time, the servers, traces, the
//! failure signatures with their examples, and a block per failed member. Every text rendering
//! of the report's parts is here; `crate::report` holds the data.

use std::fmt::Write as _;
use stress_common::status::FailureRecord;
use stress_common::triton_metrics;

use crate::capacity::autoscale::{Autoscaler, number};
use crate::judge::change::Call;
use crate::report::spans::{ClockOffset, Part, TailRow, TraceJoin};
use crate::report::timeline::{MIB, Timeline};
use crate::report::trace::{STAGES, TraceSummary};
use crate::report::{CapacityReport, FailedMember, Report, format_time};

impl CapacityReport {
    pub(crate) fn render(&self, out: &mut String) {
        let _ = writeln!(out, "\n== Capacity ==");
        let _ = writeln!(
            out,
            "{:<20} {:<12} {:<24} {:>11} {:>9} {:>8} {:>9} {:>9}  ending",
            "Group", "Phase", "Model", "Concurrency", "Max QPS", "p99 ms", "target ms", "Safe QPS"
        );
        for r in &self.results {
            let ending = r
                .ending
                .map_or("running", crate::capacity::controller::Ending::as_str);
            let concurrency = r
                .concurrency
                .map_or_else(|| "-".to_string(), |c| c.to_string());
            // A spike has no safe rate of its own (its row is what got through during it).
            let safe = match r.target_rps {
                Some(_) => "-".to_string(),
                None => format!("{:.1}", r.safe_rate_qps),
            };
            let _ = writeln!(
                out,
                "{:<20} {:<12} {:<24} {:>11} {:>9.1} {:>8.2} {:>9.2} {:>9}  {}",
                r.group,
                r.phase,
                r.model,
                concurrency,
                r.max_qps,
                r.p99_ms,
                r.target_p99_ms,
                safe,
                ending
            );
        }
        for p in &self.phases {
            if let Some(spike) = &p.spike {
                render_spike(out, &p.group, spike);
                continue;
            }
            let _ = writeln!(
                out,
                "controller {}/{}{} ({} checks): concurrency → p99 ms per check",
                p.group,
                p.key,
                p.mix
                    .as_ref()
                    .map(|m| format!(" (mix {m})"))
                    .unwrap_or_default(),
                p.checks.len()
            );
            // Each part of the search (slow start, bisect, AIMD) is named where it begins.
            let steps: Vec<String> = p
                .checks
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let begins = i == 0 || p.checks[i - 1].search_step != c.search_step;
                    format!(
                        "{}{}→{:.1}",
                        if begins {
                            format!("[{}] ", c.search_step.as_str())
                        } else {
                            String::new()
                        },
                        c.concurrency,
                        c.window.p99_us as f64 / 1000.0
                    )
                })
                .collect();
            for chunk in steps.chunks(12) {
                let _ = writeln!(out, "  {}", chunk.join("  "));
            }
            if let Some(a) = &p.autoscaler {
                out.push_str(&autoscaler(a));
            }
        }
    }
}

/// A sweep: its variants by capacity, the Pareto front, and the best with its config change.
fn render_sweep(out: &mut String, sweep: &crate::capacity::sweep::SweepAnswer) {
    use crate::capacity::sweep::VariantStatus;
    let _ = writeln!(
        out,
        "\n== Sweep of server group {} ({}: {} of {} variants run, target p99 {} ms) ==",
        sweep.server_group, sweep.search, sweep.measured, sweep.grid_size, sweep.target_p99_ms
    );
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>17} {:>8} {:>11} {:>9} {:>9} {:>6}  {:<14} parameters",
        "#",
        "Max QPS",
        "95% interval",
        "p99 ms",
        "Concurrency",
        "Instances",
        "Mem MiB",
        "CPU %",
        "ending"
    );
    let dash = || "-".to_string();
    for v in &sweep.variants {
        let ending = match v.status {
            VariantStatus::Measured => v.ending.clone().unwrap_or_else(dash),
            VariantStatus::Failed => "FAILED".into(),
            VariantStatus::Skipped => "skipped".into(),
            VariantStatus::Excluded => "EXCLUDED".into(),
        };
        let front = if sweep.pareto.contains(&v.index) {
            "*"
        } else {
            " "
        };
        let _ = writeln!(
            out,
            "{:>3}{front} {:>9} {:>17} {:>8} {:>11} {:>9} {:>9} {:>6}  {:<14} {}",
            v.index,
            v.max_qps.map_or_else(dash, |q| format!("{q:.1}")),
            v.qps_interval
                .map_or_else(dash, |(lo, hi)| format!("[{lo:.1}, {hi:.1}]")),
            v.p99_ms.map_or_else(dash, |p| format!("{p:.2}")),
            v.concurrency.map_or_else(dash, |c| c.to_string()),
            v.model_instances.map_or_else(dash, |c| c.to_string()),
            v.server_memory_bytes
                .map_or_else(dash, |b| format!("{:.0}", b / 1048576.0)),
            v.server_cpu_utilization
                .map_or_else(dash, |c| format!("{:.0}", c * 100.0)),
            ending,
            sweep.variant_label(v)
        );
        if let Some(why) = &v.why {
            let _ = writeln!(out, "       {why}");
        }
    }
    let _ = writeln!(
        out,
        "* on the Pareto front: no other variant serves as much at no more cost (instances) and memory"
    );
    render_sweep_best(out, sweep);
}

/// The sweep's best variant: its capacity, the variants tied with it, and its config change.
fn render_sweep_best(out: &mut String, sweep: &crate::capacity::sweep::SweepAnswer) {
    use crate::capacity::sweep::{VariantStatus, parameters_label};
    match &sweep.best {
        None if sweep
            .variants
            .iter()
            .any(|v| v.status == VariantStatus::Excluded) =>
        {
            let _ = writeln!(
                out,
                "Best: none (no variant met the target and the constraints)"
            );
        }
        None => {
            let _ = writeln!(out, "Best: none (no variant met the target)");
        }
        Some(b) => {
            let _ = writeln!(
                out,
                "Best: variant {} ({}): {:.1} QPS within the target{}",
                b.index,
                sweep
                    .variants
                    .iter()
                    .find(|v| v.index == b.index)
                    .map_or_else(
                        || parameters_label(&b.parameters),
                        |v| sweep.variant_label(v)
                    ),
                b.max_qps,
                match (b.confirmed_qps, &b.confirm_run_id) {
                    (Some(q), _) => format!("; measured again: {q:.1} QPS"),
                    (None, Some(_)) => "; measured again: no answer".into(),
                    (None, None) => String::new(),
                }
            );
            if !sweep.tied_with_best.is_empty() {
                let tied: Vec<String> =
                    sweep.tied_with_best.iter().map(|i| i.to_string()).collect();
                let _ = writeln!(
                    out,
                    "  tied with variant{} {}: their capacities' 95% intervals overlap the best's, \
                     so this sweep does not tell them apart (~ no significant difference); \
                     choose among them by cost",
                    if tied.len() > 1 { "s" } else { "" },
                    tied.join(", ")
                );
            }
            if let Some(repo) = &b.model_repository {
                let _ = writeln!(out, "  model repository: {repo}");
            }
            for (model, diff) in &b.config_diffs {
                let _ = writeln!(out, "  {model}/config.pbtxt against the original:");
                for line in diff.lines().filter(|l| !l.starts_with("  ")) {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
}

/// A spike phase: the jump, what got through, and the recovery; then its windows.
fn render_spike(out: &mut String, group: &str, s: &crate::capacity::phase::SpikeRecord) {
    let r = &s.result;
    let baseline = match (r.baseline_qps, r.baseline_p99_ms) {
        (Some(q), Some(p)) => format!("{q:.1} QPS, p99 {p:.2} ms"),
        _ => "not measured".into(),
    };
    let recovery = match (r.recovered, r.time_to_recover_s) {
        (Some(true), Some(t)) => format!("recovered within {t:.1} s"),
        (Some(false), _) => "did not recover".into(),
        _ => "still running".into(),
    };
    let _ = writeln!(
        out,
        "spike {group}: from concurrency {} ({baseline}) to {:.1} requests/s open loop: sent {}, answered {}, error rate {:.2}%, achieved {:.1} QPS, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {recovery}",
        r.from_concurrency,
        r.target_rps,
        r.sent,
        r.answered,
        r.error_rate * 100.0,
        r.achieved_qps,
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
    );
    let steps: Vec<String> = s
        .trace
        .iter()
        .map(|c| {
            let stage = match c.stage {
                crate::capacity::spike::SpikeStage::Baseline => "base",
                crate::capacity::spike::SpikeStage::Spiking => "spike",
                crate::capacity::spike::SpikeStage::Recovering => "after",
            };
            format!(
                "{stage} {:.0}/s p99 {:.1}",
                c.window.qps,
                c.window.p99_us as f64 / 1000.0
            )
        })
        .collect();
    for chunk in steps.chunks(6) {
        let _ = writeln!(out, "  {}", chunk.join("  "));
    }
}

/// Averages consecutive points down to at most `n`.
fn downsample(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if points.len() <= n {
        return points.to_vec();
    }
    let chunk = points.len().div_ceil(n);
    points
        .chunks(chunk)
        .map(|c| {
            let k = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / k,
                c.iter().map(|p| p.1).sum::<f64>() / k,
            )
        })
        .collect()
}

/// A series' first, last and largest values (0 for an empty one; values are not negative).
fn first_last_max(v: &[f64]) -> (f64, f64, f64) {
    (
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
        v.iter().copied().fold(0.0, f64::max),
    )
}

pub fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let pts: Vec<f64> = downsample(&values.iter().map(|v| (0.0, *v)).collect::<Vec<_>>(), width)
        .into_iter()
        .map(|p| p.1)
        .collect();
    let max = pts.iter().cloned().fold(0.0, f64::max);
    pts.iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

impl Report {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let took = self
            .finished_at_ms
            .map(|f| format!("{:.1} s", (f - self.started_at_ms) as f64 / 1000.0))
            .unwrap_or_else(|| "still running".into());
        if let Some(sweep) = &self.sweep {
            self.render_sweep_run(&mut out, sweep, &took);
            return out;
        }
        let _ = writeln!(
            out,
            "Run {} ({} launcher): {}\nMatrix run name: {}; took {}; load phase {}\n",
            self.run_id,
            self.launcher,
            self.verdict,
            self.name,
            took,
            self.load_phase()
        );
        if let Some(why) = &self.incomplete {
            let _ = writeln!(out, "== INCOMPLETE REPORT ==\n{why}\n");
        }
        self.render_root_cause(&mut out);
        if !self.slo.is_empty() {
            let _ = writeln!(out, "== SLO ==");
            for o in &self.slo {
                let _ = writeln!(out, "{}", o.line());
            }
            out.push('\n');
        }
        self.render_baseline(&mut out);
        self.render_change_points(&mut out);
        if let Some(capacity) = &self.capacity {
            capacity.render(&mut out);
            out.push('\n');
        }
        self.render_tables(&mut out);
        self.timeline.render(&mut out);
        self.render_reconciliation(&mut out);
        self.render_workers(&mut out);
        self.render_servers(&mut out);
        for (server, summary) in &self.traces {
            let _ = writeln!(out, "\n== Traces of {server} (Triton, TIMESTAMPS) ==");
            out.push_str(&summary.render());
        }
        if let Some(join) = &self.traced_tail {
            join.render(&mut out);
        }
        for (server, models) in &self.server_metrics {
            let _ = writeln!(
                out,
                "\n== Server-side metrics of {server} (Triton /metrics) =="
            );
            out.push_str(&triton_metrics::render(models));
        }
        if !self.faults.is_empty() {
            render_faults(&mut out, &self.faults);
        }
        self.render_failures(&mut out);
        for m in &self.failed_members {
            render_failed_member(&mut out, m);
        }
        out
    }

    /// The report of a sweep's own run: its answer, and where its variants' reports are.
    fn render_sweep_run(
        &self,
        out: &mut String,
        sweep: &crate::capacity::sweep::SweepAnswer,
        took: &str,
    ) {
        // A sweep's own run drives no load: its variants' runs do, each with its report.
        let _ = writeln!(
            out,
            "Sweep {} ({} launcher): {}\nMatrix run name: {}; took {}",
            self.run_id, self.launcher, self.verdict, self.name, took
        );
        render_sweep(out, sweep);
        let _ = writeln!(
            out,
            "\nEach variant's capacity run has its own report: variants/v<N>/report.txt; \
             `driver report --run {}-v<N> --database-url URL` rebuilds it from the sweep's \
             store (locally sqlite://<this directory>/store.sqlite).",
            self.run_id
        );
    }

    /// The root cause, its signature and what it caused (nothing when the run has none).
    fn render_root_cause(&self, out: &mut String) {
        if let Some(root) = &self.analysis.root_cause {
            // A client's failure that is the server's reads as the server's bug, with the
            // client named as where it was seen.
            let bug = super::server_bug(self)
                .map(|server| format!("SERVER BUG on {server}, seen by "))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "== Root cause ==\n{bug}{} {} at {}: {}",
                root.role,
                root.member_id,
                format_time(root.at_ms),
                root.reason
            );
            if let Some(s) = &root.signature {
                let _ = writeln!(
                    out,
                    "signature {} ({}, {}): {}",
                    s.signature,
                    s.status.as_str(),
                    s.class,
                    s.evidence
                );
                if let Some(example) = self
                    .signatures
                    .iter()
                    .find(|j| j.signature == s.signature)
                    .map(|j| &j.example)
                    && let Some(forensics) = &example.forensics
                {
                    render_forensics(out, example, forensics);
                }
            } else if let (Some(class), Some(evidence)) = (root.class, &root.evidence) {
                let _ = writeln!(out, "class {class}: {evidence}");
            }
            if !root.caused_members.is_empty() {
                let _ = writeln!(
                    out,
                    "caused the failure of: {}",
                    root.caused_members.join(", ")
                );
            }
            if !self.analysis.independent_members.is_empty() {
                let _ = writeln!(
                    out,
                    "also failed (independently): {}",
                    self.analysis.independent_members.join(", ")
                );
            }
            let _ = writeln!(
                out,
                "failure records: {} caused by it, {} during the driver's stop, {} independent\n",
                self.analysis.caused_failures,
                self.analysis.shutdown_failures,
                self.analysis.independent_failures
            );
        }
    }

    /// The change against the baseline run, or why regressions were not compared.
    fn render_baseline(&self, out: &mut String) {
        match &self.baseline {
            Some(b) if b.baseline_run.is_empty() => {
                let _ = writeln!(out, "Regressions not compared: {}\n", b.basis());
            }
            Some(b) => {
                let _ = writeln!(out, "== Change vs {} ==", b.basis());
                for change in &b.version_changes {
                    let _ = writeln!(out, "changed since: {change}");
                }
                out.push_str(&call_lines(&b.changes));
                let _ = writeln!(
                    out,
                    "{} (of {} metrics compared){}",
                    b.tally(),
                    b.compared,
                    if b.fail && !b.regressions.is_empty() {
                        " (regression.fail: the run fails)"
                    } else {
                        ""
                    }
                );
                if b.called(Call::Provisional).next().is_some() {
                    let _ = writeln!(
                        out,
                        "provisional: beyond the typical spread of two identical runs, inside the widest \
                         one a single baseline run cannot rule out; for information"
                    );
                }
                out.push_str(&not_judged_lines(&b.not_judged));
                out.push('\n');
            }
            None if self.finished_at_ms.is_some() => {
                let _ = writeln!(
                    out,
                    "No baseline: no earlier passing or pinned run of this matrix ({}); regressions not compared\n",
                    self.name
                );
            }
            None => {}
        }
    }

    /// The change points over the matrix's last runs, when they were looked for.
    fn render_change_points(&self, out: &mut String) {
        if let Some(points) = &self.change_points {
            let _ = writeln!(
                out,
                "== Change points over the last {} run(s) of this matrix ({}) ==",
                points.runs.len(),
                points.method()
            );
            for line in points.lines() {
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
    }

    /// The L0 tables: scenarios (all workers, then per client group when several) and models.
    fn render_tables(&self, out: &mut String) {
        let _ = writeln!(out, "== Scenarios, all workers ==");
        out.push_str(&self.tables.0.render(self.load_seconds));
        if self.tables.1.len() > 1 {
            for (group, table) in &self.tables.1 {
                let _ = writeln!(out, "\n== Scenarios, client group {group} ==");
                out.push_str(&table.render(self.load_seconds));
            }
        }
        if let Some(grid) = &self.grid {
            render_grid(out, grid);
        }
        if !self.model_table.is_empty() {
            let _ = writeln!(out, "\n== Models, all workers ==");
            out.push_str(&self.model_table.render(self.load_seconds));
        }
    }

    /// The servers' successes against the workers' OK answers, per model.
    fn render_reconciliation(&self, out: &mut String) {
        if !self.reconciliation.is_empty() {
            let _ = writeln!(
                out,
                "\n== Servers vs workers (successes on the servers, OK answers on the workers) =="
            );
            let _ = writeln!(
                out,
                "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8}  verdict",
                "Model", "server ok", "worker ok", "not ok", "unseen", "gap"
            );
            for r in &self.reconciliation {
                let _ = writeln!(
                    out,
                    "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8}  {:?}: {}",
                    r.model,
                    r.server_success,
                    r.client_ok,
                    r.client_not_ok,
                    r.client_unseen,
                    r.gap,
                    r.verdict,
                    r.explanation
                );
            }
        }
    }

    /// Each worker's QPS over time, then its own memory.
    fn render_workers(&self, out: &mut String) {
        if !self.workers.is_empty() {
            let _ = writeln!(out, "\n== QPS per worker over time ==");
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:>9} {:>9} {:>9}  over time",
                "Worker", "Group", "min", "avg", "max"
            );
            for w in &self.workers {
                let values: Vec<f64> = w.series.iter().map(|p| p.1).collect();
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:>9.1} {:>9.1} {:>9.1}  {}",
                    w.member_id,
                    w.group,
                    w.min,
                    w.avg,
                    w.max,
                    sparkline(&values, 40)
                );
            }
            // The workers' own memory (issue 33): judged like a server's, so a leak in the
            // load generator is not mistaken for the server's.
            for w in self.workers.iter().filter(|w| !w.rss.is_empty()) {
                let mib: Vec<f64> = w.rss.iter().map(|p| p.1 / MIB).collect();
                let (first, last, max) = first_last_max(&mib);
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} RSS MiB {first:.1} → {last:.1} (max {max:.1}, growth {:+.1})  {}",
                    w.member_id,
                    w.group,
                    w.memory_growth_bytes.unwrap_or(0.0) / MIB,
                    sparkline(&mib, 40)
                );
                if let Some(finding) = &w.memory_finding {
                    let _ = writeln!(out, "FINDING {} (worker): {finding}", w.member_id);
                }
            }
        }
    }

    /// The servers' versions and addresses, when one was external or reported its version.
    fn render_servers(&self, out: &mut String) {
        // Which Triton served, and where the servers not launched were and whether their
        // metrics are below (a launched server's whereabouts are in its events and failure
        // block).
        if self
            .servers
            .iter()
            .any(|s| s.external || s.version.is_some())
        {
            let _ = writeln!(out, "\n== Servers ==");
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:<9} {:<16} {:<48} metrics",
                "Server", "Group", "Launched", "Version", "Address"
            );
            for s in &self.servers {
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:<9} {:<16} {:<48} {}",
                    s.member_id,
                    s.group,
                    if s.external { "external" } else { "yes" },
                    s.version.as_deref().unwrap_or("-"),
                    s.address,
                    s.metrics
                );
            }
        }
    }

    /// The failure signatures, or (a run recorded before them) the first failures recorded.
    fn render_failures(&self, out: &mut String) {
        if !self.signatures.is_empty() {
            self.render_signatures(out);
        } else if !self.failures.is_empty() {
            let _ = writeln!(
                out,
                "\n== Failures (first {} of {}) ==",
                self.failures.len(),
                self.failure_count
            );
            for (i, (member, f)) in self.failures.iter().enumerate() {
                let _ = writeln!(out, "{member}: {f}");
                // The first few with their requests on the wire (report.json has them all).
                if i < FORENSICS_SHOWN
                    && let Some(forensics) = &f.forensics
                {
                    render_forensics(out, f, forensics);
                }
            }
        }
    }
}

/// The injected faults' timelines: injected, first client error, server back, each client's
/// first good answer, the recovery against what is allowed, and what was lost.
fn render_faults(out: &mut String, faults: &[crate::judge::faults::FaultOutcome]) {
    let failed = faults.iter().filter(|f| f.reached && !f.ok).count();
    let _ = writeln!(
        out,
        "\n== Injected faults ({} faults, {}) ==",
        faults.len(),
        if failed == 0 {
            "every one recovered in time".to_string()
        } else {
            format!("{failed} FAILED")
        }
    );
    let at = |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), format_time);
    for f in faults {
        let _ = writeln!(
            out,
            "{} {} {} of {}: {}\n  injected {}; first client error {}; {} {}; recovered {}\n  \
             lost {} tests ({} sequences cut){}",
            match (f.ok, f.reached) {
                (true, _) => "OK  ",
                (false, true) => "FAIL",
                (false, false) => "SKIP",
            },
            f.name,
            f.kind.as_str(),
            f.target,
            f.verdict,
            at(f.injected_at_ms),
            at(f.first_error_ms),
            if f.kind.probed() { "back" } else { "ended" },
            at(f.back_ms()),
            at(f.recovered_at_ms),
            f.lost_requests,
            f.sequences_cut,
            f.dropped_packets
                .map(|n| format!("; {n} packets dropped by its loss"))
                .unwrap_or_default()
        );
        for c in &f.clients {
            let _ = writeln!(
                out,
                "  {}: first error {}, first good answer {}{}, lost {}",
                c.member,
                at(c.first_error_ms),
                at(c.first_good_ms),
                if c.unaffected {
                    " (no interruption seen)"
                } else {
                    ""
                },
                c.lost_requests
            );
        }
    }
}

impl Report {
    /// The failures grouped by signature: per signature its status (new, recurring, known, …),
    /// class, count, when, who, the evidence and one example with its steps on the wire; then
    /// the known issues.
    fn render_signatures(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n== Failure signatures ({} signatures, {} failures) ==",
            self.signatures.len(),
            self.signatures.iter().map(|s| s.count).sum::<u64>()
        );
        if let Some(note) = &self.signature_history {
            let _ = writeln!(out, "({note})");
        }
        for s in &self.signatures {
            let status = match &s.known_issue {
                Some(id) => format!("KNOWN {id}"),
                None => s.status.as_str().to_uppercase(),
            };
            let history = s.history.map_or_else(
                || "no history".to_string(),
                |h| format!("seen in {} of the last {} runs", h.seen_in, h.of_last),
            );
            let _ = writeln!(
                out,
                "{status} {} x{} {} {}{} [{}]{}\n  {}\n  first {}, last {}; members {}; servers {}; {history}\n  class {}: {}",
                s.signature,
                s.count,
                s.scenario,
                if s.model.is_empty() { "" } else { "model " },
                s.model,
                s.error_kind,
                if s.fails.is_some() {
                    " FAILS THE RUN"
                } else {
                    ""
                },
                s.message,
                format_time(s.first_at_ms),
                format_time(s.last_at_ms),
                s.members.join(", "),
                s.servers.join(", "),
                s.class,
                s.evidence,
            );
            let _ = writeln!(out, "  example ({}): {}", s.example_member, s.example);
            if let Some(forensics) = &s.example.forensics {
                render_forensics(out, &s.example, forensics);
            }
        }
        if !self.known_issues.is_empty() {
            let _ = writeln!(out, "\n== Known issues ==");
            for k in &self.known_issues {
                let _ = writeln!(
                    out,
                    "{} {}: {} failure(s) matched; {}{}",
                    k.status.to_uppercase(),
                    k.id,
                    k.count,
                    k.reason,
                    k.link
                        .as_deref()
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default()
                );
            }
        }
    }
}

/// Failures shown in report.txt with their forensics.
const FORENSICS_SHOWN: usize = 5;

/// A failed test's requests on the wire and the previous use of its correlation id, indented
/// under its failure line.
fn render_forensics(
    out: &mut String,
    f: &FailureRecord,
    forensics: &stress_common::status::Forensics,
) {
    let clock = |us: i64| {
        let t = format_time(us.div_euclid(1000));
        // HH:MM:SS.mmm plus the µs.
        let time = t
            .split(' ')
            .nth(1)
            .unwrap_or(&t)
            .trim_end_matches('Z')
            .to_string();
        format!("{time}{:03}", us.rem_euclid(1000))
    };
    if let Some(p) = &forensics.previous_use {
        let _ = writeln!(
            out,
            "  previous use of its correlation id: {} on {} {}–{}, {}{}",
            p.scenario,
            if p.model.is_empty() { "?" } else { &p.model },
            clock(p.started_ms * 1000),
            clock(p.ended_ms * 1000),
            p.outcome,
            if p.left_open.is_empty() {
                String::new()
            } else {
                format!(", left a sequence open on {}", p.left_open.join(", "))
            }
        );
    } else if f.correlation_id.is_some() {
        let _ = writeln!(
            out,
            "  previous use of its correlation id: none by this worker"
        );
    }
    for (i, s) in forensics.steps.iter().enumerate() {
        let _ = writeln!(
            out,
            "  step {:>2} {:<9} sent {} answered {} ({:.3} ms) {} {}{} inputs {}: {}",
            i + 1,
            s.flags,
            clock(s.sent_us),
            clock(s.received_us),
            (s.received_us - s.sent_us) as f64 / 1000.0,
            s.server,
            s.model,
            s.correlation_id
                .map(|c| format!(" id {c}"))
                .unwrap_or_default(),
            s.input_digest,
            s.outcome
        );
    }
    if forensics.steps_left_out > 0 {
        let _ = writeln!(
            out,
            "  ... {} more steps not kept",
            forensics.steps_left_out
        );
    }
    if !forensics.server_log.is_empty() {
        let _ = writeln!(out, "  the server's log around it:");
    }
    for line in &forensics.server_log {
        let _ = writeln!(out, "  > {line}");
    }
}

/// A failed member's block: heading and reason, how it ended, where it ran, its pod, how to
/// start it again, its containers and events, its log tails, and the kubectl commands to dig
/// further. No blank line inside: a block ends at the next one.
fn render_failed_member(out: &mut String, m: &FailedMember) {
    let _ = writeln!(
        out,
        "\n== FAILED {} {} (group {}) at {} ==\nreason: {}",
        m.role,
        m.member_id,
        m.group,
        format_time(m.failed_at_ms),
        m.reason
    );
    let d = &m.diagnostics;
    field(out, "exit", d.exit.as_ref().map(|e| &e.description));
    if let Some(p) = &d.pod {
        field(out, "namespace", Some(&p.namespace));
        field(out, "pod", Some(&p.name));
        field(out, "phase", p.phase.as_ref());
        field(out, "status_reason", p.status_reason.as_ref());
        field(out, "node", p.node.as_ref());
        field(out, "pod_ip", p.ip.as_ref());
        field(out, "restarts", Some(p.restarts));
    } else {
        field(out, "where", d.location.as_ref());
    }
    field(out, "log_file", d.log_file.as_ref());
    field(out, "reproduce", d.command.as_ref());
    let no_pod = crate::launcher::diagnostics::PodDiagnostics::default();
    let pod = d.pod.as_ref().unwrap_or(&no_pod);
    list(out, "containers", "  - ", &pod.containers);
    list(out, "events", "  - ", &pod.events);
    list(out, "log tail", "  | ", &d.log_tail);
    list(
        out,
        "log tail of the previous container",
        "  | ",
        &pod.previous_log_tail,
    );
    list(out, "dig further", "  $ ", &pod.kubectl);
}

/// `key: value`, when there is a value.
fn field(out: &mut String, key: &str, value: Option<impl std::fmt::Display>) {
    if let Some(v) = value {
        let _ = writeln!(out, "{key}: {v}");
    }
}

/// `title:` and one line per item, unless there are none.
fn list(out: &mut String, title: &str, bullet: &str, items: &[impl std::fmt::Display]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    for item in items {
        let _ = writeln!(out, "{bullet}{item}");
    }
}

impl Timeline {
    /// report.txt's "over time" section: per scenario its p99 over time, per server its memory
    /// (and growth) and per model requests/s, queue and compute time per request over time.
    pub fn render(&self, out: &mut String) {
        if self.latency.is_empty() && self.servers.iter().all(|s| s.points.is_empty()) {
            return;
        }
        let _ = writeln!(
            out,
            "\n== Over time (a point per {:.0} s; first, last, max, then the trend) ==",
            self.interval_s
        );
        for s in self.latency.iter().filter(|s| s.model.is_none()) {
            let p99: Vec<f64> = s.points.iter().map(|p| p.p99_ms).collect();
            let (first, last, max) = first_last_max(&p99);
            let _ = writeln!(
                out,
                "{:<28} {:<10} {first:>9.2} {last:>9.2} {max:>9.2}  {}",
                s.scenario,
                "p99 ms",
                sparkline(&p99, 40)
            );
        }
        for server in &self.servers {
            let rss: Vec<f64> = server.points.iter().filter_map(|p| p.rss_bytes).collect();
            if !rss.is_empty() {
                let mib: Vec<f64> = rss.iter().map(|b| b / MIB).collect();
                let (first, last, max) = first_last_max(&mib);
                let _ = writeln!(
                    out,
                    "{:<28} {:<10} {first:>9.1} {last:>9.1} {max:>9.1}  {}  growth {:+.1} MiB",
                    server.member_id,
                    "RSS MiB",
                    sparkline(&mib, 40),
                    server.memory_growth_bytes.unwrap_or(0.0) / MIB
                );
                if let Some(finding) = &server.memory_finding {
                    let _ = writeln!(out, "FINDING {}: {finding}", server.member_id);
                }
            }
            for m in &server.models {
                let label = format!("{} {}", server.member_id, m.model);
                let rate: Vec<f64> = m.points.iter().map(|p| p.success_per_s).collect();
                let queue: Vec<f64> = m.points.iter().map(|p| p.queue_us).collect();
                let compute: Vec<f64> = m
                    .points
                    .iter()
                    .map(|p| p.compute_input_us + p.compute_infer_us + p.compute_output_us)
                    .collect();
                for (what, v) in [
                    ("ok/s", &rate),
                    ("queue µs", &queue),
                    ("compute µs", &compute),
                ] {
                    let (first, last, max) = first_last_max(v);
                    let _ = writeln!(
                        out,
                        "{label:<28} {what:<10} {first:>9.1} {last:>9.1} {max:>9.1}  {}",
                        sparkline(v, 40)
                    );
                }
            }
        }
    }
}

/// A part's name in a column's head.
pub fn part_head(part: Part) -> &'static str {
    match part {
        Part::TransportIn => "to server",
        Part::TransportOut => "to client",
        Part::ComputeInput => "input",
        Part::ComputeInfer => "infer",
        Part::ComputeOutput => "output",
        other => other.as_str(),
    }
}

/// The percentile a tail of `share` is above: `p99` for 0.01.
pub fn tail_percentile(share: f64) -> String {
    format!("p{}", number((1.0 - share) * 100.0))
}

/// The servers' clock offsets from the clients', on one line.
pub fn clock_line(clocks: &[ClockOffset]) -> String {
    let each: Vec<String> = clocks
        .iter()
        .map(|c| {
            format!(
                "{} {:+.3} ms ± {:.3} ms ({} requests{})",
                c.server,
                c.offset_ns as f64 / 1e6,
                c.bound_ns as f64 / 1e6,
                c.requests,
                if c.consistent {
                    ""
                } else {
                    ", which disagree: their median"
                }
            )
        })
        .collect();
    format!("server clocks (server − client): {}", each.join("; "))
}

impl TraceJoin {
    /// Where the tail's time went: a row per scenario and model with each part's share, the
    /// servers' clock offsets, then each one's slowest requests as waterfalls in ms.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n== Where the tail's time went (traced requests above {}) ==",
            tail_percentile(self.tail_share)
        );
        if !self.server_spans_received {
            let _ = writeln!(
                out,
                "server spans not received: no span of the tail's traces came from a server, \
                 so their time is not split{}",
                if self.receiver.is_none() {
                    " (the run had no OTLP receiver: its launcher does not point servers at one)"
                } else {
                    ""
                }
            );
        }
        if let Some(r) = &self.receiver {
            let _ = writeln!(out, "{}", r.line());
        }
        let _ = write!(
            out,
            "{:<20} {:<24} {:>7} {:>5} {:>5} {:>8} {:>7}",
            "Scenario", "Model", "Traced", "Tail", "Split", "No spans", "Partial"
        );
        for part in Part::ALL {
            let _ = write!(out, " {:>9}", part_head(part));
        }
        let _ = writeln!(out, " {:>9}", "mean ms");
        for r in &self.rows {
            let _ = write!(
                out,
                "{:<20} {:<24} {:>7} {:>5} {:>5} {:>8} {:>7}",
                r.scenario, r.model, r.traced, r.tail, r.split, r.no_spans, r.partial
            );
            for part in Part::ALL {
                let share = r
                    .shares
                    .map_or_else(|| "-".into(), |s| format!("{:.1}%", s.get(part) * 100.0));
                let _ = write!(out, " {share:>9}");
            }
            let mean = r
                .mean_total_us
                .map_or_else(|| "-".into(), |us| format!("{:.2}", us / 1e3));
            let _ = writeln!(out, " {mean:>9}");
        }
        if !self.clocks.is_empty() {
            let _ = writeln!(out, "{}", clock_line(&self.clocks));
        }
        for r in self.rows.iter().filter(|r| !r.slowest.is_empty()) {
            render_waterfalls(out, r);
        }
    }
}

/// A row's slowest requests, a line each: the total in ms and its parts in order.
fn render_waterfalls(out: &mut String, r: &TailRow) {
    let heads: Vec<&str> = Part::ALL.iter().map(|&p| part_head(p)).collect();
    let _ = writeln!(
        out,
        "slowest of {}/{} (ms from the intended send = {}):",
        r.scenario,
        r.model,
        heads.join(" + ")
    );
    for w in &r.slowest {
        let parts = match &w.unsplit {
            Some(why) => format!("({why})"),
            None => {
                let each: Vec<String> = Part::ALL
                    .iter()
                    .map(|&p| format!("{:.2}", w.part_us(p) / 1e3))
                    .collect();
                format!("= {}", each.join(" + "))
            }
        };
        let _ = writeln!(
            out,
            "  {} {:<16} {:<6} {:>10.2} {parts}",
            w.trace_id,
            w.server,
            if w.ok { "ok" } else { "FAILED" },
            w.total_us / 1e3
        );
    }
}

impl TraceSummary {
    /// A table per model and protocol: each stage's average and p50/p99 in µs.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{} (version {}) over {}: {} traces",
                r.model,
                if r.version.is_empty() {
                    "?"
                } else {
                    &r.version
                },
                r.protocol,
                r.traces
            );
            let _ = writeln!(
                out,
                "  {:<15} {:>8} {:>10} {:>10} {:>10} {:>10}",
                "stage", "count", "avg µs", "p50 µs", "p90 µs", "p99 µs"
            );
            for (stage, _) in STAGES {
                if let Some(s) = r.stages.get(stage) {
                    let _ = writeln!(
                        out,
                        "  {:<15} {:>8} {:>10.1} {:>10} {:>10} {:>10}",
                        stage, s.count, s.avg_us, s.p50_us, s.p90_us, s.p99_us
                    );
                }
            }
        }
        if self.without_model > 0 {
            let _ = writeln!(
                out,
                "{} traces without a model (cut off, or frontend only) not counted",
                self.without_model
            );
        }
        if self.rows.is_empty() && self.without_model == 0 {
            out.push_str("no traces\n");
        }
        out
    }
}

/// report.txt's lines for one phase's autoscaler section.
pub fn autoscaler(a: &Autoscaler) -> String {
    let mut out = format!(
        "  autoscaler signals at the edge window (the highest concurrency within the target) (source: {}; thresholds = observed x hpa_margin {}):\n",
        a.source,
        number(a.hpa_margin)
    );
    out.push_str(&format!(
        "    {:<24} {:>12} {:>12} {:>12} {:>9} {}\n",
        "signal", "lowest load", "observed", "threshold", "fires at", ""
    ));
    for s in &a.signals {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), number);
        out.push_str(&format!(
            "    {:<24} {:>12} {:>12} {:>12} {:>9} {}\n",
            s.signal.as_str(),
            opt(s.baseline),
            number(s.observed),
            opt(s.threshold),
            s.fires_at_concurrency
                .map_or("-".to_string(), |c| format!("c={c}")),
            if s.primary {
                "PRIMARY (first to fire)"
            } else if s.threshold.is_some() && !s.load_sensitive {
                "(not load-sensitive)"
            } else {
                ""
            }
        ));
    }
    for s in &a.servers {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        out.push_str(&format!(
            "    {} / {}: {} requests, queue {} us, compute {} us, request {} us, pending {:.2}\n",
            s.server,
            s.model,
            s.requests,
            opt(s.queue_us_per_request),
            opt(s.compute_us_per_request),
            opt(s.request_us_per_request),
            s.pending_requests
        ));
    }
    if let Some(why) = &a.why_not {
        out.push_str(&format!("  no autoscaler thresholds recommended: {why}\n"));
    }
    for w in &a.warnings {
        out.push_str(&format!("  WARNING: {w}\n"));
    }
    if let Some(keda) = &a.keda {
        out.push_str("  KEDA ScaledObject:\n");
        for line in keda.lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

/// `driver runs`: a line per finished run, newest first — what a nightly's history looks like
/// at a glance: the verdict, the load it carried, its failure signatures by status (new ones are
/// what to look at), its regressions and, for a failed run, who failed and why.
pub fn run_list(runs: &[crate::report::summary::RunSummary]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str("no finished run found\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<44} {:<24} {:<7} {:>9} {:>9} {:>9}  {:<17} {:>4}  root cause",
        "Run", "Started", "Verdict", "Requests", "QPS", "p99 ms", "signatures n/r/k", "regr"
    );
    for r in runs {
        let _ = writeln!(
            out,
            "{:<44} {:<24} {:<7} {:>9} {:>9.1} {:>9.2}  {:<17} {:>4}  {}",
            r.run_id,
            format_time(r.started_at_ms),
            r.verdict,
            r.requests,
            r.qps,
            r.p99_ms,
            format!(
                "{}/{}/{}",
                r.signatures_new, r.signatures_recurring, r.signatures_known
            ),
            r.regressions,
            r.root_cause.as_deref().unwrap_or("-")
        );
    }
    out
}

/// A line per change called, regressions first: `REGRESSION p99_ms Load: slower by …`.
fn call_lines(changes: &[crate::judge::change::Finding]) -> String {
    let mut out = String::new();
    for (call, word) in [
        (Call::Regression, "REGRESSION"),
        (Call::Improvement, "IMPROVED"),
        (Call::Provisional, "provisional"),
    ] {
        for f in changes.iter().filter(|f| f.call == call) {
            let rank = f
                .rank_p
                .map(|p| format!(", rank test p={p:.3}"))
                .unwrap_or_default();
            let _ = writeln!(out, "{word} {}{rank}", f.describe());
        }
    }
    out
}

fn not_judged_lines(not_judged: &[crate::judge::change::NotJudged]) -> String {
    not_judged
        .iter()
        .map(|n| format!("{}: {}\n", n.metric, n.why))
        .collect()
}

/// `driver compare`'s text: the calls, then the count of "~" metrics and those not judged.
pub fn judged(j: &crate::judge::change::Judged) -> String {
    let mut out = call_lines(&j.changes);
    let unchanged = j
        .changes
        .iter()
        .filter(|f| f.call == Call::NoChange)
        .count();
    let _ = match j.changes.len() {
        0 => writeln!(out, "no metric judged: nothing is said of a change"),
        n => writeln!(
            out,
            "{unchanged} of {n} metrics judged: ~ no significant change"
        ),
    };
    out.push_str(&not_judged_lines(&j.not_judged));
    out
}

/// The client × server grid: a row per client template, a column per server group.
pub fn grid(grid: &crate::report::grid::Grid) -> String {
    let mut out = String::new();
    render_grid(&mut out, grid);
    out
}

fn render_grid(out: &mut String, grid: &crate::report::grid::Grid) {
    let _ = writeln!(
        out,
        "\n== Clients x servers (verdict, QPS, p99; new signatures) =="
    );
    let mut head = format!("{:<24}", "client \\ server");
    for server in &grid.servers {
        let _ = write!(head, " {server:<34}");
    }
    let _ = writeln!(out, "{}", head.trim_end());
    for client in &grid.clients {
        let mut row = format!("{client:<24}");
        for server in &grid.servers {
            let cell = grid
                .cells
                .iter()
                .find(|c| c.client == *client && c.server == *server);
            let text = match cell {
                None => "-".to_string(),
                Some(c) => {
                    let p99 = c
                        .p99_us
                        .map_or("-".into(), |us| format!("{:.2} ms", us as f64 / 1000.0));
                    let new = match c.new_signatures.len() {
                        0 => String::new(),
                        n => format!("; {n} new"),
                    };
                    format!("{} {:.1}/s p99 {p99}{new}", c.verdict, c.qps)
                }
            };
            let _ = write!(row, " {text:<34}");
        }
        let _ = writeln!(out, "{}", row.trim_end());
    }
    // Which client programs ran, as they said (foreign clients), per row.
    for client in &grid.clients {
        let mut programs: Vec<&str> = grid
            .cells
            .iter()
            .filter(|c| c.client == *client)
            .flat_map(|c| c.programs.iter().map(String::as_str))
            .collect();
        programs.sort_unstable();
        programs.dedup();
        if !programs.is_empty() {
            let _ = writeln!(out, "  {client} ran {}", programs.join(", "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_lists_an_excluded_variant_with_why_and_names_no_best() {
        use crate::capacity::sweep::{SweepAnswer, VariantResult, VariantStatus};
        let why = "gpu_memory not measured: the servers exported no nv_gpu_memory_used_bytes";
        let answer = SweepAnswer {
            server_group: "triton".into(),
            search: "grid".into(),
            target_p99_ms: 125.0,
            grid_size: 1,
            measured: 1,
            variants: vec![VariantResult {
                index: 1,
                parameters: Default::default(),
                status: VariantStatus::Excluded,
                run_id: None,
                max_qps: Some(80.0),
                qps_interval: None,
                p99_ms: Some(100.0),
                concurrency: Some(4),
                ending: Some("converged".into()),
                model_instances: Some(4),
                gpus: 0,
                server_memory_bytes: None,
                gpu_memory_bytes: None,
                server_cpu_utilization: None,
                server_versions: Vec::new(),
                why: Some(why.into()),
            }],
            pareto: vec![],
            best: None,
            tied_with_best: Vec::new(),
        };
        let mut out = String::new();
        render_sweep(&mut out, &answer);
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("1 "))
            .unwrap();
        assert!(row.contains("80.0") && row.contains("EXCLUDED"), "{out}");
        assert!(out.contains(&format!("\n       {why}\n")), "{out}");
        assert!(
            out.contains("Best: none (no variant met the target and the constraints)"),
            "{out}"
        );

        // Measured, with an interval, and the best tied with another variant.
        let mut answer = answer;
        let best = &mut answer.variants[0];
        (best.status, best.why, best.qps_interval) =
            (VariantStatus::Measured, None, Some((74.0, 86.5)));
        answer.best = Some(crate::capacity::sweep::BestVariant {
            index: 1,
            parameters: Default::default(),
            max_qps: 80.0,
            confirmed_qps: None,
            confirm_run_id: None,
            configs: Default::default(),
            config_diffs: Default::default(),
            model_repository: None,
        });
        answer.tied_with_best = vec![3];
        let mut out = String::new();
        render_sweep(&mut out, &answer);
        assert!(out.contains("[74.0, 86.5]"), "{out}");
        assert!(
            out.contains("tied with variant 3: their capacities' 95% intervals overlap"),
            "{out}"
        );
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        assert_eq!(sparkline(&[], 40), "");
        assert_eq!(sparkline(&[0.0; 5], 40), "▁▁▁▁▁");
        let ramp: Vec<f64> = (0..8).map(f64::from).collect();
        assert_eq!(sparkline(&ramp, 40), "▁▂▃▄▅▆▇█");
        // Bar heights round to the nearest eighth: 1 of 2 is 3.5 eighths, the fifth bar.
        assert_eq!(sparkline(&[0.0, 1.0, 2.0], 40), "▁▅█");
        assert_eq!(sparkline(&[1.0, 1.0, 1.0, 100.0, 1.0, 1.0], 40), "▁▁▁█▁▁");
        // The scale runs from zero, not from the smallest value: 50 of 100 is half height.
        assert_eq!(sparkline(&[50.0, 100.0, 0.0], 40), "▅█▁");
    }

    #[test]
    fn sparklines_average_more_points_than_the_width() {
        // 16 values in 8 bars: pairs averaged (0.5, 2.5, .. 14.5), then scaled.
        let ramp: Vec<f64> = (0..16).map(f64::from).collect();
        assert_eq!(sparkline(&ramp, 8), "▁▂▃▄▅▆▇█");
        // A one-point spike is averaged with its neighbour, and still the top of the line.
        let mut spiky = vec![0.0; 40];
        spiky[10] = 80.0;
        assert_eq!(sparkline(&spiky, 20), "▁▁▁▁▁█▁▁▁▁▁▁▁▁▁▁▁▁▁▁");
        // 41 points in at most 40 bars: chunks of 2, 21 bars.
        assert_eq!(sparkline(&[3.0; 41], 40), "█".repeat(21));
    }

    #[test]
    fn downsampling_averages_consecutive_points() {
        let points = [(0.0, 0.0), (1.0, 2.0), (2.0, 4.0), (3.0, 6.0), (4.0, 8.0)];
        assert_eq!(downsample(&points, 5), points);
        assert_eq!(downsample(&points, 9), points);
        // Chunks of 3: the last one holds what is left.
        assert_eq!(downsample(&points, 2), [(1.0, 2.0), (3.5, 7.0)]);
        assert_eq!(downsample(&points, 1), [(2.0, 4.0)]);
        assert_eq!(downsample(&[(0.0, 1.0); 1000], 100), [(0.0, 1.0); 100]);
    }

    #[test]
    fn the_report_renders_thresholds_the_primary_and_the_snippet() {
        use crate::capacity::autoscale::tests::ramp;
        use crate::capacity::autoscale::{SignalValues, keda_scaled_object, recommend};
        use crate::capacity::controller::Ending;
        let r = recommend(&ramp(), Some((3000, 4000)), Some(Ending::Converged), 0.8);
        let a = Autoscaler {
            source: "direct".into(),
            hpa_margin: 0.8,
            keda: keda_scaled_object(&r, "triton", "http://p:9090", ""),
            signals: r.signals,
            direct: SignalValues::new(),
            servers: vec![],
            primary: r.primary,
            why_not: r.why_not,
            warnings: vec!["selector matched no series".into()],
        };
        let text = autoscaler(&a);
        let row = text
            .lines()
            .find(|l| l.contains("request_us_per_request"))
            .unwrap();
        assert!(row.contains("24000") && row.contains("PRIMARY"), "{text}");
        assert!(text.contains("(not load-sensitive)"), "{text}");
        assert!(
            text.contains("WARNING: selector matched no series"),
            "{text}"
        );
        assert!(text.contains("kind: ScaledObject"), "{text}");
        // Saved records round-trip (and records saved before autoscaling still parse: see
        // `capacity::phase`).
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            serde_json::from_value::<Autoscaler>(json.clone()).unwrap(),
            a
        );
        assert_eq!(json["primary"], "request_us_per_request");
    }
}
