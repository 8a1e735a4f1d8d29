//! Which launched servers export OpenTelemetry spans to the run, and how: a server that a
//! tracing client group (`trace_share`) targets gets OpenTelemetry mode with rate 0 (Triton
//! traces only the requests that carry a W3C context, so the clients' share is the whole
//! tracing load), unless its template already says how it traces. A server whose `trace` is
//! OpenTelemetry without a `url` exports to the run's receiver too; the run fills in the URL
//! at launch ([`needs_receiver`] says when there is one to start).

use crate::matrix::{ClientMember, ServerMember, TraceLevel, TraceMode, TraceSettings};
use std::time::Duration;

/// How often a traced server exports its spans: the queue below holds what arrives between.
pub const EXPORT_DELAY: Duration = Duration::from_secs(1);

/// Triton's own batch-span-processor queue (and the least the run asks for).
pub const MIN_QUEUE: u32 = 2_048;

/// The most spans a server's queue holds (~1 KB each: 200 MB at worst).
pub const MAX_QUEUE: u32 = 200_000;

/// Requests per second assumed of a closed-loop worker, whose rate is not planned: above what
/// one worker sends here (~3,000/s with four streams on two cores).
const CLOSED_LOOP_RATE_GUESS: f64 = 5_000.0;

/// Spans Triton exports per traced request (InferRequest, the model's, compute).
const SPANS_PER_REQUEST: f64 = 3.0;

/// The servers with their tracing settled: each one a tracing group targets and whose
/// template has no `trace` exports OpenTelemetry spans (to the run's receiver).
pub fn export_spans(servers: Vec<ServerMember>, clients: &[ClientMember]) -> Vec<ServerMember> {
    servers
        .into_iter()
        .map(|mut s| {
            let traced_rate = traced_rate_to(&s, clients);
            if traced_rate > 0.0 && s.template.trace.is_none() {
                s.template.trace = Some(span_export(traced_rate));
            }
            s
        })
        .collect()
}

/// Whether a server's spans go to the run's receiver (OpenTelemetry mode, no URL of its own).
pub fn exports_to_run(s: &ServerMember) -> bool {
    s.template
        .trace
        .as_ref()
        .is_some_and(|t| t.mode == TraceMode::Opentelemetry && t.url.is_none())
}

/// Whether the run needs its OTLP receiver: a server exports to it, or a group traces
/// requests to servers it does not launch (their spans join when a collector forwards them).
pub fn needs_receiver(servers: &[ServerMember], clients: &[ClientMember]) -> bool {
    servers.iter().any(exports_to_run) || clients.iter().any(traces)
}

fn traces(c: &ClientMember) -> bool {
    c.template.trace_share.is_some_and(|s| s.get() > 0.0)
}

/// Traced requests per second the clients send to `server` (each client's rate split evenly
/// over its targets).
fn traced_rate_to(server: &ServerMember, clients: &[ClientMember]) -> f64 {
    clients
        .iter()
        .filter(|c| traces(c) && c.targets.contains(&server.name))
        .map(|c| {
            let share = c.template.trace_share.map_or(0.0, |s| s.get());
            let rate = c
                .template
                .load
                .as_ref()
                .and_then(|l| l.rate_schedule())
                .map_or(CLOSED_LOOP_RATE_GUESS, |s| s.mean_rate());
            share * rate / c.targets.len().max(1) as f64
        })
        .sum()
}

/// OpenTelemetry mode for `traced_rate` traced requests per second: a queue that holds four
/// export delays' worth of spans, so a slow export drops nothing.
fn span_export(traced_rate: f64) -> TraceSettings {
    let per_delay = traced_rate * SPANS_PER_REQUEST * EXPORT_DELAY.as_secs_f64();
    let queue = (4.0 * per_delay)
        .ceil()
        .clamp(MIN_QUEUE as f64, MAX_QUEUE as f64) as u32;
    TraceSettings {
        level: TraceLevel::Timestamps,
        rate: 0,
        count: None,
        log_frequency: None,
        mode: TraceMode::Opentelemetry,
        url: None,
        queue_size: Some(queue),
        export_delay: Some(EXPORT_DELAY),
        resource: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    fn matrix(trace_share: &str, load: &str, server_trace: &str) -> Matrix {
        let yaml = format!(
            "version: 1
run: {{ name: t, duration: 60s }}
server_templates:
  cpu:
    tritonserver: {{ binary: auto }}
    model_repositories: [models]
{server_trace}
server_groups:
  traced: {{ template: cpu, instances: 2 }}
  plain: {{ template: cpu, instances: 1 }}
client_templates:
  load:
    worker: {{ binary: auto }}
    protocol: grpc
    {trace_share}
    {load}
  untraced:
    worker: {{ binary: auto }}
    protocol: grpc
client_groups:
  clients: {{ template: load, instances: 2, target: traced }}
  others: {{ template: untraced, instances: 1, target: plain }}
"
        );
        crate::matrix::parse(&yaml, "t.yaml").expect("matrix")
    }

    fn settled(m: &Matrix) -> Vec<ServerMember> {
        export_spans(m.servers(), &m.clients())
    }

    #[test]
    fn only_servers_a_tracing_group_targets_export_spans() {
        let m = matrix("trace_share: 0.01", "", "");
        let servers = settled(&m);
        let exporting: Vec<&str> = servers
            .iter()
            .filter(|s| exports_to_run(s))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(exporting, ["traced-0", "traced-1"]);
        let t = servers[0].template.trace.as_ref().unwrap();
        assert_eq!((t.rate, t.level), (0, TraceLevel::Timestamps));
        assert_eq!(t.export_delay, Some(EXPORT_DELAY));
        assert!(needs_receiver(&servers, &m.clients()));
        let untraced = matrix("", "", "");
        let servers = settled(&untraced);
        assert!(servers.iter().all(|s| s.template.trace.is_none()));
        assert!(!needs_receiver(&servers, &untraced.clients()));
        let zero = matrix("trace_share: 0", "", "");
        assert!(!needs_receiver(&settled(&zero), &zero.clients()));
    }

    #[test]
    fn the_queue_holds_four_export_delays_of_the_traced_rate() {
        // Two clients at 10,000/s each over two servers, 10% traced: 1,000 traced/s per
        // server, 3,000 spans/s, 12,000 in four one-second delays.
        let m = matrix("trace_share: 0.1", "load: { rate: 10000 }", "");
        let t = settled(&m)[0].template.trace.clone().unwrap();
        assert_eq!(t.queue_size, Some(12_000));
        // A light share keeps Triton's own queue; a heavy one is capped.
        let light = matrix("trace_share: 0.001", "load: { rate: 100 }", "");
        assert_eq!(
            settled(&light)[0]
                .template
                .trace
                .as_ref()
                .unwrap()
                .queue_size,
            Some(MIN_QUEUE)
        );
        let heavy = matrix("trace_share: 1", "load: { rate: 1000000 }", "");
        assert_eq!(
            settled(&heavy)[0]
                .template
                .trace
                .as_ref()
                .unwrap()
                .queue_size,
            Some(MAX_QUEUE)
        );
    }

    #[test]
    fn a_template_that_says_how_it_traces_is_left_as_it_is() {
        let own = "    trace: { level: TIMESTAMPS, mode: opentelemetry, url: \"http://c:4318/v1/traces\" }";
        let m = matrix("trace_share: 0.01", "", own);
        let servers = settled(&m);
        assert_eq!(servers[0].template, m.servers()[0].template);
        assert!(!exports_to_run(&servers[0]));
        // Clients still trace, so the receiver runs (a collector may forward the spans).
        assert!(needs_receiver(&servers, &m.clients()));
        let to_run = "    trace: { level: TIMESTAMPS, mode: opentelemetry, rate: 0 }";
        let m = matrix("", "", to_run);
        let servers = settled(&m);
        assert!(servers.iter().all(exports_to_run));
        assert_eq!(servers[0].template, m.servers()[0].template);
    }
}
