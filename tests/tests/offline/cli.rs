//! The commands as a user runs them, on the committed lab recordings (no
//! root needed): every JSON line of every command validates against the
//! schema (docs/schema/record.schema.json); `replay -o text` tells each
//! pod's story within its line budget (docs/trace.md); the filters keep
//! exactly the matching records; a record file replays to the output the
//! raw capture gives; errors name their fix.

use crate::output_check;
use crate::record_schema;

use std::{
    collections::HashMap,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Command,
};

use output_check::json_lines;
use serde_json::Value;

fn bin() -> PathBuf {
    nri_trace_tests::workspace_bin("nri-trace")
}

fn fixtures() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut v = Vec::new();
    for group in ["trace", "nri", "cri"] {
        for e in std::fs::read_dir(root.join(group))
            .expect("fixtures dir")
            .flatten()
        {
            let p = e.path().join("recording.ndjson.gz");
            if p.exists() {
                let name = format!("{group}/{}", e.file_name().to_string_lossy());
                v.push((name, p));
            }
        }
    }
    v.sort();
    assert!(v.len() >= 18, "the lab recordings: {v:?}");
    v
}

/// `nri-trace ARGS`: (status ok, stdout, stderr).
fn run<I, S>(args: I) -> (bool, Vec<u8>, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let o = Command::new(bin())
        .args(args)
        .output()
        .expect("running nri-trace");
    (
        o.status.success(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok<I, S>(what: &str, args: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (ok, out, err) = run(args);
    assert!(ok, "nri-trace {what}: {err}");
    out
}

fn replay(file: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec![OsStr::new("replay"), file.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    ok(&format!("replay {} {extra:?}", file.display()), args)
}

#[test]
fn every_json_line_of_every_command_validates() {
    let v = record_schema::validator();
    let mut types: HashMap<String, usize> = HashMap::new();
    let mut add = |m: std::collections::BTreeMap<String, usize>| {
        for (t, n) in m {
            *types.entry(t).or_default() += n;
        }
    };
    for (name, f) in fixtures() {
        add(record_schema::validate_lines(
            &v,
            &format!("{name}: replay -o json"),
            &replay(&f, &["-o", "json"]),
        ));
        let which = if name.starts_with("cri/") {
            "cri"
        } else {
            "nri"
        };
        let debug = ok(
            "debug",
            [
                OsStr::new("debug"),
                OsStr::new(which),
                f.as_os_str(),
                OsStr::new("-o"),
                OsStr::new("json"),
            ],
        );
        add(record_schema::validate_lines(
            &v,
            &format!("{name}: debug {which} -o json"),
            &debug,
        ));
        // The raw captures themselves (what --save-raw and `debug capture
        // -o json` write).
        let raw = nri_trace::store::raw_capture::read_file(&f).unwrap();
        let mut bytes = Vec::new();
        for ev in &raw {
            nri_trace::store::raw_capture::write_event(&mut bytes, ev).unwrap();
        }
        add(record_schema::validate_lines(
            &v,
            &format!("{name}: raw capture"),
            &bytes,
        ));
    }
    let te = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/trace/teardown-error/recording.ndjson.gz");
    let explain = ok(
        "explain",
        [
            OsStr::new("explain"),
            OsStr::new("tderr-0"),
            te.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("json"),
            OsStr::new("--no-proc"),
        ],
    );
    add(record_schema::validate_lines(
        &v,
        "explain -o json",
        &explain,
    ));
    // doctor may fail a check on this machine (exit 1): its lines still
    // validate.
    let (_, doctor, _) = run(["doctor", "-o", "json"]);
    add(record_schema::validate_lines(&v, "doctor -o json", &doctor));
    for t in [
        "session",
        "session_end",
        "cri_span",
        "nri_uncaused",
        "violation",
        "nri_plugin",
        "cri_connection",
        "hook_summary",
        "cri_method_summary",
        "nri_call",
        "cri_call",
        "explanation",
        "doctor_check",
        "open",
        "chunk",
        "close",
    ] {
        assert!(types.contains_key(t), "no {t} line was checked: {types:?}");
    }
}

/// `replay -o text` of every recording against its `-o json`; the counts
/// are what docs/trace.md states.
#[test]
fn text_tells_each_pod_story_within_its_budget() {
    for (name, f) in fixtures() {
        let json = json_lines(&replay(&f, &["-o", "json"]));
        let text = String::from_utf8(replay(&f, &["-o", "text"])).unwrap();
        let (t, c) = output_check::check_text(&name, &text, &json);
        eprintln!(
            "{name}: {} text lines for {} CRI calls, {} hooks, {} findings, {} pods, {} table \
             lines, {} outside any call",
            t.lines,
            c.cri,
            c.hooks,
            c.findings,
            c.pods,
            output_check::table_lines(&c),
            t.outside
        );
    }
}

/// The pod each JSON record is about, learnt in order as the filter
/// learns it (its own metadata, or the ids of earlier records); `None`
/// for records about no pod.
struct Pods {
    by_id: HashMap<String, (String, String)>,
}

impl Pods {
    fn learn(&mut self, l: &Value) {
        let mut pod = |id: &Value, ns: &Value, name: &Value| {
            if let (Some(id), Some(ns), Some(name)) = (id.as_str(), ns.as_str(), name.as_str()) {
                if !id.is_empty() && !name.is_empty() {
                    self.by_id.insert(id.into(), (ns.into(), name.into()));
                }
            }
        };
        let nri = |l: &Value,
                   pods: &mut dyn FnMut(&Value, &Value, &Value),
                   link: &mut Vec<(String, String)>| {
            pods(&l["pod"]["id"], &l["pod"]["namespace"], &l["pod"]["name"]);
            if let (Some(k), Some(p)) = (l["container"]["id"].as_str(), l["pod"]["id"].as_str()) {
                link.push((k.into(), p.into()));
            }
        };
        let mut links = Vec::new();
        match l["type"].as_str() {
            Some("cri_span") => {
                pod(&l["sandbox_id"], &l["pod"]["namespace"], &l["pod"]["name"]);
                if let (Some(k), Some(p)) = (l["container_id"].as_str(), l["sandbox_id"].as_str()) {
                    links.push((k.into(), p.into()));
                }
                for h in l["hooks"].as_array().into_iter().flatten() {
                    nri(h, &mut pod, &mut links);
                }
            }
            Some("nri_uncaused" | "nri_pending") => nri(l, &mut pod, &mut links),
            // The runtime's own lists, asked at the attach: the pods and
            // containers made before it (the flood-loss fixture's).
            Some("cri_state") => {
                for p in l["pods"].as_array().into_iter().flatten() {
                    pod(&p["id"], &p["namespace"], &p["name"]);
                }
                for c in l["containers"].as_array().into_iter().flatten() {
                    if let (Some(k), Some(p)) = (c["id"].as_str(), c["sandbox_id"].as_str()) {
                        links.push((k.into(), p.into()));
                    }
                }
            }
            _ => {}
        }
        for (k, p) in links {
            if let Some(v) = self.by_id.get(&p).cloned() {
                self.by_id.entry(k).or_insert(v);
            }
        }
    }

    fn of(&self, l: &Value) -> Option<(String, String)> {
        let meta = |p: &Value| {
            Some((
                p["namespace"].as_str()?.to_string(),
                p["name"].as_str()?.to_string(),
            ))
        };
        let id = |v: &Value| v.as_str().and_then(|i| self.by_id.get(i).cloned());
        match l["type"].as_str()? {
            // A pending call is its span's request: no hooks yet.
            "cri_span" | "cri_pending" => meta(&l["pod"])
                .or_else(|| id(&l["sandbox_id"]))
                .or_else(|| id(&l["container_id"]))
                .or_else(|| {
                    l["hooks"].as_array()?.iter().find_map(|h| {
                        meta(&h["pod"])
                            .filter(|(_, n)| !n.is_empty())
                            .or_else(|| id(&h["pod"]["id"]))
                    })
                }),
            "nri_uncaused" | "nri_pending" => meta(&l["pod"])
                .filter(|(_, n)| !n.is_empty())
                .or_else(|| id(&l["pod"]["id"])),
            "violation" => {
                let p = l["pod"].as_str()?;
                Some(match p.split_once('/') {
                    Some((ns, n)) => (ns.into(), n.into()),
                    None => self
                        .by_id
                        .get(p)
                        .cloned()
                        .unwrap_or_else(|| (String::new(), p.into())),
                })
            }
            // A signal is about its target; other events about their
            // caller's cgroup and the path they name.
            "sandbox" => {
                let texts = if l["op"] == "signal" {
                    [l["target_cgroup"].as_str(), None]
                } else {
                    [
                        l["cgroup"].as_str(),
                        l["path"].as_str().or_else(|| l["target"].as_str()),
                    ]
                };
                texts.iter().flatten().find_map(|t| {
                    t.split(|c: char| !c.is_ascii_hexdigit() || c.is_ascii_uppercase())
                        .filter(|w| w.len() == 64)
                        .find_map(|w| self.by_id.get(w).cloned())
                })
            }
            _ => None,
        }
    }
}

fn plugin_matches(l: &Value, want: &str) -> bool {
    let is = |p: &Value| {
        // The label nri-trace gives a plugin (PluginId::label): IDX-NAME,
        // or comm[pid] when no name is known (registered before the attach).
        let label = match (p["index"].as_str(), p["name"].as_str(), p["comm"].as_str()) {
            (Some(i), Some(n), _) => format!("{i}-{n}"),
            (None, None, Some(c)) => format!("{c}[{}]", p["pid"]),
            _ => String::new(),
        };
        label == want || p["name"].as_str() == Some(want)
    };
    match l["type"].as_str() {
        Some("cri_span") => l["hooks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| is(&h["plugin"])),
        Some("nri_uncaused" | "nri_plugin" | "nri_plugin_gone" | "nri_pending") => is(&l["plugin"]),
        Some("violation") => l["plugin"]
            .as_str()
            .is_some_and(|p| p == want || p.split_once('-').is_some_and(|(_, n)| n == want)),
        _ => false,
    }
}

/// Which records a filter keeps: (the record's pod, the record).
type Keep = Box<dyn Fn(&Option<(String, String)>, &Value) -> bool>;

/// `--client comm`: the client's CRI calls and connections, and the
/// findings with a call of one of its connections among their evidence.
fn client_keep(all: &[Value], comm: &str) -> Keep {
    let comm = comm.to_string();
    let is = {
        let comm = comm.clone();
        move |c: &Value| c["comm"].as_str() == Some(comm.as_str())
    };
    let conns: std::collections::HashSet<u64> = all
        .iter()
        .filter(|l| match l["type"].as_str() {
            Some("cri_span" | "cri_pending") => is(&l["client"]),
            Some("cri_connection") => is(&l["client_process"]),
            _ => false,
        })
        .filter_map(|l| l["conn"].as_u64())
        .collect();
    Box::new(move |_, l| match l["type"].as_str() {
        Some("cri_span" | "cri_pending") => l["client"]["comm"].as_str() == Some(comm.as_str()),
        Some("cri_connection") => l["client_process"]["comm"].as_str() == Some(comm.as_str()),
        Some("cri_connection_gone") => l["conn"].as_u64().is_some_and(|c| conns.contains(&c)),
        Some("violation") => {
            l["evidence"].as_array().into_iter().flatten().any(|e| {
                e["kind"] == "cri" && e["conn"].as_u64().is_some_and(|c| conns.contains(&c))
            })
        }
        _ => false,
    })
}

/// `-n`, `--pod` and `--plugin` keep exactly the records about that
/// namespace, pod or plugin: the filtered output is the unfiltered one
/// without the others (records only; the tables keep their rows but for
/// --plugin's hook table).
#[test]
fn filters_keep_exactly_the_matching_records() {
    let is_record = |l: &Value| {
        !matches!(
            l["type"].as_str(),
            Some("session" | "session_end" | "hook_summary" | "cri_method_summary" | "conformance")
        )
    };
    let mut checked = 0;
    for (name, f) in fixtures()
        .into_iter()
        .filter(|(n, _)| n.starts_with("trace/"))
    {
        let all = json_lines(&replay(&f, &["-o", "json"]));
        let mut pods = Pods {
            by_id: HashMap::new(),
        };
        let mut about: Vec<(Option<(String, String)>, &Value)> = Vec::new();
        for l in all.iter().filter(|l| is_record(l)) {
            pods.learn(l);
            about.push((pods.of(l), l));
        }
        let some_pod = about.iter().find_map(|(p, _)| p.clone()).expect("a pod");
        let plugin = all
            .iter()
            .find(|l| l["type"] == "hook_summary")
            .and_then(|l| l["plugin"].as_str())
            .map(String::from)
            .expect("a plugin");
        // A CRI client of the recording (the lab's cri-driver or go-cri-client).
        let client = all
            .iter()
            .find(|l| l["type"] == "cri_connection")
            .and_then(|l| l["client_process"]["comm"].as_str())
            .map(String::from)
            .expect("a CRI client");
        let cases: Vec<(Vec<String>, Keep)> = vec![
            (
                vec!["-n".into(), some_pod.0.clone()],
                Box::new({
                    let ns = some_pod.0.clone();
                    move |p, _| p.as_ref().is_some_and(|(n, _)| *n == ns)
                }),
            ),
            (
                vec!["--pod".into(), some_pod.1.clone()],
                Box::new({
                    let name = some_pod.1.clone();
                    move |p, _| p.as_ref().is_some_and(|(_, n)| *n == name)
                }),
            ),
            (
                vec!["--plugin".into(), plugin.clone()],
                Box::new({
                    let plugin = plugin.clone();
                    move |_, l| plugin_matches(l, &plugin)
                }),
            ),
            (
                vec!["--client".into(), client.clone()],
                client_keep(&all, &client),
            ),
            (
                vec!["--client".into(), "kubelet".into()],
                Box::new(|_, _| false),
            ),
        ];
        for (args, keep) in cases {
            let mut a = vec!["-o", "json"];
            a.extend(args.iter().map(String::as_str));
            let got: Vec<Value> = json_lines(&replay(&f, &a))
                .into_iter()
                .filter(|l| is_record(l))
                .collect();
            let want: Vec<Value> = about
                .iter()
                .filter(|(p, l)| keep(p, l))
                .map(|(_, l)| (*l).clone())
                .collect();
            assert!(
                !want.is_empty() || !(args[0] == "--pod" || args[1] == client),
                "{name} {args:?}: nothing to keep"
            );
            assert_eq!(got, want, "{name} {args:?}: the filtered records");
            checked += 1;
        }
    }
    assert!(checked >= 35, "{checked} filtered runs");
}

/// A record file made from a raw capture replays to the same `-o json` as
/// the capture with `--no-redact` (records, tables; the session line is
/// the file's); without it a raw capture's replay is redacted, as `watch`.
#[test]
fn saved_and_raw_replay_alike() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/trace/happy/recording.ndjson.gz");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-saved");
    std::fs::create_dir_all(&dir).unwrap();
    // The record file of the raw capture, as --save writes it: through
    // the library, the same pipeline.
    let events = nri_trace::store::raw_capture::read_file(&f).unwrap();
    let session = nri_trace::pipeline::session_of_events(&events);
    let saved = dir.join("happy.ndjson");
    {
        let file = nri_trace::store::ndjson::create_private(&saved).unwrap();
        let w = nri_trace::store::record_file::RecordWriter::<Box<dyn std::io::Write>>::new(
            Box::new(file),
            &session,
        )
        .unwrap();
        let mut p = nri_trace::pipeline::Pipeline::new(&session, Default::default());
        p.save_to("happy.ndjson".into(), w);
        nri_trace::pipeline::replay::events(&events, p).unwrap();
    }
    let from_raw = replay(&f, &["-o", "json", "--no-redact"]);
    let from_saved = replay(&saved, &["-o", "json"]);
    assert_eq!(
        String::from_utf8(from_raw).unwrap(),
        String::from_utf8(from_saved.clone()).unwrap()
    );
    let redacted = String::from_utf8(replay(&f, &["-o", "json"])).unwrap();
    let session: Value = serde_json::from_str(redacted.lines().next().unwrap()).unwrap();
    assert_eq!(session["type"], "session");
    assert_eq!(session["redacted"], true, "{session}");
    // From standard input too.
    let o = Command::new(bin())
        .args(["replay", "-", "-o", "json"])
        .stdin(std::fs::File::open(&saved).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(o.stdout, from_saved);
}

#[test]
fn errors_name_the_fix() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-errors");
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.ndjson");
    std::fs::write(&junk, "{\"v\":1,\"type\":\"pizza\"}\n").unwrap();
    let (ok, _, err) = run([OsStr::new("replay"), junk.as_os_str()]);
    assert!(!ok);
    assert!(
        err.contains("not an nri-trace file") && err.contains("--save"),
        "{err}"
    );
    let (ok, _, err) = run([OsStr::new("replay"), dir.join("missing").as_os_str()]);
    assert!(!ok && err.contains("cannot open"), "{err}");
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/trace/happy/recording.ndjson.gz");
    let (ok, _, err) = run([
        OsStr::new("explain"),
        OsStr::new("no-such-pod"),
        f.as_os_str(),
    ]);
    assert!(!ok && err.contains("give namespace/name"), "{err}");
    // `-o` is a format everywhere: a file name there is refused.
    let (ok, _, err) = run(["watch", "-o", "/tmp/x.json"]);
    assert!(!ok && err.contains("possible values"), "{err}");
}

/// `replay --otlp-endpoint` to a collector that is not there (nothing
/// listens on port 1): the replay's records are what they are without
/// export, the run ends, and `session_end` says every span was dropped
/// and the export failed (docs/trace.md, "OpenTelemetry spans").
#[test]
fn otlp_export_to_an_absent_collector_loses_nothing_and_counts_the_drops() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cri/happy/recording.ndjson.gz");
    let (ok, plain, err) = run([
        OsStr::new("replay"),
        file.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("json"),
    ]);
    assert!(ok, "{err}");
    let (ok, exported, err) = run([
        OsStr::new("replay"),
        file.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("json"),
        OsStr::new("--otlp-endpoint"),
        OsStr::new("http://127.0.0.1:1"),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("OTLP export failed"), "logged once: {err}");
    assert_eq!(err.matches("OTLP export failed").count(), 1, "{err}");
    let lines = |b: &[u8]| -> Vec<Value> {
        json_lines(b)
            .into_iter()
            .filter(|v| v["type"] != "session_end")
            .collect()
    };
    assert_eq!(lines(&exported), lines(&plain), "the same records");
    let end = json_lines(&exported)
        .into_iter()
        .find(|v| v["type"] == "session_end")
        .expect("session_end");
    record_schema::validate_lines(
        &record_schema::validator(),
        "replay --otlp-endpoint",
        &exported,
    );
    let otlp = &end["otlp"];
    assert_eq!(otlp["exported_spans"], 0, "{end}");
    assert!(otlp["dropped_spans"].as_u64().unwrap() > 10, "{end}");
    assert!(otlp["failed_exports"].as_u64().unwrap() >= 1, "{end}");
}

/// The standard variables asking for OTLP/HTTP, which nri-trace does not
/// speak: refused at the start, the fix named, nothing exported
/// (docs/trace.md, "OpenTelemetry spans").
#[test]
fn otlp_over_http_is_refused_with_the_fix() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cri/happy/recording.ndjson.gz");
    let o = Command::new(bin())
        .arg("replay")
        .arg(&file)
        .args(["-o", "json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .output()
        .expect("running nri-trace");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
            && err.contains("OTLP/gRPC only")
            && err.contains("4317"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no record printed before the refusal");
}
