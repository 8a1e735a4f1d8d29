//! A server's log lines around a time, for a failure's forensics. Triton's own lines start
//! with `IMMDD HH:MM:SS.uuuuuu` (severity, month, day, the server's local time: the local
//! launcher runs it with `TZ=UTC`); a pod's log from the Kubernetes API with `timestamps`
//! starts with an RFC 3339 time. Pure: reading the log is the launcher's.

/// Lines kept per excerpt: the last ones of the window (nearest the failure, which is 1 s
/// before its end), not the first (a window near the start is all model loading).
pub const MAX_EXCERPT_LINES: usize = 40;
/// An excerpt's line is cut after this many characters: a verbose tritonserver prints a request's
/// whole input list on one line (1–2 KB each), which buries the lines around it.
pub const MAX_EXCERPT_LINE_CHARS: usize = 320;

/// A server's log lines over a time window, saved at the end while the log can be read, for
/// the failures in that window; in the store keyed `MEMBER/FROM_MS` (zero-padded: by time).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogExcerpt {
    pub member_id: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub lines: Vec<String>,
}

impl LogExcerpt {
    pub fn key(&self) -> String {
        format!("{}/{:020}", self.member_id, self.from_ms)
    }
}

impl stress_common::store::Document for LogExcerpt {
    const KIND: &'static str = "log_excerpt";
}

/// The time of a Triton log line (ms since the epoch, UTC), taking the year from `year`.
pub fn triton_line_ms(line: &str, year: i16) -> Option<i64> {
    let head = line.get(..22)?;
    let mut chars = head.chars();
    if !matches!(chars.next()?, 'I' | 'W' | 'E' | 'F') {
        return None;
    }
    let month: i8 = head.get(1..3)?.parse().ok()?;
    let day: i8 = head.get(3..5)?.parse().ok()?;
    let hour: i8 = head.get(6..8)?.parse().ok()?;
    let minute: i8 = head.get(9..11)?.parse().ok()?;
    let second: i8 = head.get(12..14)?.parse().ok()?;
    let micros: i32 = head.get(15..21)?.parse().ok()?;
    let dt = jiff::civil::date(year, month, day).at(hour, minute, second, micros * 1000);
    let ts = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(ts.as_millisecond())
}

/// A line of a pod's log read with timestamps: its time (ms) and the line without it.
pub fn kube_line(line: &str) -> Option<(i64, &str)> {
    let (stamp, rest) = line.split_once(' ')?;
    let ts: jiff::Timestamp = stamp.parse().ok()?;
    Some((ts.as_millisecond(), rest))
}

/// The lines of a log timed within `[from_ms, to_ms]` by `time` (an untimed line belongs to the
/// timed line before it, as a continuation), in order.
pub fn between<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    from_ms: i64,
    to_ms: i64,
    time: impl Fn(&'a str) -> Option<(i64, &'a str)>,
) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in lines {
        let text = match time(line) {
            Some((at, text)) => {
                if at > to_ms {
                    break;
                }
                inside = at >= from_ms;
                text
            }
            None => line,
        };
        if inside {
            out.push(text.to_string());
        }
    }
    out
}

/// At most [`MAX_EXCERPT_LINES`] of a window's `lines`, in order: first those that mention
/// `focus` (a failure's correlation id, as a whole number: a verbose server's lines about that
/// sequence, its reaper's among them), then the window's last lines (nearest the failure) to
/// fill up. Long lines are cut at [`MAX_EXCERPT_LINE_CHARS`]. Triton's start-up tables (see
/// [`is_table`]) are left out: a failure in a run's first seconds would otherwise get forty
/// lines of backends, models and options, which say nothing about it.
pub fn excerpt(lines: Vec<String>, focus: Option<u64>) -> Vec<String> {
    let lines: Vec<String> = lines.into_iter().filter(|l| !is_table(l)).collect();
    let mentions = |line: &str| {
        let Some(id) = focus else { return false };
        let id = id.to_string();
        line.match_indices(&id).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + id.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit())
                && !after.is_some_and(|c| c.is_ascii_digit())
        })
    };
    let mut keep = vec![false; lines.len()];
    let mut kept = 0;
    for (i, line) in lines.iter().enumerate().rev() {
        if kept < MAX_EXCERPT_LINES && mentions(line) {
            keep[i] = true;
            kept += 1;
        }
    }
    for k in keep.iter_mut().rev() {
        if kept >= MAX_EXCERPT_LINES {
            break;
        }
        if !*k {
            *k = true;
            kept += 1;
        }
    }
    lines
        .into_iter()
        .zip(keep)
        .filter_map(|(line, k)| k.then(|| cut_long_line(line)))
        .collect()
}

/// A line of the tables Triton logs as it starts (and of the model table it logs as it stops):
/// a border `+---+`, a row `| … |`, a blank line between them, or the timed line that heads
/// one (nothing after its source location, `server.cc:631] `).
fn is_table(line: &str) -> bool {
    let line = line.trim();
    line.is_empty()
        || (line.starts_with("+-") && line.ends_with('+'))
        || (line.starts_with('|') && line.ends_with('|'))
        || (line.ends_with(']') && line.contains(".cc:"))
}

fn cut_long_line(line: String) -> String {
    match line.char_indices().nth(MAX_EXCERPT_LINE_CHARS) {
        Some((at, _)) => {
            let rest = line[at..].chars().count();
            format!("{} … ({rest} more characters)", &line[..at])
        }
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_cuts_long_lines_and_keeps_short_ones() {
        let long = format!(
            "I1127 23:11:44.900589 1 infer_request.cc:803] {}",
            "é".repeat(2000)
        );
        let rest = long.chars().count() - MAX_EXCERPT_LINE_CHARS;
        let kept = excerpt(vec!["short".into(), long.clone()], None);
        assert_eq!(kept[0], "short");
        let tail = format!(" … ({rest} more characters)");
        assert!(kept[1].ends_with(&tail), "{}", kept[1]);
        let head = kept[1].strip_suffix(&tail).unwrap();
        assert!(long.starts_with(head));
        assert_eq!(head.chars().count(), MAX_EXCERPT_LINE_CHARS);
    }

    /// A failure soon after the server started: its window holds the start-up tables, and
    /// only the lines that say something stay.
    #[test]
    fn an_excerpt_leaves_out_tritons_start_up_tables() {
        let log = "I1207 13:02:34.866558 24515 server.cc:674] \n\
                   +------------------+---------+--------+\n\
                   | Model            | Version | Status |\n\
                   +------------------+---------+--------+\n\
                   | sometimes_errors | 1       | READY  |\n\
                   +------------------+---------+--------+\n\
                   \n\
                   I1207 13:02:34.871229 24515 grpc_server.cc:2558] \"Started GRPCInferenceService\"\n\
                   E1207 13:02:36.100000 24515 python_be.cc:1] \"Failed to process | the request\"";
        let kept = excerpt(log.lines().map(String::from).collect(), None);
        assert_eq!(
            kept,
            [
                "I1207 13:02:34.871229 24515 grpc_server.cc:2558] \"Started GRPCInferenceService\"",
                "E1207 13:02:36.100000 24515 python_be.cc:1] \"Failed to process | the request\"",
            ],
            "{kept:#?}"
        );
    }

    #[test]
    fn triton_and_kube_lines_are_timed_and_cut_to_the_window() {
        let year = 2026;
        let at = triton_line_ms("I1124 01:56:09.500385 6420 server.cc:325] \"x\"", year).unwrap();
        let expected: jiff::Timestamp = "2026-11-24T01:56:09.500Z".parse().unwrap();
        assert_eq!(at, expected.as_millisecond());
        assert_eq!(triton_line_ms("not a log line at all, no", year), None);
        let log = "I1124 01:56:05.000000 1 a.cc:1] before\n\
                   E1124 01:56:09.100000 1 a.cc:2] \"Model failed\"\n\
                   a continuation of the error\n\
                   W1124 01:56:09.900000 1 a.cc:3] after\n\
                   I1124 01:56:20.000000 1 a.cc:4] much later";
        let (from, to) = (at - 1000, at + 1000);
        let lines = between(log.lines(), from, to, |l| {
            Some((triton_line_ms(l, year)?, l))
        });
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("Model failed") && lines[1].starts_with("a continuation"));
        // A busy window keeps its last lines (nearest the failure), and first the lines about
        // the failure's correlation id.
        let busy: Vec<String> = (0..100)
            .map(|i| match i {
                7 => {
                    "I1124 01:56:09.100007 1 s.cc:1] \"Reaper: force-ending CORRID 262146\"".into()
                }
                8 => "I1124 01:56:09.100008 1 s.cc:1] \"CORRID 2621460 elsewhere\"".into(),
                _ => format!("I1124 01:56:09.{:06} 1 a.cc:1] line {i}", 100_000 + i),
            })
            .collect();
        let window = between(busy.iter().map(String::as_str), from, to, |l| {
            Some((triton_line_ms(l, year)?, l))
        });
        assert_eq!(window.len(), 100, "every line of the window");
        let kept = excerpt(window.clone(), None);
        assert_eq!(kept.len(), MAX_EXCERPT_LINES);
        assert!(kept.last().unwrap().ends_with("line 99"), "{kept:?}");
        let focused = excerpt(window, Some(262_146));
        assert_eq!(focused.len(), MAX_EXCERPT_LINES);
        assert!(
            focused[0].contains("force-ending CORRID 262146"),
            "{focused:?}"
        );
        assert!(
            !focused.iter().any(|l| l.contains("2621460")),
            "another id is no mention: {focused:?}"
        );
        assert!(focused.last().unwrap().ends_with("line 99"));
        let (t, text) = kube_line("2026-11-24T01:56:09.500385000Z I1124 hello").unwrap();
        assert_eq!((t, text), (expected.as_millisecond(), "I1124 hello"));
        assert_eq!(kube_line("no timestamp here"), None);
    }
}
