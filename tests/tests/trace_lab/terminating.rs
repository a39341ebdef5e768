//! Pods stuck in Terminating, on every runtime of the matrix: a container ignoring
//! SIGTERM, a rootfs held busy, a process stuck in the kernel, a plugin hung
//! in StopPodSandbox (with its client still there or gone).

use super::*;

/// A container that ignores SIGTERM: StopContainer waits for the grace
/// period and SIGKILL. Slow, but the NRI contract holds: no finding. The
/// kernel shows why it was slow: explain lists the SIGTERM the kernel
/// reports ignored, the SIGKILL 2 s later and the exit it caused. The
/// same on the three runtimes (docs/lab.md: StopContainer 2081, 2055 and
/// 2036 ms).
#[test]
fn trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(None);
}

#[test]
fn ctrd17_trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(Some(Runtime::Containerd17));
}

#[test]
fn crio_trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(Some(Runtime::CriO));
}

fn check_ignore_sigterm(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "ignore-sigterm") else {
        return;
    };
    check_correlation("ignore-sigterm", &out);
    // Every CRI call ok (the scenario's verify), and so for nri-trace.
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let failed = failed_calls_traced_failed("ignore-sigterm", &truth, &records);
    assert_eq!(failed, Vec::<String>::new());
    assert_eq!(findings(&records), vec![]);
    let v = explain(&out, "ignore-sigterm-0");
    assert_eq!(v["verdict"], "gone", "{v}");
    let kernel = kernel_lines(&v);
    let at = |what: &str| {
        kernel
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {kernel:#?}"))
    };
    let term = at("sent SIGTERM to pid ");
    assert!(kernel[term].ends_with(": ignored"), "{}", kernel[term]);
    let kill = at("sent SIGKILL to pid ");
    let exit = at("exited: killed by SIGKILL");
    assert!(term < kill && kill < exit, "{kernel:#?}");
}

/// A process holding the container's rootfs (its cwd) while the pod is torn
/// down with a 12 s deadline: the teardown blocks until the deadline.
/// Every delivery is correlated; no NRI rule fires, the kernel rule
/// teardown-unmount-failed does (the shim's unmount fails with EBUSY); each
/// CRI call the driver saw fail is reported failed by nri-trace, at the
/// same time. While the pod is stuck (the scenario keeps the holder 10 s
/// more), `nri-trace explain` on the observations recorded so far names the
/// blocked call, the failed unmount and the holder: its pid and the rootfs
/// it holds.
#[test]
fn trace_busy_mount() {
    check_busy_mount(None);
}

#[test]
fn ctrd17_trace_busy_mount() {
    check_busy_mount(Some(Runtime::Containerd17));
}

#[test]
fn crio_trace_busy_mount() {
    check_busy_mount(Some(Runtime::CriO));
}

fn check_busy_mount(rt: Option<Runtime>) {
    let runtime = runtime_of(rt);
    let Some((out, records, v)) = traced_and_explained(rt, "busy-mount", "busy", "holder") else {
        return;
    };
    check_correlation("busy-mount", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // Each CRI call nri-trace reports failed exactly when the driver saw it
    // fail, at the same time.
    let failed = failed_calls_traced_failed("busy-mount", &truth, &records);
    // explain, while the mount was held: the holder the scenario started.
    let (holder_pid, rootfs) = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, .. } if text.starts_with("holder pid ") => {
                let mut w = text.split_whitespace();
                let pid: u32 = w.nth(2)?.parse().ok()?;
                Some((pid, text.rsplit(' ').next()?.to_string()))
            }
            _ => None,
        })
        .expect("holder note");
    if runtime == Runtime::CriO {
        check_busy_mount_crio(&records, &failed, &v, &rootfs);
        return;
    }
    // No NRI rule; the kernel's side: the shim's unmount of the rootfs
    // fails with EBUSY (retried every 50 ms, one finding).
    assert_eq!(
        findings(&records),
        vec![(TEARDOWN_UNMOUNT_FAILED, None, true)]
    );
    assert!(!failed.is_empty(), "the teardown did not block: {truth:?}");
    assert_eq!(v["verdict"], "blocked", "{v}");
    // Waited from the failed call to the moment explain ran (on the node).
    assert!(v["waited_ns"].as_u64().unwrap_or(0) > 0, "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("StopContainer of container main did not complete"),
        "{sentence}"
    );
    assert!(
        sentence.contains(&format!(
            "pid {holder_pid} (sleep) holds container main's rootfs {rootfs} (its cwd"
        )),
        "{sentence}"
    );
    assert!(
        sentence.contains(&format!("unmounting {rootfs} failed with EBUSY")),
        "{sentence}"
    );
}

/// CRI-O tears the pod down with its rootfs held (docs/lab.md): every CRI
/// call of the driver succeeded, so no finding, and explain, while the
/// holder still had its cwd there, finds the pod gone; the kernel shows
/// why.
fn check_busy_mount_crio(
    records: &[Record],
    failed: &[String],
    v: &serde_json::Value,
    rootfs: &str,
) {
    assert_eq!(
        failed,
        Vec::<String>::new(),
        "the teardown blocked on CRI-O"
    );
    assert_eq!(findings(records), vec![]);
    assert_eq!(v["verdict"], "gone", "{v}");
    let umounts: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::Sandbox(e)) => match &e.op {
                SandboxOp::Umount { path, flags, errno }
                    if path.starts_with(rootfs.trim_end_matches("/merged")) =>
                {
                    Some((path.clone(), *flags, *errno, e.comm.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    eprintln!("busy-mount on CRI-O: unmounts of the container's storage: {umounts:?}");
    // Why it does not block: crio unmounts the rootfs lazily (umount2 with
    // MNT_DETACH, containers/storage's overlay driver), which succeeds
    // with the holder's cwd inside; the probes saw it succeed.
    const MNT_DETACH: u64 = 2;
    assert!(
        umounts
            .iter()
            .any(|(path, flags, errno, comm)| path == rootfs
                && flags & MNT_DETACH != 0
                && *errno == 0
                && comm == "crio"),
        "no lazy unmount of {rootfs} by crio: {umounts:?}"
    );
}

/// A container process stuck in a FUSE read (state D) survives SIGKILL:
/// StopContainer runs into its deadline. The sandbox probes see the SIGKILL
/// and no exit: the finding process-survives-sigkill, for that pod; and
/// `explain`, while the pod is stuck, names the pid the scenario saw in
/// state D, alive after SIGKILL, with its state from /proc. The same on
/// the three runtimes (docs/lab.md: the first StopContainer runs into the
/// driver's deadline on each); each CRI call is reported failed exactly
/// when the driver saw it fail.
#[test]
fn trace_unkillable() {
    check_unkillable(None);
}

#[test]
fn ctrd17_trace_unkillable() {
    check_unkillable(Some(Runtime::Containerd17));
}

#[test]
fn crio_trace_unkillable() {
    check_unkillable(Some(Runtime::CriO));
}

fn check_unkillable(rt: Option<Runtime>) {
    let Some((out, records, v)) =
        traced_and_explained(rt, "unkillable", "unkillable", "stuck pid ")
    else {
        return;
    };
    check_correlation("unkillable", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // The first StopContainer ran into its deadline (the scenario's
    // verify): nri-trace reports it failed, and every later call as the
    // driver saw it.
    let failed = failed_calls_traced_failed("unkillable", &truth, &records);
    assert!(failed.iter().any(|m| m == "StopContainer"), "{failed:?}");
    let pid: u32 = note(&truth, "stuck pid ")
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .expect("stuck pid");
    assert_eq!(v["verdict"], "blocked", "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains(&format!("pid {pid} (cat) of container ")),
        "{sentence}"
    );
    assert!(sentence.contains(" after SIGKILL "), "{sentence}");
    assert!(
        sentence.contains(&format!("on this node pid {pid} (cat) is in state D")),
        "{sentence}"
    );
    let f = findings(&records);
    assert!(
        f.iter()
            .any(|(rule, _, _)| *rule == PROCESS_SURVIVES_SIGKILL),
        "{f:?}"
    );
    assert!(
        f.iter()
            .all(|(rule, _, _)| *rule == PROCESS_SURVIVES_SIGKILL),
        "{f:?}"
    );
    // After the release the process exits, killed by the SIGKILL.
    let exited = records.iter().any(|r| {
        matches!(r, Record::Observed(Observation::Sandbox(s)) if s.tgid == pid
            && s.op == SandboxOp::Exit { status: Some(9) })
    });
    assert!(exited, "no exit of pid {pid} killed by SIGKILL");
}

/// An NRI plugin hangs in StopPodSandbox: the CRI call fails at its 5 s
/// deadline while the hook's request is unanswered (or containerd closed
/// the plugin at the deadline: both happen, see the scenario). `explain`
/// while the pod is stuck names the plugin and its StopPodSandbox hook.
/// containerd may then deliver StopPodSandbox to the next plugin after the
/// CRI call is over (with the expired context): that delivery has no CRI
/// cause, and nri-trace says so; any other uncaused delivery is an error.
///
/// CRI-O runs into the same race between the client's cancel and its own
/// deadline (nri 0.11 `pkg/adaptation/plugin.go` `StateChange`: only an
/// expired context is fatal, and then the error is dropped). When the
/// cancel comes first the hook's error fails the stop, the pod is not
/// marked stopped (cri-o `server/sandbox_stop_linux.go`), and the retry
/// delivers StopPodSandbox to the hung plugin again, returning only when
/// NRI's 30 s request timeout closes it; the plain plugin is told then.
/// When CRI-O's deadline comes first it closes the hung plugin, marks the
/// pod stopped, and the retry finds it stopped: one delivery. And CRI-O
/// tears the pod's network down before it tells the plugins (the netns
/// clause broken, as in netns-teardown).
#[test]
fn trace_hung_teardown_hook() {
    check_hung_teardown_hook(None);
}

#[test]
fn ctrd17_trace_hung_teardown_hook() {
    check_hung_teardown_hook(Some(Runtime::Containerd17));
}

#[test]
fn crio_trace_hung_teardown_hook() {
    check_hung_teardown_hook(Some(Runtime::CriO));
}

fn check_hung_teardown_hook(rt: Option<Runtime>) {
    use nri_trace::model::NriOutcome;
    let crio = runtime_of(rt) == Runtime::CriO;
    let Some((out, records, v)) =
        traced_and_explained(rt, "hung-teardown-hook", "hung-teardown", "hung hook kept")
    else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // Each CRI call reported failed exactly when the driver saw it fail:
    // the first StopPodSandbox (the scenario's verify), not the retry.
    let failed = failed_calls_traced_failed("hung-teardown-hook", &truth, &records);
    assert_eq!(failed, vec!["StopPodSandbox".to_string()], "{failed:?}");
    let stops: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) if s.call.method_name() == Some("StopPodSandbox") => Some(s),
            _ => None,
        })
        .collect();
    let stop = stops
        .iter()
        .find(|s| !s.call.outcome.is_ok())
        .expect("a failed StopPodSandbox span");
    let stop_end = stop.call.end.expect("its end").mono_ns;
    // The hung hook is in the span, timed out, whether the runtime closed
    // 10-hung's connection (its deadline fired first) or left it open (the
    // client's cancel came first).
    let hung_in = |s: &nri_trace::engine::CriSpan| -> Vec<(String, NriOutcome)> {
        s.hooks
            .iter()
            .filter(|h| h.call.plugin.label() == "10-hung")
            .map(|h| (h.hook.as_str().to_string(), h.call.outcome.clone()))
            .collect()
    };
    assert_eq!(
        hung_in(stop),
        vec![("STOP_POD_SANDBOX".to_string(), NriOutcome::TimedOut)],
        "{stop:?}"
    );
    // As many StopPodSandbox hooks of 10-hung traced as the plugin
    // recorded deliveries: one on containerd (it calls a pod's hook once),
    // two on CRI-O unless it closed 10-hung before the retry (its own
    // deadline came first, see above).
    let delivered = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), .. }
                if plugin == "hung" && e == "STOP_POD_SANDBOX")
        })
        .count();
    let traced: usize = stops
        .iter()
        .map(|s| {
            hung_in(s)
                .iter()
                .filter(|(h, _)| h == "STOP_POD_SANDBOX")
                .count()
        })
        .sum();
    assert_eq!(traced, delivered, "{stops:?}");
    let (retry_start, _) = truth::cri_spans(&truth, "StopPodSandbox")
        .nth(1)
        .expect("the driver's retried StopPodSandbox");
    let closed_before_retry = truth.iter().any(|t| {
        matches!(t, Truth::Plugin { plugin, mono_ns, what: PluginEvent::Disconnected { .. }, .. }
            if plugin == "hung" && *mono_ns < retry_start)
    });
    let retry = stops
        .iter()
        .find(|s| s.call.outcome.is_ok())
        .expect("an ok StopPodSandbox span");
    eprintln!(
        "hung-teardown-hook: 10-hung {} before the retry, {delivered} StopPodSandbox deliveries",
        if closed_before_retry {
            "closed"
        } else {
            "still connected"
        }
    );
    if crio && closed_before_retry {
        // CRI-O's deadline came first: 10-hung closed in the first call,
        // the pod marked stopped, the retry tells no plugin.
        assert_eq!(delivered, 1, "{stops:?}");
        assert!(retry.hooks.is_empty(), "{retry:?}");
    } else if crio {
        // The retry: 10-hung told again, unanswered until NRI's request
        // timeout closed it (plugin-timeout, the connection closed); then
        // 20-plain, in the same call.
        assert_eq!(delivered, 2, "{stops:?}");
        assert_eq!(
            hung_in(retry),
            vec![("STOP_POD_SANDBOX".to_string(), NriOutcome::TimedOut)],
            "{retry:?}"
        );
        assert!(
            retry
                .hooks
                .iter()
                .any(|h| h.call.plugin.label() == "20-plain" && h.hook == "STOP_POD_SANDBOX"),
            "{retry:?}"
        );
        let m = finding_details(&records, PLUGIN_TIMEOUT);
        assert!(
            m.iter().any(|(p, d)| *p == Some("10-hung")
                && matches!(d, Detail::PluginTimeout { hook, connection_closed: true, .. }
                    if hook == "STOP_POD_SANDBOX")),
            "{m:?}"
        );
    }
    for r in &records {
        if let Record::NriUncaused(u) = r {
            if u.no_cri_cause != NoCause::NoCriCallInFlight {
                continue; // plugin lifecycle calls (register, configure, ...)
            }
            let c = &u.span.call;
            assert_eq!(u.span.hook, "STOP_POD_SANDBOX", "{c:?}");
            assert!(
                c.start.is_some_and(|t| t.mono_ns + 50_000_000 >= stop_end),
                "uncaused before the CRI call ended: {c:?}"
            );
        }
    }
    assert_eq!(v["verdict"], "blocked", "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("10-hung") && sentence.contains("STOP_POD_SANDBOX"),
        "{sentence}"
    );
    assert!(
        sentence.contains("hook has not returned for")
            || sentence.contains("plugin hook 10-hung STOP_POD_SANDBOX: "),
        "{sentence}"
    );
    // The pod has its own netns: containerd told the plugins StopPodSandbox
    // before it unmounted it (it does so once the hook is over); CRI-O
    // tears the network down first (docs/contract.md).
    let netns: Vec<_> = json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "stop-pod-sandbox-before-netns-teardown")
        .collect();
    assert_eq!(netns.len(), 1, "{netns:?}");
    let c = &netns[0];
    let (held, broken, case) = if crio {
        (0, 1, &c["broken_case"])
    } else {
        (1, 0, &c["held_case"])
    };
    assert_eq!(
        (c["held"].as_u64(), c["broken"].as_u64()),
        (Some(held), Some(broken)),
        "{c}"
    );
    assert!(
        case["kernel"]["path"]
            .as_str()
            .is_some_and(|p| p.contains("/netns/")),
        "{c}"
    );
}

/// The CRI client is killed while 10-hung holds StopPodSandbox: the
/// runtime gives up without closing the plugin's connection (its context
/// was cancelled, not expired), so nothing on the wire ends the hook. It
/// comes out timed out at its deadline, inside the StopPodSandbox span that
/// the client's going ended, on a connection that goes on carrying events:
/// the events the plugin recorded after the kill, traced on it in order.
/// Those differ (docs/lab.md): containerd sends REMOVE_CONTAINER and
/// REMOVE_POD_SANDBOX at the later teardown; CRI-O, which did not mark the
/// pod stopped, sends STOP_POD_SANDBOX again.
#[test]
fn trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(None);
}

#[test]
fn ctrd17_trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(Some(Runtime::Containerd17));
}

#[test]
fn crio_trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(Some(Runtime::CriO));
}

fn check_hung_teardown_client_gone(rt: Option<Runtime>) {
    let crio = runtime_of(rt) == Runtime::CriO;
    let Some((out, records)) = traced_on(rt, "hung-teardown-client-gone") else {
        return;
    };
    let stop = records
        .iter()
        .find_map(|r| match r {
            Record::CriSpan(s) if s.call.method_name() == Some("StopPodSandbox") => Some(s),
            _ => None,
        })
        .expect("a StopPodSandbox span");
    assert!(!stop.call.outcome.is_ok(), "{stop:?}");
    let hung: Vec<_> = stop
        .hooks
        .iter()
        .filter(|h| h.call.plugin.label() == "10-hung")
        .collect();
    assert_eq!(hung.len(), 1, "{stop:?}");
    let hook = &hung[0].call;
    assert_eq!(hung[0].hook, "STOP_POD_SANDBOX");
    assert_eq!(
        hook.outcome,
        nri_trace::model::NriOutcome::TimedOut,
        "{hook:?}"
    );
    // No close ended it: its duration is its own deadline (the 8 s left of
    // the CRI call's when the runtime called the plugin).
    assert_eq!(hook.end, None, "{hook:?}");
    let timeout = hook.timeout_nano.expect("a deadline") as u64;
    assert_eq!(hook.duration_ns, Some(timeout), "{hook:?}");
    assert!(
        (7_000_000_000..=8_000_000_000).contains(&timeout),
        "{hook:?}"
    );
    // The same connection carries 10-hung's later events, the ones the
    // plugin recorded after the client was killed, and no plugin-gone
    // record for it came before them.
    let later: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(&s.hooks),
            _ => None,
        })
        .flatten()
        .filter(|h| h.call.conn == hook.conn && h.call.start > hook.start)
        .map(|h| h.hook.as_str())
        .collect();
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let killed = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, mono_ns } if text == "cri-driver killed during StopPodSandbox" => {
                Some(*mono_ns)
            }
            _ => None,
        })
        .expect("the note of the driver's kill");
    let recorded: Vec<&str> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Nri {
                plugin,
                event: Some(e),
                recv_mono_ns,
                ..
            } if plugin == "hung" && *recv_mono_ns > killed => Some(e.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(later, recorded);
    let again = if crio {
        "STOP_POD_SANDBOX"
    } else {
        "REMOVE_POD_SANDBOX"
    };
    assert!(later.contains(&again), "{later:?}");
    let gone_before = records.iter().any(|r| {
        matches!(r, Record::Observed(Observation::NriPluginGone { conn, ts, .. })
            if *conn == hook.conn && hook.start.is_some_and(|s| ts.mono_ns < s.mono_ns + timeout))
    });
    assert!(
        !gone_before,
        "10-hung's connection closed before the deadline"
    );
    // One plugin-timeout per StopPodSandbox the plugin recorded and never
    // answered: the first with the connection left open; on CRI-O the
    // later teardown's, which NRI's 30 s request timeout ended by closing
    // the connection (the plugin recorded the close before that
    // StopPodSandbox returned: CRI-O waited for it).
    let unanswered = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), reply_mono_ns: None, .. }
                if plugin == "hung" && e == "STOP_POD_SANDBOX")
        })
        .count();
    let m = finding_details(&records, PLUGIN_TIMEOUT);
    let closed: Vec<bool> = m
        .iter()
        .filter_map(|(p, d)| match d {
            Detail::PluginTimeout {
                hook,
                connection_closed,
                ..
            } if *p == Some("10-hung") && hook == "STOP_POD_SANDBOX" => Some(*connection_closed),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), unanswered, "{m:?}");
    if crio {
        assert_eq!(closed, vec![false, true], "{m:?}");
        let disconnected = truth.iter().find_map(|t| match t {
            Truth::Plugin {
                plugin,
                mono_ns,
                what: PluginEvent::Disconnected { .. },
                ..
            } if plugin == "hung" => Some(*mono_ns),
            _ => None,
        });
        let last_stop_end = truth::cri_spans(&truth, "StopPodSandbox")
            .next_back()
            .map(|(_, end)| end);
        assert!(
            disconnected.is_some_and(|d| last_stop_end.is_some_and(|e| d < e)),
            "hung not closed during the later StopPodSandbox: {disconnected:?} {last_stop_end:?}"
        );
    } else {
        assert_eq!(closed, vec![false], "{m:?}");
    }
    // And nothing but the hung hook's: its timeouts and the teardown
    // hooks it failed (plus, once CRI-O closed it, the deliveries it
    // missed, counted under plugin-timeout).
    let f = findings(&records);
    assert!(
        f.iter().all(
            |(rule, p, _)| [PLUGIN_TIMEOUT, TEARDOWN_HOOK_FAILED].contains(rule)
                && p.as_deref() == Some("10-hung")
        ),
        "{f:?}"
    );
}
