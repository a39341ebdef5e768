//! The demo behind `cargo xtask demo`: the lab with a few plugins and
//! nri-trace watching it, as text or as its TUI on a terminal.

use std::{path::Path, process::Command, thread::sleep, time::Duration};

use anyhow::{Context, Result};

use super::{Bins, PluginSpec, Run};
use crate::{labctl::Lab, truth::PluginEvent};

/// The demo behind `cargo xtask demo`: the lab with a slow and a plain
/// plugin, `nri-trace watch -o text` on the lab's CRI and NRI sockets (its output,
/// each CRI call with the NRI hooks it caused and their times, then the
/// latency tables, goes to this terminal), two pod lifecycles, then
/// everything is torn down.
pub fn demo(lab: Lab, bins: Bins, nri_trace: &Path, nri_args: &[String]) -> Result<()> {
    let out = std::env::temp_dir().join("nri-trace-demo");
    let mut r = Run::new("happy", lab, bins, &out)?;
    let res = (|| -> Result<()> {
        r.lab.clear_plugins()?;
        r.prelaunch(&PluginSpec {
            name: "audit",
            idx: "30",
            args: &[],
        })?;
        r.lab.up("2s")?;
        let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
        r.wait_plugin("audit", configured, Duration::from_secs(10))?;
        eprintln!("demo: lab up; pre-launched plugin 30-audit registered");
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) && nri_args.is_empty() {
            return demo_tui(&mut r, nri_trace);
        }
        // `-o text` unless the arguments choose a format.
        let format_given = nri_args
            .iter()
            .any(|a| a == "-o" || a.starts_with("--output") || a.starts_with("-o"));
        let text: &[&str] = if format_given { &[] } else { &["-o", "text"] };
        let mut trace = Command::new(nri_trace)
            .arg("watch")
            .args(text)
            .arg("--cri-socket")
            .arg(r.lab.cri_socket())
            .arg("--nri-socket")
            .arg(r.lab.nri_socket())
            .args(nri_args)
            .spawn()
            .with_context(|| format!("starting {}", nri_trace.display()))?;
        // Attaching takes well under a second (doctor reports the time).
        sleep(Duration::from_millis(1500));
        eprintln!("demo: external plugins 10-slow (RunPodSandbox +300 ms) and 20-plain connect");
        r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:300"])?;
        r.plugin("plain", "20", &[])?;
        eprintln!("demo: driving 2 pod lifecycles (kubelet-like CRI calls)");
        let res = r.lifecycle("demo", 2, 1, 1);
        sleep(Duration::from_millis(500));
        unsafe { libc::kill(trace.id() as i32, libc::SIGTERM) };
        let _ = trace.wait();
        res?;
        Ok(())
    })();
    let down = r.lab.down();
    let lab = r.lab.clone();
    drop(r);
    let _ = lab.clear_plugins();
    res?;
    down?;
    eprintln!(
        "demo: done; ground truth of what the driver and plugins did: {}",
        out.join("truth.ndjson").display()
    );
    Ok(())
}

/// The demo on a terminal: the TUI on the lab while a scenario mix runs
/// (a slow plugin, a plugin that fails teardown, a plain one), until the
/// user quits it. Nothing else writes to the terminal meanwhile.
fn demo_tui(r: &mut Run, nri_trace: &Path) -> Result<()> {
    eprintln!(
        "demo: opening the TUI; plugins 05-failer, 10-slow, 20-plain join 30-audit and \
         pods come and go until you quit it with q"
    );
    sleep(Duration::from_millis(1500));
    // No socket flags: it finds the lab's containerd as it would a node's.
    let mut tui = Command::new(nri_trace)
        .args(["watch", "-o", "tui"])
        .spawn()
        .with_context(|| format!("starting {}", nri_trace.display()))?;
    // Attached before the plugins register, so it sees their names.
    sleep(Duration::from_millis(1500));
    r.plugin(
        "failer",
        "05",
        &["--on", "STOP_POD_SANDBOX=error:demo teardown refusal"],
    )?;
    r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:300"])?;
    r.plugin("plain", "20", &[])?;
    let mut rounds = 0u32;
    let mut failed = None;
    let status = loop {
        if let Some(st) = tui.try_wait()? {
            break st;
        }
        // A round: two pods through their whole lifecycle, one at a time.
        if failed.is_none() {
            if let Err(e) = r.lifecycle("demo", 2, 1, 1) {
                failed = Some(e);
            }
            rounds += 1;
        } else {
            sleep(Duration::from_millis(200));
        }
    };
    eprintln!("demo: the TUI exited ({status}) after {rounds} rounds of 2 pods");
    if let Some(e) = failed {
        return Err(e.context("the demo's pod lifecycles"));
    }
    Ok(())
}
