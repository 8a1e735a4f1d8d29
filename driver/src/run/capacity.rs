//! Capacity mode's I/O in the run: windows in, targets out, phase records saved.

use super::STORE_CALL_LIMIT;
use crate::capacity::autoscale;
use crate::capacity::spike;
use crate::capacity::{controller, phase};
use crate::matrix::CapacityPhase;
use crate::plan::RunPlan;
use crate::plan::capacity as plan_capacity;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::millis;
use stress_common::status::LoadTarget;
use stress_common::store::{Store, within as bounded};

/// Capacity mode's I/O: every check interval reads the workers' counts, feeds each group's
/// window to its current phase's controller ([`capacity`] decides), writes the new per-worker
/// targets (concurrency and the phase's model mix) and saves the phase's record, so the report
/// (and a later `driver report`) has the trace. A group's phases run one after the other.
pub(super) struct CapacityRun {
    pub(super) groups: Vec<GroupControl>,
    pub(super) interval: Duration,
    pub(super) next_check: tokio::time::Instant,
    pub(super) started_ms: i64,
    /// The servers' /metrics (and Prometheus) at every check: autoscaler thresholds.
    pub(super) autoscale: autoscale::Collector,
}

pub(super) struct GroupControl {
    pub(super) group: String,
    pub(super) members: Vec<String>,
    pub(super) config: plan_capacity::ControllerConfig,
    pub(super) spike: Option<crate::matrix::SpikeSettings>,
    pub(super) phases: Vec<phase::PhaseSpec>,
    /// The phase running now (`phases.len()`: all done).
    pub(super) current: usize,
    pub(super) stage: Stage,
    pub(super) meter: controller::WindowMeter,
    /// The ended phases' answers (the spike jumps from one of them).
    pub(super) answers: Vec<(CapacityPhase, Option<u32>)>,
}

/// What runs a phase: the AIMD controller, or the spike.
pub(super) enum Stage {
    Aimd(controller::Controller),
    Spike(Box<spike::Spike>),
}

impl Stage {
    pub(super) fn load(&self) -> spike::GroupLoad {
        match self {
            Stage::Aimd(c) => spike::GroupLoad::closed(c.concurrency()),
            Stage::Spike(s) => s.load(),
        }
    }

    pub(super) fn check(&mut self, window: controller::Window, now_ms: i64) -> spike::GroupLoad {
        match self {
            Stage::Aimd(c) => spike::GroupLoad::closed(c.check(window)),
            Stage::Spike(s) => s.check(window, now_ms),
        }
    }

    pub(super) fn ended(&self) -> bool {
        match self {
            Stage::Aimd(c) => c.ended(),
            Stage::Spike(s) => s.ended(),
        }
    }

    pub(super) fn out_of_time(&mut self) {
        match self {
            Stage::Aimd(c) => c.out_of_time(),
            Stage::Spike(s) => s.out_of_time(),
        }
    }
}

impl GroupControl {
    pub(super) fn done(&self) -> bool {
        self.current >= self.phases.len()
    }

    /// The stage of phase `current`: a spike jumps from an earlier phase's answer; any other
    /// phase's controller starts at min_concurrency.
    pub(super) fn stage_for(&self) -> Stage {
        let spec = self.phases.get(self.current);
        match (spec.map(|p| p.phase), &self.spike) {
            (Some(CapacityPhase::Spike), Some(s)) => {
                Stage::Spike(Box::new(spike::Spike::new(spike::SpikeConfig {
                    target_rps: s.target_rps,
                    duration_ms: millis(s.duration),
                    recovery_timeout_ms: millis(s.recovery_timeout),
                    target_p99_us: self.config.target_p99_us,
                    tolerance: self.config.tolerance,
                    from_concurrency: spike::jump_from(&self.answers, self.config.min),
                })))
            }
            _ => Stage::Aimd(controller::Controller::new(self.config.clone())),
        }
    }

    /// The targets of the current phase for `load` (concurrency and a spike's rate split
    /// across the workers).
    pub(super) async fn write_targets(
        &self,
        store: &Store,
        run_id: &RunId,
        load: spike::GroupLoad,
    ) {
        let mix = self.phases.get(self.current).and_then(|p| p.mix.clone());
        let shares = plan_capacity::split(load.concurrency, self.members.len());
        let rate = load.rate.map(|r| r / self.members.len().max(1) as f64);
        for (member, share) in self.members.iter().zip(shares) {
            let target = LoadTarget {
                concurrency: share,
                mix: mix.clone(),
                rate,
                count_unanswered: load.count_unanswered,
            };
            if let Err(e) = bounded(
                STORE_CALL_LIMIT,
                store.set_load_target(run_id, &member.as_str().into(), &target),
            )
            .await
            {
                tracing::warn!("load target of {member} not written: {e}");
            }
        }
    }

    pub(super) fn record(&self, autoscale: &autoscale::Collector) -> Option<phase::PhaseRecord> {
        let spec = self.phases.get(self.current)?;
        Some(match &self.stage {
            Stage::Aimd(c) => {
                let mut record = phase::PhaseRecord::of(&self.group, spec, c);
                record.autoscaler = autoscale.autoscaler(&self.group, c);
                record
            }
            Stage::Spike(s) => phase::PhaseRecord::of_spike(&self.group, spec, s),
        })
    }

    /// Saves the current phase's record; returns its answer (the concurrency it found).
    pub(super) async fn save(
        &self,
        store: &Store,
        run_id: &RunId,
        autoscale: &autoscale::Collector,
    ) -> Option<u32> {
        let record = self.record(autoscale)?;
        let key = format!("{}/{}", self.group, record.key);
        if let Err(e) = bounded(STORE_CALL_LIMIT, store.save_document(run_id, &key, &record)).await
        {
            tracing::warn!(
                "capacity phase {}/{} not saved: {e}",
                self.group,
                record.key
            );
        }
        record.result.concurrency
    }
}

impl CapacityRun {
    /// None for a soak run.
    pub(super) fn new(plan: &RunPlan, started_ms: i64) -> Option<Self> {
        let settings = plan.capacity.as_ref()?;
        let groups = plan.client_groups();
        Some(CapacityRun {
            groups: plan
                .capacity_configs()
                .into_iter()
                .map(|(group, config)| {
                    let models = plan
                        .clients
                        .iter()
                        .find(|c| c.group == group)
                        .map(|c| c.template.models.clone())
                        .unwrap_or_default();
                    let mut g = GroupControl {
                        members: groups[&group].iter().map(|m| m.to_string()).collect(),
                        phases: phase::phases_for(settings, &models),
                        current: 0,
                        stage: Stage::Aimd(controller::Controller::new(config.clone())),
                        config,
                        spike: settings.spike.clone(),
                        meter: controller::WindowMeter::default(),
                        answers: Vec::new(),
                        group,
                    };
                    g.stage = g.stage_for();
                    g
                })
                .collect(),
            interval: settings.check_interval,
            next_check: tokio::time::Instant::now() + settings.check_interval,
            started_ms,
            autoscale: autoscale::Collector::default(),
        })
    }

    /// Before the workers start: the first phase's targets (its mix, min_concurrency).
    pub(super) async fn start(&self, store: &Store, run_id: &RunId) {
        for g in &self.groups {
            g.write_targets(store, run_id, g.stage.load()).await;
        }
    }

    pub(super) fn due(&self) -> bool {
        tokio::time::Instant::now() >= self.next_check
    }

    pub(super) fn all_ended(&self) -> bool {
        self.groups.iter().all(GroupControl::done)
    }

    pub(super) async fn check(&mut self, store: &Store, run_id: &RunId) {
        self.next_check = tokio::time::Instant::now() + self.interval;
        let counts = match bounded(STORE_CALL_LIMIT, store.model_counts(run_id)).await {
            Ok(c) => c,
            Err(e) => {
                // The next check reads again: the windows are measured from the counts.
                tracing::warn!("capacity check skipped: {e}");
                return;
            }
        };
        let now_ms = stress_common::now_ms();
        self.autoscale.scrape(now_ms).await;
        for g in &mut self.groups {
            if g.done() {
                continue;
            }
            let window = g.meter.window(&counts, &g.members, self.started_ms, now_ms);
            let before = g.stage.load();
            let next = g.stage.check(window, now_ms);
            tracing::info!(
                group = g.group,
                phase = g.phases[g.current].key,
                concurrency = before.concurrency,
                next = next.concurrency,
                rate = next.rate,
                "capacity check"
            );
            let answer = g.save(store, run_id, &self.autoscale).await;
            if g.stage.ended() {
                g.answers.push((g.phases[g.current].phase, answer));
                g.current += 1;
                g.stage = g.stage_for();
                if !g.done() {
                    g.write_targets(store, run_id, g.stage.load()).await;
                }
            } else if next != before {
                g.write_targets(store, run_id, next).await;
            }
            // A spike ends at its time, not at the next regular check.
            if let Stage::Spike(s) = &g.stage
                && let Some(at_ms) = s.next_change_ms()
            {
                let wait = Duration::from_millis(u64::try_from(at_ms - now_ms).unwrap_or(0));
                self.next_check = self.next_check.min(tokio::time::Instant::now() + wait);
            }
        }
    }

    /// The run's end: the phase still going is out of time (phases not started have no record).
    pub(super) async fn finish(&mut self, store: &Store, run_id: &RunId) {
        for g in &mut self.groups {
            if !g.done() {
                g.stage.out_of_time();
                g.save(store, run_id, &self.autoscale).await;
            }
        }
    }
}
