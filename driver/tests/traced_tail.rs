//! The traced tail in the report (issue 51), from a store to report.txt, report.html and
//! report.json: a run whose workers traced requests and whose server exported their spans has
//! the section "Where the tail's time went", its table, clock offsets and waterfalls; a run that
//! traced nothing has none of it; a run whose server spans never came says so.

use driver::report::Report;
use serde_json::Value;
use stress_common::contract::RunId;
use stress_common::status::{StatusSink, WorkerSnapshot};
use stress_common::store::{NewRun, Store};
use stress_common::trace::{ClientSpan, ServerSpan, SpanEvent};

const MS: i64 = 1_000_000;
const US: i64 = 1_000;
const T0: i64 = 1_796_445_262_000_000_000;
/// The server's clock, ahead of the client's.
const SKEW: i64 = 3_000 * MS;
const HEADING: &str = "== Where the tail's time went (traced requests above p99) ==";

/// Request `i` of a python model sleeping `infer` (ns), as its client saw it and as Triton
/// exported it over HTTP (its three spans), from server `triton-0`.
fn request(i: i64, infer: i64) -> (ClientSpan, Vec<ServerSpan>) {
    let at = T0 + i * 50 * MS;
    let sent = at + 20 * US;
    let server_in = sent + 150 * US;
    let queue_start = server_in + 60 * US;
    let compute_start = queue_start + 40 * US;
    let input_end = compute_start + 45 * US;
    let output_start = input_end + infer;
    let compute_end = output_start + 90 * US;
    let server_out = compute_end + 80 * US;
    let client = ClientSpan {
        trace_id: format!("{:032x}", 0x5eed_0000 + i),
        span_id: format!("{:016x}", 0x100 + i),
        scenario: "Infer".into(),
        model: "add_sub".into(),
        server: "127.0.0.1:8000".into(),
        intended_ns: at,
        sent_ns: sent,
        answered_ns: server_out + 150 * US,
        received_ns: None,
        ok: true,
    };
    let span = |id: i64, parent: String, name: &str, events: &[(&str, i64)]| ServerSpan {
        server: "triton-0".into(),
        trace_id: client.trace_id.clone(),
        span_id: format!("{id:016x}"),
        parent_span_id: parent,
        name: name.into(),
        start_ns: events[0].1 + SKEW,
        end_ns: events[events.len() - 1].1 + SKEW,
        events: events
            .iter()
            .map(|&(name, at)| SpanEvent {
                name: name.into(),
                at_ns: at + SKEW,
            })
            .collect(),
    };
    let (infer_id, model_id) = (0x1000 + i, 0x2000 + i);
    let spans = vec![
        span(
            0x3000 + i,
            format!("{model_id:016x}"),
            "compute",
            &[
                ("COMPUTE_START", compute_start),
                ("COMPUTE_INPUT_END", input_end),
                ("COMPUTE_OUTPUT_START", output_start),
                ("COMPUTE_END", compute_end),
            ],
        ),
        span(
            model_id,
            format!("{infer_id:016x}"),
            "add_sub",
            &[
                ("REQUEST_START", server_in + 20 * US),
                ("QUEUE_START", queue_start),
                ("REQUEST_END", compute_end + 5 * US),
            ],
        ),
        span(
            infer_id,
            client.span_id.clone(),
            "InferRequest",
            &[
                ("HTTP_RECV_START", server_in),
                ("HTTP_RECV_END", server_in + 5 * US),
                ("INFER_RESPONSE_COMPLETE", compute_end - 10 * US),
                ("HTTP_SEND_START", server_out - 6 * US),
                ("HTTP_SEND_END", server_out),
            ],
        ),
    ];
    (client, spans)
}

/// A run in a fresh store with `traced` requests traced (the last three sleeping 20 ms, the
/// others 1 ms), their server spans recorded when `spans`; its three reports.
async fn reports(traced: i64, spans: bool) -> (String, String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::sqlite_url(&dir.path().join("store.sqlite")))
        .await
        .unwrap();
    let run = RunId::from("traced");
    store
        .create_run(&NewRun {
            run_id: run.to_string(),
            name: "traced tail".into(),
            matrix_yaml: String::new(),
            launcher: "local".into(),
            started_at_ms: T0 / MS,
            fingerprint: None,
        })
        .await
        .unwrap();
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for i in 0..traced {
        let infer = if i >= traced - 3 { 20 * MS } else { MS };
        let (c, s) = request(i, infer);
        client.push(c);
        server.extend(s);
    }
    if !client.is_empty() {
        store
            .sink(run.clone(), "clients-0")
            .snapshot(&WorkerSnapshot {
                client_spans: client,
                ..WorkerSnapshot::default()
            })
            .await
            .unwrap();
    }
    if spans {
        store.record_server_spans(&run, &server).await.unwrap();
        // As the run's receiver saves what it did.
        let counts = driver::report::spans::ReceiverCounts {
            bodies: 1,
            spans_received: server.len() as u64 + 5,
            spans_stored: server.len() as u64,
            spans_dropped: 5,
            ..Default::default()
        };
        store.save_document(&run, "", &counts).await.unwrap();
    }
    let report = Report::from_store(&store, &run).await.unwrap();
    (
        report.render(),
        driver::render::html::render(&report),
        serde_json::to_value(&report).unwrap(),
    )
}

#[tokio::test]
async fn a_traced_runs_reports_say_where_its_tails_time_went() {
    let (text, html, json) = reports(300, true).await;
    // report.json: the slowest 1% (3 of 300), all split, compute infer their time.
    let row = &json["traced_tail"]["rows"][0];
    assert_eq!(row["traced"], 300, "{json:#}");
    assert_eq!(row["tail"], 3);
    assert_eq!(row["split"], 3);
    assert_eq!(row["no_spans"], 0);
    let infer = row["shares"]["compute_infer"].as_f64().unwrap();
    assert!(infer > 0.95, "{row:#}");
    assert_eq!(row["slowest"].as_array().unwrap().len(), 3);
    let clock = &json["traced_tail"]["clocks"][0];
    let offset = clock["offset_ns"].as_i64().unwrap();
    assert!(
        (offset - SKEW).abs() <= clock["bound_ns"].as_i64().unwrap(),
        "{clock}"
    );
    // report.txt: the section, its row, the clock and the waterfalls.
    let section = text
        .split("\n\n")
        .find(|b| b.starts_with(HEADING))
        .unwrap_or_else(|| panic!("no section `{HEADING}` in:\n{text}"));
    let line = section
        .lines()
        .find(|l| l.starts_with("Infer "))
        .unwrap_or_else(|| panic!("no row of Infer in:\n{section}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cells[..7],
        ["Infer", "add_sub", "300", "3", "3", "0", "0"],
        "{line}"
    );
    assert_eq!(cells[12], format!("{:.1}%", infer * 100.0), "{line}");
    assert!(
        section.contains("server clocks (server − client): triton-0 +2999.")
            || section.contains("server clocks (server − client): triton-0 +3000."),
        "{section}"
    );
    assert!(section.contains("slowest of Infer/add_sub"), "{section}");
    // What the receiver did, drops included.
    assert!(
        section.contains("OTLP receiver: 905 server span(s) received, 900 stored, 5 dropped"),
        "{section}"
    );
    assert_eq!(json["traced_tail"]["receiver"]["spans_dropped"], 5);
    let waterfalls = section
        .lines()
        .filter(|l| l.starts_with(&format!("  {:032x}", 0x5eed_0000 + 299)))
        .count();
    assert_eq!(waterfalls, 1, "{section}");
    // report.html: the table and a waterfall of the three, each stretch drawn.
    assert!(html.contains("<h2 id=\"traced-tail\">"), "{html}");
    assert!(html.contains("<table class=\"traced-tail\">"), "{html}");
    assert!(html.contains("data-plot=\"waterfall-0\""), "{html}");
    assert_eq!(html.matches("<rect class=\"segment\"").count(), 3 * 9);
    assert!(!html.contains("Server spans not received"));
}

#[tokio::test]
async fn a_run_that_traced_nothing_has_no_tail_section() {
    let (text, html, json) = reports(0, false).await;
    assert!(!text.contains("Where the tail's time went"), "{text}");
    assert!(
        !html.contains("traced-tail") && !html.contains("waterfall-"),
        "{html}"
    );
    assert!(json.get("traced_tail").is_none(), "{json:#}");
}

#[tokio::test]
async fn server_spans_that_never_came_are_said_so_not_guessed() {
    let (text, html, json) = reports(200, false).await;
    let join = &json["traced_tail"];
    assert_eq!(join["server_spans_received"], false, "{json:#}");
    assert_eq!(join["rows"][0]["no_spans"], 2);
    assert!(join["rows"][0]["shares"].is_null());
    assert!(text.contains(HEADING), "{text}");
    assert!(
        text.contains("server spans not received: no span of the tail's traces came from a server, so their time is not split (the run had no OTLP receiver"),
        "{text}"
    );
    assert!(html.contains("Server spans not received"), "{html}");
    // The slowest are still listed, whole, as unsplit.
    assert_eq!(html.matches("<rect class=\"unsplit\"").count(), 2, "{html}");
    assert_eq!(html.matches("<rect class=\"segment\"").count(), 0);
}
