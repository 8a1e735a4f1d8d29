//! Reading model configs as a server pod sees its repositories (pure parts): the driver cannot
//! read `/models` inside an image, so a sweep's originals come from a short-lived pod built like
//! the server's (same image, init container and volumes) whose `sh` prints each swept model's
//! config.pbtxt between markers; the driver parses the pod's log.

use super::spec::{PodContext, ROLE_LABEL, resources_without_gpus, server_pod};
use crate::matrix::{ServerMember, ServerTemplate};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use stress_common::contract::MemberName;
use stress_common::tritonserver::shell_quote;

/// The reader pod's member name (its pod is `<run id>-config-reader`).
pub const CONFIG_READER: &str = "config-reader";
/// Starts every marker line: no config.pbtxt line starts so.
const MARK: &str = "=== triton-stress config-reader";

/// A reader log that is not what [`script`] prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReaderLogError {
    #[error("its log says nothing of model {0:?} (cut short?)")]
    NoAnswer(String),
    #[error("its log has model {0:?}'s config.pbtxt without its end marker (cut short?)")]
    Unterminated(String),
    #[error("its log has a marker line it does not print: {0:?}")]
    BadMarker(String),
}

/// The reader pod: the server pod of `template` (so its volumes and init containers cannot
/// drift from the servers'), whose Triton container runs [`script`] instead, without ports,
/// readiness probe or GPUs.
pub fn reader_pod(
    template: &ServerTemplate,
    group: &str,
    models: &[String],
    ctx: &PodContext,
) -> Result<Pod, super::spec::PodError> {
    let member = ServerMember {
        name: MemberName::new(CONFIG_READER),
        group: group.into(),
        index: 0,
        template_name: String::new(),
        template: ServerTemplate {
            // The originals, not a variant's mounted over them.
            mounted_configs: Vec::new(),
            ..template.clone()
        },
    };
    let mut pod = server_pod(&member, ctx)?;
    if let Some(labels) = pod.metadata.labels.as_mut() {
        // Not a server: nothing that selects servers (Services, the run's servers) takes it.
        labels.insert(ROLE_LABEL.into(), CONFIG_READER.into());
        labels.insert("app.kubernetes.io/component".into(), CONFIG_READER.into());
    }
    if let Some(spec) = pod.spec.as_mut() {
        for c in &mut spec.containers {
            c.command = Some(vec![
                "sh".into(),
                "-c".into(),
                script(&template.model_repositories, models),
            ]);
            c.args = None;
            c.ports = None;
            c.readiness_probe = None;
            c.resources = resources_without_gpus(template.resources.as_ref());
        }
    }
    Ok(pod)
}

/// The reader's shell script: for each model (by its index in `models`), the first repository
/// that has `<model>/config.pbtxt` is printed between a begin and an end marker, or a missing
/// marker says none has it. `cat` failing fails the pod.
pub fn script(repositories: &[String], models: &[String]) -> String {
    let mut lines = Vec::with_capacity(models.len());
    for (mi, model) in models.iter().enumerate() {
        let mut s = String::new();
        for (ri, repo) in repositories.iter().enumerate() {
            let file = shell_quote(&format!(
                "{}/{model}/config.pbtxt",
                repo.trim_end_matches('/')
            ));
            s.push_str(if ri == 0 { "if" } else { "elif" });
            s.push_str(&format!(
                " [ -f {file} ]; then echo '{MARK} begin {mi} {ri}'; cat {file} || exit 1; \
                 echo; echo '{MARK} end {mi}'; "
            ));
        }
        if repositories.is_empty() {
            s.push_str(&format!("echo '{MARK} missing {mi}'"));
        } else {
            s.push_str(&format!("else echo '{MARK} missing {mi}'; fi"));
        }
        lines.push(s);
    }
    lines.join("\n")
}

/// What the reader's log says: each model found with the index of its repository and its
/// file's exact text; a model no repository has is absent.
pub fn parse_log(
    log: &str,
    models: &[String],
    repositories: usize,
) -> Result<BTreeMap<String, (usize, String)>, ReaderLogError> {
    let mut found = BTreeMap::new();
    let mut answered = vec![false; models.len()];
    let mut rest = log;
    loop {
        // A marker at the start of a line (a file's text is skipped whole below).
        let at = if rest.starts_with(MARK) {
            Some(0)
        } else {
            rest.find(&format!("\n{MARK}")).map(|i| i + 1)
        };
        let Some(at) = at else { break };
        let line_end = rest[at..].find('\n').map_or(rest.len(), |e| at + e);
        let line = &rest[at..line_end];
        let after = rest.get(line_end + 1..).unwrap_or("");
        let bad = || ReaderLogError::BadMarker(line.to_string());
        let index = |word: &str, below: usize| {
            word.parse::<usize>()
                .ok()
                .filter(|i| *i < below)
                .ok_or_else(bad)
        };
        let words: Vec<&str> = line[MARK.len()..].split_whitespace().collect();
        match words.as_slice() {
            ["missing", m] => {
                answered[index(m, models.len())?] = true;
                rest = after;
            }
            ["begin", m, r] => {
                let (m, r) = (index(m, models.len())?, index(r, repositories)?);
                // The script's `echo` ends the file's text with one newline of its own.
                let end = format!("\n{MARK} end {m}");
                let Some(e) = after.find(&end) else {
                    return Err(ReaderLogError::Unterminated(models[m].clone()));
                };
                found.insert(models[m].clone(), (r, after[..e].to_string()));
                answered[m] = true;
                rest = &after[e + end.len()..];
            }
            _ => return Err(bad()),
        }
    }
    match answered.iter().position(|a| !a) {
        Some(m) => Err(ReaderLogError::NoAnswer(models[m].clone())),
        None => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::kube::restricted;
    use crate::launcher::kube::spec::tests::{assert_fixture, context, matrix};
    use crate::launcher::kube::spec::{MEMBER_LABEL, pod_name};

    /// The config reader is the server pod of the template (image, init container, volumes,
    /// mounts, node placement) with a shell in Triton's place and no GPU, and is restricted.
    #[test]
    fn the_config_reader_mirrors_the_server_pod() {
        let m = matrix();
        let server = &m.servers()[0];
        let mut template = server.template.clone();
        // A variant's mounts never reach the reader: it reads the originals.
        template.mounted_configs = vec![crate::matrix::MountedConfig {
            model: "fixed_capacity".into(),
            repository: "/models".into(),
            text: String::new(),
        }];
        let models = ["fixed_capacity".to_string(), "simple".to_string()];
        let reader = reader_pod(&template, "triton", &models, &context()).unwrap();
        assert_fixture("config-reader.yaml", &reader);
        let server_pod = server_pod(server, &context()).unwrap();
        let (r, s) = (
            reader.spec.as_ref().unwrap(),
            server_pod.spec.as_ref().unwrap(),
        );
        assert_eq!(r.volumes, s.volumes);
        assert_eq!(r.init_containers, s.init_containers);
        assert_eq!(r.node_selector, s.node_selector);
        assert_eq!(r.tolerations, s.tolerations);
        let (rc, sc) = (&r.containers[0], &s.containers[0]);
        assert_eq!(rc.image, sc.image);
        assert_eq!(rc.volume_mounts, sc.volume_mounts);
        assert_eq!(rc.env, sc.env);
        assert_eq!(rc.security_context, sc.security_context);
        assert_eq!(
            rc.command.as_ref().unwrap()[..2],
            ["sh", "-c"].map(String::from)
        );
        assert!(
            rc.command.as_ref().unwrap()[2]
                .contains("[ -f /mnt/extra-models/simple/config.pbtxt ]")
        );
        assert!(rc.readiness_probe.is_none() && rc.ports.is_none() && rc.args.is_none());
        let limits = rc.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert!(!limits.contains_key("nvidia.com/gpu") && limits.contains_key("cpu"));
        assert_eq!(
            reader.metadata.name.as_deref(),
            Some(pod_name(&context().run_id, CONFIG_READER).as_str())
        );
        let labels = reader.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[MEMBER_LABEL], CONFIG_READER);
        assert_eq!(labels[ROLE_LABEL], CONFIG_READER);
        assert_eq!(
            restricted::violations(r)
                .into_iter()
                .filter(|v| !v.ends_with("is hostPath"))
                .count(),
            0
        );
    }

    fn models() -> Vec<String> {
        ["simple", "fixed_capacity", "absent"]
            .map(String::from)
            .to_vec()
    }

    /// What the script prints, run by a real `sh` over two repositories: a model in the
    /// first, one only in the second (found there), one in neither; texts come back exact,
    /// with or without a final newline.
    #[test]
    fn the_script_s_output_parses_back_to_the_files() {
        let dir = std::env::temp_dir().join(format!("config-reader-{}", std::process::id()));
        let (first, second) = (dir.join("a"), dir.join("b"));
        let simple = "name: \"simple\"\n# a comment only the file has\nmax_batch_size: 8\n";
        let fixed = "name: \"fixed_capacity\"\ninstance_group [{ count: 1 }]"; // no final newline
        std::fs::create_dir_all(first.join("simple")).unwrap();
        std::fs::create_dir_all(second.join("fixed_capacity")).unwrap();
        std::fs::create_dir_all(second.join("simple")).unwrap();
        std::fs::write(first.join("simple/config.pbtxt"), simple).unwrap();
        std::fs::write(second.join("simple/config.pbtxt"), "shadowed").unwrap();
        std::fs::write(second.join("fixed_capacity/config.pbtxt"), fixed).unwrap();
        let repos = [&first, &second]
            .map(|p| format!("{}/", p.display()))
            .to_vec();
        let out = std::process::Command::new("sh")
            .args(["-c", &script(&repos, &models())])
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(out.status.success(), "{out:?}");
        let log = String::from_utf8(out.stdout).unwrap();
        let found = parse_log(&log, &models(), 2).unwrap();
        assert_eq!(
            found,
            BTreeMap::from([
                ("simple".to_string(), (0, simple.to_string())),
                ("fixed_capacity".to_string(), (1, fixed.to_string())),
            ]),
            "{log}"
        );
    }

    #[test]
    fn a_log_cut_short_or_foreign_is_an_error() {
        let m = models();
        let begin = format!("{MARK} begin 0 0\nname: \"simple\"\n");
        assert_eq!(
            parse_log(&begin, &m, 1),
            Err(ReaderLogError::Unterminated("simple".into()))
        );
        let one = format!("{MARK} missing 0\n{MARK} missing 2\n");
        assert_eq!(
            parse_log(&one, &m, 1),
            Err(ReaderLogError::NoAnswer("fixed_capacity".into()))
        );
        let bad = format!("{MARK} begin 0 7\n");
        assert!(matches!(
            parse_log(&bad, &m, 2),
            Err(ReaderLogError::BadMarker(_))
        ));
        let empty_file =
            format!("{MARK} begin 1 0\n\n{MARK} end 1\n{MARK} missing 0\n{MARK} missing 2\n");
        assert_eq!(
            parse_log(&empty_file, &m, 1).unwrap()["fixed_capacity"],
            (0, String::new())
        );
    }
}
