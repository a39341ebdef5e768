//! A plugin's identity (the runtime's `IDX-NAME`) worked out from its
//! process, for a plugin that registered before the capture started: its
//! RegisterPlugin went by unseen, and only /proc is left.
//!
//! What the runtime calls a plugin (containerd/nri `pkg/adaptation`
//! `plugin.go`): a pre-launched plugin is named by its file
//! `/opt/nri/plugins/NN-name`, passed to it as `NRI_PLUGIN_NAME` /
//! `NRI_PLUGIN_IDX` (`newLaunchedPlugin`), whatever it registers with; an
//! external plugin is named by its RegisterPlugin request
//! (`isExternal`: `p.base = req.PluginName; p.idx = req.PluginIdx`).
//!
//! What an external plugin registers with, when it uses NRI's stub
//! (`pkg/stub/stub.go`): `New` starts from the environment
//! (`NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`); the options the plugin passes
//! override it, and the upstream plugins pass their `-name` / `-idx` flags
//! (`flag.StringVar(&pluginIdx, "idx", ...)`, Go's `flag` package:
//! `-idx 10`, `--idx 10`, `-idx=10`, `--idx=10`, the last one wins);
//! `ensureIdentity` then fills what is missing from the binary's name:
//! with an index but no name, the name is `filepath.Base(os.Args[0])`;
//! with no index, both come from `ParsePluginName(Base(os.Args[0]))`
//! (`NN-name`, NN two digits: `pkg/api/plugin.go`), which replaces a name
//! given without an index.
//!
//! This module follows those rules on what /proc shows (argv, comm, the
//! two variables) and says which source decided each part. It is a guess:
//! a plugin may parse its own flags differently, or not use the stub.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Environment variables of a pre-launched plugin (nri `pkg/adaptation`
/// `plugin.go` `newLaunchedPlugin`): its name and index.
pub(crate) const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";
pub(crate) const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";

/// The kernel keeps a task's comm to `TASK_COMM_LEN` - 1 = 15 bytes: a
/// comm this long may be cut.
pub(crate) const COMM_MAX: usize = 15;

/// Where a part of an inferred identity was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clue {
    /// A `-name` / `-idx` flag in the process's argv.
    Flag,
    /// `NRI_PLUGIN_NAME` / `NRI_PLUGIN_IDX` in its environment.
    Env,
    /// The base name of argv\[0\] (`NN-name`, or the name alone).
    Argv0,
    /// The process's comm (no argv readable), at most 15 bytes.
    Comm,
}

/// How far an inferred identity can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The sources agree and nothing seen contradicts them.
    High,
    /// Something disagrees (see `conflicts`).
    Low,
}

/// Most conflicts kept per plugin (the first ones tell).
const MAX_CONFLICTS: usize = 8;

/// How a plugin's name and index were inferred without its registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferredIdentity {
    /// Which source decided the name (`None`: no name found).
    pub name_from: Option<Clue>,
    /// Which source decided the index (`None`: no index found).
    pub index_from: Option<Clue>,
    /// What was read, in words (`argv -idx 10`, `env NRI_PLUGIN_NAME=gamma`,
    /// `argv0 base name 10-logger`).
    pub evidence: Vec<String>,
    /// What disagrees with it: sources that say otherwise, or deliveries the
    /// runtime made in an order the inferred index contradicts.
    pub conflicts: Vec<String>,
    pub confidence: Confidence,
}

impl InferredIdentity {
    /// Record a conflict (once; at most [`MAX_CONFLICTS`]): the confidence
    /// drops. True when it is new.
    pub fn add_conflict(&mut self, what: String) -> bool {
        self.confidence = Confidence::Low;
        if self.conflicts.len() >= MAX_CONFLICTS || self.conflicts.contains(&what) {
            return false;
        }
        self.conflicts.push(what);
        true
    }
}

/// A name and index inferred from a process, with how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inference {
    pub name: Option<String>,
    pub index: Option<String>,
    pub how: InferredIdentity,
}

/// A flag's value in an argv, read the way Go's `flag` package reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FlagValue {
    /// Not given.
    Absent,
    /// Given as the last argument with no value (Go's `flag` stops the
    /// program there: "flag needs an argument").
    Missing,
    Value(String),
}

/// The value of flag `name` in `argv` (argv\[0\] excluded): `-name v`,
/// `--name v`, `-name=v`, `--name=v`; the last occurrence wins, `--` ends
/// the flags. Unlike Go's parser this does not stop at the first
/// non-flag argument: which flags take a value is the plugin's own
/// business, so a value (`-log-file /tmp/x`) cannot be told from an
/// operand.
pub(crate) fn flag_value(argv: &[String], name: &str) -> FlagValue {
    let mut found = FlagValue::Absent;
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        if a == "--" {
            break;
        }
        let Some(body) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            continue;
        };
        if let Some((k, v)) = body.split_once('=') {
            if k == name {
                found = FlagValue::Value(v.to_owned());
            }
        } else if body == name {
            found = args
                .next()
                .map_or(FlagValue::Missing, |v| FlagValue::Value(v.clone()));
        }
    }
    found
}

/// `NN-name` split as nri `api.ParsePluginName` does: two digits, a dash,
/// the rest (which may hold dashes).
pub(crate) fn parse_plugin_name(base: &str) -> Option<(String, String)> {
    let (idx, name) = base.split_once('-')?;
    (valid_index(idx) && !name.is_empty()).then(|| (idx.to_owned(), name.to_owned()))
}

/// nri `api.CheckPluginIndex`: exactly two ASCII digits.
pub(crate) fn valid_index(idx: &str) -> bool {
    idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit())
}

/// nri `api.CheckPluginName`: not empty, only `[a-zA-Z0-9_.+-]`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
}

/// Base name of a path (`filepath.Base`).
fn base_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// A flag's value, the evidence it leaves, and whether it is usable.
fn read_flag(
    argv: &[String],
    flag: &str,
    valid: fn(&str) -> bool,
    how: &mut InferredIdentity,
) -> Option<String> {
    match flag_value(argv, flag) {
        FlagValue::Absent => None,
        FlagValue::Missing => {
            how.evidence.push(format!("argv -{flag} has no value"));
            None
        }
        FlagValue::Value(v) if v.is_empty() => None,
        FlagValue::Value(v) => {
            how.evidence.push(format!("argv -{flag} {v}"));
            if valid(&v) {
                Some(v)
            } else {
                how.add_conflict(format!(
                    "argv -{flag} {v:?} is not a valid plugin {flag}: the runtime would refuse it"
                ));
                None
            }
        }
    }
}

/// The identity a plugin process most likely has in the runtime, from its
/// argv (`cmdline`), `comm` and the two NRI variables of its environment;
/// `None` when nothing names it.
pub(crate) fn infer(
    cmdline: &[String],
    comm: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Option<Inference> {
    let mut how = InferredIdentity {
        name_from: None,
        index_from: None,
        evidence: Vec::new(),
        conflicts: Vec::new(),
        confidence: Confidence::High,
    };
    let env_name = env.get(ENV_PLUGIN_NAME).filter(|v| !v.is_empty());
    let env_idx = env.get(ENV_PLUGIN_IDX).filter(|v| !v.is_empty());
    for (k, v) in [(ENV_PLUGIN_NAME, env_name), (ENV_PLUGIN_IDX, env_idx)] {
        if let Some(v) = v {
            how.evidence.push(format!("env {k}={v}"));
        }
    }
    let flag_name = read_flag(cmdline, "name", valid_name, &mut how);
    let flag_idx = read_flag(cmdline, "idx", valid_index, &mut how);

    // Both variables: the runtime launched it (it sets both, from the
    // file name) and names it by them, whatever it registers with.
    if let (Some(n), Some(i)) = (env_name, env_idx) {
        for (flag, env, what) in [(&flag_name, n, "name"), (&flag_idx, i, "idx")] {
            if let Some(f) = flag.as_ref().filter(|f| *f != env) {
                how.add_conflict(format!(
                    "argv -{what} {f} differs from the environment's {env} (a pre-launched \
                     plugin is named by its environment)"
                ));
            }
        }
        how.name_from = Some(Clue::Env);
        how.index_from = Some(Clue::Env);
        return Some(Inference {
            name: Some(n.clone()),
            index: Some(i.clone()),
            how,
        });
    }

    // The stub's order: options (flags) over the environment...
    let mut name = flag_name
        .map(|n| (n, Clue::Flag))
        .or_else(|| env_name.map(|n| (n.clone(), Clue::Env)));
    let mut index = flag_idx
        .map(|i| (i, Clue::Flag))
        .or_else(|| env_idx.map(|i| (i.clone(), Clue::Env)));
    // ... then the binary's name for what is missing.
    let (file, file_clue) = match cmdline.first().filter(|a| !a.is_empty()) {
        Some(a0) => (Some(base_name(a0).to_owned()), Clue::Argv0),
        None => (comm.map(str::to_owned), Clue::Comm),
    };
    let cut = file_clue == Clue::Comm && file.as_ref().is_some_and(|c| c.len() >= COMM_MAX);
    if let Some(f) = &file {
        how.evidence.push(match file_clue {
            Clue::Comm if cut => {
                format!("no argv; comm {f} (may be cut at {COMM_MAX} bytes)")
            }
            Clue::Comm => format!("no argv; comm {f}"),
            _ => format!("argv0 base name {f}"),
        });
    }
    if index.is_some() && name.is_none() {
        // ensureIdentity: the index alone, the name is the binary's.
        if let Some(f) = file.filter(|_| !cut) {
            name = Some((f, file_clue));
        } else if cut {
            how.add_conflict("the name would be the binary's, but its comm is cut".into());
        }
    } else if index.is_none() {
        match file.as_deref().and_then(parse_plugin_name) {
            Some((i, n)) => {
                if let Some((given, _)) = name.as_ref().filter(|(g, _)| *g != n) {
                    how.evidence.push(format!(
                        "the stub replaces the name {given} given without an index by the \
                         binary's"
                    ));
                }
                index = Some((i, file_clue));
                if cut {
                    // The index is whole; the name past it may not be.
                    how.add_conflict(format!(
                        "comm is {COMM_MAX} bytes: the name after the index may be cut"
                    ));
                    name = None;
                } else {
                    name = Some((n, file_clue));
                }
            }
            None => {
                if name.is_some() {
                    how.add_conflict(
                        "a name but no index (no -idx, no NRI_PLUGIN_IDX, no NN-name binary): \
                         NRI's stub would not register it"
                            .into(),
                    );
                }
            }
        }
    }
    if name.is_none() && index.is_none() {
        return None;
    }
    how.name_from = name.as_ref().map(|(_, c)| *c);
    how.index_from = index.as_ref().map(|(_, c)| *c);
    Some(Inference {
        name: name.map(|(n, _)| n),
        index: index.map(|(i, _)| i),
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(ToString::to_string).collect()
    }

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// (name, index, name_from, index_from, confidence) of an inference.
    type Got = (
        Option<String>,
        Option<String>,
        Option<Clue>,
        Option<Clue>,
        Confidence,
    );

    fn got(a: &[&str], comm: Option<&str>, e: &[(&str, &str)]) -> Option<Got> {
        infer(&argv(a), comm, &env(e)).map(|i| {
            (
                i.name,
                i.index,
                i.how.name_from,
                i.how.index_from,
                i.how.confidence,
            )
        })
    }

    /// A whole inference with high confidence.
    fn whole(n: &str, i: &str, nf: Clue, ixf: Clue) -> Got {
        (
            Some(n.into()),
            Some(i.into()),
            Some(nf),
            Some(ixf),
            Confidence::High,
        )
    }

    #[test]
    fn flag_forms_as_go_reads_them() {
        let v = |a: &[&str]| flag_value(&argv(a), "name");
        let val = |s: &str| FlagValue::Value(s.into());
        assert_eq!(v(&["p", "-name", "x"]), val("x"));
        assert_eq!(v(&["p", "--name", "x"]), val("x"));
        assert_eq!(v(&["p", "-name=x"]), val("x"));
        assert_eq!(v(&["p", "--name=x"]), val("x"));
        assert_eq!(v(&["p", "--name="]), val(""));
        // The last one wins, as in Go.
        assert_eq!(v(&["p", "-name", "a", "--name=b"]), val("b"));
        // The value is the next argument whatever it looks like.
        assert_eq!(v(&["p", "-name", "-idx"]), val("-idx"));
        // Missing value, absent, after `--`, argv0 itself, a longer flag.
        assert_eq!(v(&["p", "-idx", "10", "-name"]), FlagValue::Missing);
        assert_eq!(v(&["p", "-idx", "10"]), FlagValue::Absent);
        assert_eq!(v(&["p", "--", "-name", "x"]), FlagValue::Absent);
        assert_eq!(v(&["-name", "x"]), FlagValue::Absent);
        assert_eq!(v(&["p", "-names", "x", "-name-x", "y"]), FlagValue::Absent);
        assert_eq!(v(&[]), FlagValue::Absent);
        // Values of other flags are skipped over, not taken as the end.
        assert_eq!(v(&["p", "-log-file", "/tmp/l", "-name", "x"]), val("x"));
    }

    #[test]
    fn name_and_index_from_flags() {
        assert_eq!(
            got(
                &["/usr/bin/nri-device-injector", "-idx", "10", "-name", "dev"],
                Some("nri-device-inje"),
                &[]
            ),
            Some(whole("dev", "10", Clue::Flag, Clue::Flag))
        );
        // The lab's plugins: clap's --name / --idx.
        assert_eq!(
            got(&["nri-test-plugin", "--name=alpha", "--idx=10"], None, &[]),
            Some(whole("alpha", "10", Clue::Flag, Clue::Flag))
        );
    }

    #[test]
    fn index_flag_alone_takes_the_binary_name() {
        // The upstream device-injector and logger have -idx only.
        assert_eq!(
            got(
                &["/opt/bin/nri-device-injector", "-idx", "10", "-verbose"],
                Some("nri-device-inje"),
                &[]
            ),
            Some(whole("nri-device-injector", "10", Clue::Argv0, Clue::Flag))
        );
    }

    #[test]
    fn nn_name_binary() {
        assert_eq!(
            got(
                &["/opt/nri/plugins/40-device-injector"],
                Some("40-device-injec"),
                &[]
            ),
            Some(whole("device-injector", "40", Clue::Argv0, Clue::Argv0))
        );
        // A name flag without an index is replaced by the binary's, as
        // ensureIdentity does.
        let i = infer(&argv(&["./05-x", "-name", "y"]), None, &env(&[])).unwrap();
        assert_eq!(
            (i.name.as_deref(), i.index.as_deref()),
            (Some("x"), Some("05"))
        );
        assert!(i.how.evidence.iter().any(|e| e.contains("replaces")));
    }

    #[test]
    fn prelaunched_environment_decides() {
        assert_eq!(
            got(
                &["/opt/nri/plugins/30-gamma"],
                Some("30-gamma"),
                &[(ENV_PLUGIN_NAME, "gamma"), (ENV_PLUGIN_IDX, "30")]
            ),
            Some(whole("gamma", "30", Clue::Env, Clue::Env))
        );
        // Flags that disagree lower the confidence, the environment stays.
        let i = infer(
            &argv(&["p", "--name", "other", "--idx", "30"]),
            None,
            &env(&[(ENV_PLUGIN_NAME, "gamma"), (ENV_PLUGIN_IDX, "30")]),
        )
        .unwrap();
        assert_eq!(i.name.as_deref(), Some("gamma"));
        assert_eq!(i.how.confidence, Confidence::Low);
        assert_eq!(i.how.conflicts.len(), 1, "{:?}", i.how.conflicts);
        assert!(i.how.conflicts[0].contains("-name other"));
    }

    #[test]
    fn environment_under_flags_for_an_external_plugin() {
        // One variable only: not launched by the runtime; the stub lets
        // the option override it.
        assert_eq!(
            got(&["p", "-idx", "20"], None, &[(ENV_PLUGIN_NAME, "fromenv")]),
            Some(whole("fromenv", "20", Clue::Env, Clue::Flag))
        );
    }

    #[test]
    fn comm_when_argv_is_gone() {
        // Short comm: whole.
        assert_eq!(
            got(&[], Some("10-logger"), &[]),
            Some(whole("logger", "10", Clue::Comm, Clue::Comm))
        );
        // 15 bytes: cut; the index holds, the name is not claimed.
        let i = infer(&[], Some("40-device-injec"), &env(&[])).unwrap();
        assert_eq!((i.name, i.index.as_deref()), (None, Some("40")));
        assert_eq!(i.how.index_from, Some(Clue::Comm));
        assert_eq!(i.how.confidence, Confidence::Low);
        assert!(i.how.evidence[0].contains("may be cut"), "{:?}", i.how);
        // An index flag but a cut comm: no name either.
        let i = infer(
            &argv(&["", "-idx", "10"]),
            Some("nri-device-inje"),
            &env(&[]),
        );
        let i = i.unwrap();
        assert_eq!((i.name, i.index.as_deref()), (None, Some("10")));
    }

    #[test]
    fn nothing_or_bad_values() {
        assert_eq!(got(&["/usr/bin/nri-logger"], Some("nri-logger"), &[]), None);
        assert_eq!(got(&[], None, &[]), None);
        // Missing value: nothing from the flag; the binary then decides.
        assert_eq!(
            got(&["/x/20-beta", "-idx"], None, &[]),
            Some(whole("beta", "20", Clue::Argv0, Clue::Argv0))
        );
        // An index the runtime would refuse is not taken.
        let i = infer(
            &argv(&["/x/plug", "-idx", "7", "-name", "n"]),
            None,
            &env(&[]),
        );
        let i = i.unwrap();
        assert_eq!((i.name.as_deref(), i.index), (Some("n"), None));
        assert_eq!(i.how.confidence, Confidence::Low);
        assert!(i.how.conflicts.iter().any(|c| c.contains("\"7\"")));
        // NN-name rules: two digits, something after the dash.
        assert_eq!(
            parse_plugin_name("10-a-b"),
            Some(("10".into(), "a-b".into()))
        );
        assert_eq!(parse_plugin_name("1-a"), None);
        assert_eq!(parse_plugin_name("10-"), None);
        assert_eq!(parse_plugin_name("ab-c"), None);
        assert!(!valid_name("a b") && valid_name("a.b+c_d-e"));
    }

    #[test]
    fn conflicts_are_kept_once_and_bounded() {
        let mut i = infer(&argv(&["/x/10-a"]), None, &env(&[])).unwrap().how;
        assert_eq!(i.confidence, Confidence::High);
        assert!(i.add_conflict("x".into()));
        assert!(!i.add_conflict("x".into()));
        for n in 0..20 {
            i.add_conflict(n.to_string());
        }
        assert_eq!(i.conflicts.len(), MAX_CONFLICTS);
        assert_eq!(i.confidence, Confidence::Low);
    }
}
