//! crictl beside the driver (scenario `crictl`, lab/src/crictl.rs): every
//! CRI call an SRE's crictl made is named (its method known) and
//! attributed to crictl (its connection's client: crictl's pid, comm, and
//! the cgroup and unit it ran in), the driver's calls to the driver; the
//! NRI hooks crictl's stops and removals caused are under crictl's calls;
//! `--client` keeps crictl's calls alone.
//!
//! crictl is built by lab/crictl.sh from its Go module (the proxy): a
//! machine that cannot build it skips the test, unless CI=true, where it
//! fails.

use std::collections::BTreeMap;

use nri_trace::model::CriClient;
use nri_trace_lab::crictl::{crictl_path, CRICTL_CGROUP, SRE_PODS};

use super::*;

#[test]
fn trace_crictl_calls_named_and_attributed() {
    check_crictl(None);
}

#[test]
fn crio_trace_crictl_calls_named_and_attributed() {
    check_crictl(Some(Runtime::CriO));
}

/// Whether crictl is there to run (built now if it is not); under CI a
/// failure fails the test, elsewhere it says why it skips.
fn crictl_ready(test: &str) -> bool {
    match crictl_path() {
        Ok(p) => {
            eprintln!("{test}: crictl at {}", p.display());
            true
        }
        Err(e) => {
            assert!(!lab_trace::ci(), "{test}: no crictl: {e:#}");
            eprintln!("skipping {test}: no crictl: {e:#}");
            false
        }
    }
}

/// One crictl invocation of the truth.
struct Invocation<'a> {
    args: &'a [String],
    pid: u32,
    cgroup: Option<&'a str>,
    sandbox: Option<&'a str>,
    start: u64,
    end: u64,
}

fn invocations(truth: &[Truth]) -> Vec<Invocation<'_>> {
    truth
        .iter()
        .filter_map(|t| match t {
            Truth::Tool {
                tool,
                args,
                pid,
                cgroup,
                pod,
                start_mono_ns,
                end_mono_ns,
                ..
            } if tool == "crictl" => Some(Invocation {
                args,
                pid: *pid,
                cgroup: cgroup.as_deref(),
                sandbox: pod.as_ref().and_then(|p| p.sandbox_id.as_deref()),
                start: *start_mono_ns,
                end: *end_mono_ns,
            }),
            _ => None,
        })
        .collect()
}

/// The CRI calls one crictl invocation makes, sorted (crictl v1.37.0 on
/// k8s.io/cri-client v0.37.0): each client it dials is validated first,
/// the runtime service's with Version (`pkg/remote_runtime.go`
/// validateServiceConnection), the image service's with ImageFsInfo
/// (`pkg/remote_image.go`), which `ps` dials too; then the command's own
/// calls (`cmd/crictl/sandbox.go`, `container.go`): `rmp` asks the pod's
/// status first and, with `-f`, stops a pod that is still ready.
fn crictl_calls(args: &[String], stopped_before: bool) -> Vec<&'static str> {
    let mut v = vec!["Version"];
    match args[0].as_str() {
        "pods" => v.push("ListPodSandbox"),
        "inspectp" => v.push("PodSandboxStatus"),
        "ps" => v.extend(["ImageFsInfo", "ListContainers"]),
        "stopp" => v.push("StopPodSandbox"),
        "rmp" => {
            v.extend(["PodSandboxStatus", "RemovePodSandbox"]);
            if !stopped_before {
                v.push("StopPodSandbox");
            }
        }
        other => panic!("crictl {other}: not a command of the scenario"),
    }
    v.sort_unstable();
    v
}

fn spans(records: &[Record]) -> Vec<&nri_trace::engine::CriSpan> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn check_crictl(rt: Option<Runtime>) {
    let test = "crictl";
    if !lab_trace::guard(test) || !crictl_ready(test) {
        return;
    }
    let Some((out, records)) = traced_on(rt, test) else {
        return;
    };
    let runtime = runtime_of(rt).name();
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let runs = invocations(&truth);
    assert_eq!(runs.len(), 6, "crictl invocations in the truth");
    let spans = spans(&records);
    // Every traced call has its client, and it is crictl or the driver:
    // nri-trace's own connection (its start-up lists) is not traced.
    for s in &spans {
        let c = s
            .call
            .client
            .as_ref()
            .unwrap_or_else(|| panic!("{runtime}: a call with no client: {:?}", s.call));
        assert!(
            matches!(c.comm.as_deref(), Some("crictl" | "cri-driver")),
            "{runtime}: a call of {c:?}"
        );
    }

    // crictl: each invocation's calls are those crictl makes, every one
    // named, all on its own pid, in its cgroup, within its run.
    let mut stopped: Vec<&str> = Vec::new();
    let mut crictl_calls_seen = 0;
    for run in &runs {
        let what = format!("{runtime}: crictl {}", run.args.join(" "));
        let mine: Vec<_> = spans
            .iter()
            .filter(|s| s.call.client.as_ref().is_some_and(|c| c.pid == run.pid))
            .collect();
        let mut methods: Vec<&str> = Vec::new();
        for s in &mine {
            let c = &s.call;
            assert_eq!(c.identified, Identified::Known, "{what}: {c:?}");
            let client = c.client.as_ref().expect("filtered on it");
            assert_eq!(client.comm.as_deref(), Some("crictl"), "{what}: {client:?}");
            if let Some(cg) = run.cgroup {
                assert_eq!(client.cgroup.as_deref(), Some(cg), "{what}: {client:?}");
                assert_eq!(client.unit.as_deref(), Some(CRICTL_CGROUP), "{what}");
            }
            let start = c.start.expect("a call begun after the attach").mono_ns;
            assert!(
                run.start <= start && start <= run.end,
                "{what}: {:?} at {start}, crictl ran {}..{}",
                c.method,
                run.start,
                run.end
            );
            if let (Some(want), Some(got)) = (run.sandbox, c.sandbox_id.as_deref()) {
                assert_eq!(got, want, "{what}: {:?}", c.method);
            }
            methods.push(c.method_name().expect("known"));
        }
        methods.sort_unstable();
        let stopped_before = run.sandbox.is_some_and(|id| stopped.contains(&id));
        assert_eq!(
            methods,
            crictl_calls(run.args, stopped_before),
            "{what}: the calls traced for pid {}",
            run.pid
        );
        if matches!(run.args[0].as_str(), "stopp" | "rmp") {
            stopped.extend(run.sandbox);
        }
        crictl_calls_seen += mine.len();
    }
    let by_crictl = spans
        .iter()
        .filter(|s| s.call.client.as_ref().and_then(|c| c.comm.as_deref()) == Some("crictl"))
        .count();
    assert_eq!(
        by_crictl, crictl_calls_seen,
        "{runtime}: calls attributed to crictl outside its invocations"
    );

    // The driver: its every call after the attach traced as it made it
    // (cri_check), and each is the driver's, run in our own cgroup (the
    // test process started it).
    cri_check::assert_every_call(test, &truth, &records, cri_check::Allow::default());
    let ours = nri_trace::testing::capture::discovery::process_cgroup(std::process::id());
    let since = truth::observer_attached_ns(&truth).expect("attach note");
    let mut driver_calls = 0;
    for t in &truth {
        let Truth::Cri {
            method,
            start_mono_ns,
            end_mono_ns,
            ..
        } = t
        else {
            continue;
        };
        if *start_mono_ns < since {
            continue;
        }
        let by: Vec<&CriClient> = spans
            .iter()
            .filter(|s| {
                s.call.method_name() == Some(method.as_str())
                    && s.call.start.is_some_and(|st| {
                        *start_mono_ns <= st.mono_ns && st.mono_ns <= *end_mono_ns
                    })
            })
            .filter_map(|s| s.call.client.as_ref())
            .collect();
        assert!(
            by.iter()
                .any(|c| c.comm.as_deref() == Some("cri-driver") && c.cgroup == ours),
            "{runtime}: the driver's {method} at {start_mono_ns}: traced as made by {by:?}"
        );
        driver_calls += 1;
    }

    // The hooks of crictl's pods came under crictl's calls, those of the
    // driver's lifecycles under the driver's; none without a cause.
    let mut hooks_by: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &spans {
        let comm = s
            .call
            .client
            .as_ref()
            .and_then(|c| c.comm.as_deref())
            .unwrap_or("?");
        for h in &s.hooks {
            let Some(pod) = h.call.pod.as_ref() else {
                continue;
            };
            // The teardown of sre-0 and sre-1 was crictl's; their making,
            // and everything of the driver's own pods, the driver's.
            let teardown = matches!(
                h.hook.as_str(),
                "STOP_POD_SANDBOX" | "REMOVE_POD_SANDBOX" | "STOP_CONTAINER" | "REMOVE_CONTAINER"
            );
            let want = if teardown && SRE_PODS.contains(&pod.name.as_str()) {
                "crictl"
            } else {
                "cri-driver"
            };
            assert_eq!(
                comm,
                want,
                "{runtime}: {} of {} under {:?} by {comm}",
                h.hook.as_str(),
                pod.name,
                s.call.method
            );
            *hooks_by.entry(comm).or_default() += 1;
        }
    }
    assert!(
        hooks_by.get("crictl").copied().unwrap_or(0) >= 4,
        "{runtime}: crictl's stops and removals caused no hooks: {hooks_by:?}"
    );
    assert!(
        trace_check::uncaused_in_flight(&records).is_empty(),
        "{runtime}: {:?}",
        trace_check::uncaused_in_flight(&records)
    );
    assert!(
        findings(&records).is_empty(),
        "{runtime}: {:?}",
        findings(&records)
    );

    // The connection records carry the client too, one per dial.
    let conns = json_lines(&out, "cri_connection");
    for run in &runs {
        let dials = conns
            .iter()
            .filter(|c| c["client_process"]["pid"] == run.pid)
            .inspect(|c| {
                assert_eq!(c["client_process"]["comm"], "crictl", "{c}");
                assert_eq!(c["client"], format!("crictl[{}]", run.pid), "{c}");
            })
            .count();
        let want = if run.args[0] == "ps" { 2 } else { 1 };
        assert_eq!(
            dials, want,
            "{runtime}: crictl {:?}'s connections",
            run.args
        );
    }

    // --client: crictl's calls alone, from the saved file, in text too.
    let obs = TraceProc::observations(&out);
    let filtered = |args: &[&str]| {
        let mut a = vec![OsStr::new("replay"), obs.as_os_str()];
        a.extend(args.iter().map(OsStr::new));
        String::from_utf8(nri_trace_stdout("replay --client", a)).expect("utf-8")
    };
    let json = filtered(&["-o", "json", "--client", "crictl"]);
    let kept: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .filter(|l: &serde_json::Value| l["type"] == "cri_span")
        .collect();
    assert_eq!(kept.len(), by_crictl, "{runtime}: --client crictl spans");
    assert!(kept.iter().all(|l| l["client"]["comm"] == "crictl"));
    // Every call on a line of its own (crictl's reads are polls that text
    // otherwise counts per window: sinks/polls.rs).
    let text = filtered(&["-o", "text", "--calls", "all", "--client", CRICTL_CGROUP]);
    let by_lines = text.matches("  by crictl[").count();
    assert_eq!(
        by_lines, by_crictl,
        "{runtime}: --client {CRICTL_CGROUP} text\n{text}"
    );
    eprintln!(
        "{test} on {runtime}: {by_crictl} CRI calls by crictl in {} invocations, all named and \
         attributed; {driver_calls} of the driver's; hooks by client {hooks_by:?}",
        runs.len()
    );
}
