//! What a test plugin does: its identity, where it records, which events it
//! subscribes to and the fault to inject per request.
//!
//! JSON form (every key optional; the CLI and the environment fill in):
//!
//! ```json
//! {
//!   "name": "slow", "idx": "10",
//!   "truth": "/tmp/slow.truth.ndjson",
//!   "socket": "/var/lib/nri-trace-lab/run/nri.sock",
//!   "events": "all",
//!   "on": {
//!     "RUN_POD_SANDBOX": "delay:300",
//!     "STOP_POD_SANDBOX": {"kind": "error", "message": "boom"},
//!     "CREATE_CONTAINER": "hang",
//!     "SYNCHRONIZE": "delay:50"
//!   }
//! }
//! ```
//!
//! `events`: a list or a comma-separated string of event names, or `all`
//! (the default: the 11 events of NRI v0.6, mask 0x7ff), `none`, `pod`,
//! `container`. Names are matched ignoring case, `_` and `-`, so
//! `RUN_POD_SANDBOX`, `run-pod-sandbox` and `runpodsandbox` are the same.
//! The runtime reads a mask of 0 as "all events" (v0.6.1
//! `plugin.configure`), so `none` cannot unsubscribe from everything.
//!
//! `on` keys: an event name, or `CONFIGURE`, `SYNCHRONIZE`, `SHUTDOWN` for
//! those requests. Actions ([`Action`] of truth.rs): `ok`, `delay:MS`,
//! `error:MESSAGE`, `hang`, `crash`, `unsplit` (SYNCHRONIZE: answer a
//! split one as a pre-v0.7 stub does), or the JSON object form of
//! [`Action`].

use std::{collections::BTreeMap, fmt, path::PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::{nri_api::Event, truth::Action};

/// The events of NRI v0.6 (1..=11): what the lab's containerd can send.
pub const V06_EVENTS_MASK: i32 = (1 << 11) - 1;

/// Bit of `event` in a ConfigureResponse mask (`1 << (event - 1)`).
pub fn event_bit(event: Event) -> i32 {
    1 << (event as i32 - 1)
}

/// Upper-case wire name of an event number, e.g. "RUN_POD_SANDBOX".
pub fn event_name(event: i32) -> String {
    Event::try_from(event).map_or_else(
        |_| format!("EVENT_{event}"),
        |e| e.as_str_name().to_string(),
    )
}

fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Parse one event name (see the module docs for the accepted spellings).
pub fn parse_event(name: &str) -> Option<Event> {
    let n = norm(name.trim());
    (1..Event::Last as i32)
        .filter_map(|i| Event::try_from(i).ok())
        .find(|e| norm(e.as_str_name()) == n)
}

/// What a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Configure,
    Synchronize,
    Shutdown,
    Event(i32),
}

impl Target {
    pub fn parse(s: &str) -> Result<Self> {
        match norm(s.trim()).as_str() {
            "configure" => Ok(Target::Configure),
            "synchronize" => Ok(Target::Synchronize),
            "shutdown" => Ok(Target::Shutdown),
            _ => parse_event(s)
                .map(|e| Target::Event(e as i32))
                .with_context(|| format!("unknown event or request {s:?}")),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Configure => f.write_str("CONFIGURE"),
            Target::Synchronize => f.write_str("SYNCHRONIZE"),
            Target::Shutdown => f.write_str("SHUTDOWN"),
            Target::Event(e) => f.write_str(&event_name(*e)),
        }
    }
}

/// Parse the short form of an action: `ok`, `delay:MS`, `error:MESSAGE`,
/// `hang`, `crash`, `unsplit` (Synchronize only).
pub fn parse_action(s: &str) -> Result<Action> {
    let (kind, arg) = match s.split_once(':') {
        Some((k, a)) => (k.trim(), Some(a)),
        None => (s.trim(), None),
    };
    Ok(match (kind.to_ascii_lowercase().as_str(), arg) {
        ("ok", None) => Action::Ok,
        ("delay", Some(ms)) => Action::Delay {
            ms: ms
                .trim()
                .parse()
                .with_context(|| format!("bad delay {ms:?} in {s:?}"))?,
        },
        ("error", Some(m)) => Action::Error {
            message: m.to_string(),
        },
        ("error", None) => Action::Error {
            message: "injected error".into(),
        },
        ("hang", None) => Action::Hang,
        ("crash", None) => Action::Crash,
        ("unsplit", None) => Action::Unsplit,
        _ => bail!("bad action {s:?}: want ok, delay:MS, error:MESSAGE, hang, crash or unsplit"),
    })
}

/// An action as written in JSON: the short string or the [`Action`] object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ActionSpec {
    Short(String),
    Full(Action),
}

impl ActionSpec {
    pub fn action(&self) -> Result<Action> {
        match self {
            ActionSpec::Short(s) => parse_action(s),
            ActionSpec::Full(a) => Ok(a.clone()),
        }
    }
}

/// A list of events as written in JSON: `"a,b"` or `["a", "b"]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EventList {
    Csv(String),
    List(Vec<String>),
}

impl EventList {
    /// The ConfigureResponse mask.
    pub fn mask(&self) -> Result<i32> {
        let items: Vec<String> = match self {
            EventList::Csv(s) => s.split(',').map(str::to_string).collect(),
            EventList::List(v) => v.clone(),
        };
        let mut mask = 0;
        for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match norm(item).as_str() {
                "all" => mask |= V06_EVENTS_MASK,
                "none" => {}
                "pod" | "podsandbox" => {
                    for e in [
                        Event::RunPodSandbox,
                        Event::StopPodSandbox,
                        Event::RemovePodSandbox,
                    ] {
                        mask |= event_bit(e);
                    }
                }
                "container" => {
                    for e in 4..=11 {
                        mask |= 1 << (e - 1);
                    }
                }
                _ => {
                    let e = parse_event(item).with_context(|| format!("unknown event {item:?}"))?;
                    mask |= event_bit(e);
                }
            }
        }
        Ok(mask)
    }
}

/// The plugin's configuration (JSON, see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginConfig {
    pub name: Option<String>,
    pub idx: Option<String>,
    /// Truth file (NDJSON, appended).
    pub truth: Option<PathBuf>,
    /// NRI socket of an external plugin. Unset: pre-launched (fd from
    /// NRI_PLUGIN_SOCKET) or the default socket.
    pub socket: Option<PathBuf>,
    /// Subscribed events (default: all 11 of NRI v0.6).
    pub events: Option<EventList>,
    /// Fault per event or request.
    pub on: BTreeMap<String, ActionSpec>,
}

impl PluginConfig {
    /// Parse JSON text, or `@PATH` to read it from a file.
    pub fn parse_arg(arg: &str) -> Result<Self> {
        let text = match arg.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?
            }
            None => arg.to_string(),
        };
        Self::from_json(&text)
    }

    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).context("parsing the plugin config (JSON)")
    }

    /// Overlay `other` on `self`: its set keys win, `on` entries merge.
    pub fn merge(&mut self, other: PluginConfig) {
        if other.name.is_some() {
            self.name = other.name;
        }
        if other.idx.is_some() {
            self.idx = other.idx;
        }
        if other.truth.is_some() {
            self.truth = other.truth;
        }
        if other.socket.is_some() {
            self.socket = other.socket;
        }
        if other.events.is_some() {
            self.events = other.events;
        }
        self.on.extend(other.on);
    }

    /// Check everything parses and build the per-request behaviour.
    pub fn behaviour(&self) -> Result<Behaviour> {
        let mask = match &self.events {
            Some(l) => l.mask()?,
            None => V06_EVENTS_MASK,
        };
        let mut actions = BTreeMap::new();
        for (k, v) in &self.on {
            let t = Target::parse(k)?;
            let a = v.action().with_context(|| format!("action for {k}"))?;
            if let Target::Event(e) = t {
                if mask & (1 << (e - 1)) == 0 && mask != 0 {
                    log::warn!("{t} has action {a:?} but is not subscribed: it will never fire");
                }
            }
            actions.insert(t, a);
        }
        Ok(Behaviour { mask, actions })
    }
}

/// The resolved behaviour of a plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Behaviour {
    /// ConfigureResponse.events.
    pub mask: i32,
    pub actions: BTreeMap<Target, Action>,
}

impl Behaviour {
    pub fn action(&self, t: Target) -> Action {
        self.actions.get(&t).cloned().unwrap_or(Action::Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_short_form() {
        assert_eq!(parse_action("ok").unwrap(), Action::Ok);
        assert_eq!(
            parse_action("delay:300").unwrap(),
            Action::Delay { ms: 300 }
        );
        assert_eq!(
            parse_action("error:boom: x").unwrap(),
            Action::Error {
                message: "boom: x".into()
            }
        );
        assert_eq!(parse_action("HANG").unwrap(), Action::Hang);
        assert_eq!(parse_action("crash").unwrap(), Action::Crash);
        assert_eq!(parse_action("unsplit").unwrap(), Action::Unsplit);
        assert!(parse_action("delay").is_err());
        assert!(parse_action("delay:x").is_err());
        assert!(parse_action("sleep:1").is_err());
    }

    #[test]
    fn event_names_and_mask() {
        assert_eq!(parse_event("RUN_POD_SANDBOX"), Some(Event::RunPodSandbox));
        assert_eq!(parse_event("run-pod-sandbox"), Some(Event::RunPodSandbox));
        assert_eq!(parse_event("removecontainer"), Some(Event::RemoveContainer));
        assert_eq!(parse_event("UNKNOWN"), None);
        assert_eq!(parse_event("LAST"), None);
        assert_eq!(event_bit(Event::RunPodSandbox), 1);
        assert_eq!(event_bit(Event::RemoveContainer), 1 << 10);
        assert_eq!(EventList::Csv("all".into()).mask().unwrap(), 0x7ff);
        assert_eq!(EventList::Csv("pod".into()).mask().unwrap(), 0b111);
        assert_eq!(EventList::Csv("container".into()).mask().unwrap(), 0x7f8);
        assert_eq!(
            EventList::List(vec!["RUN_POD_SANDBOX".into(), "STOP_CONTAINER".into()])
                .mask()
                .unwrap(),
            1 | 1 << 9
        );
        assert_eq!(EventList::Csv("none".into()).mask().unwrap(), 0);
        assert!(EventList::Csv("bogus".into()).mask().is_err());
        assert_eq!(event_name(1), "RUN_POD_SANDBOX");
        assert_eq!(event_name(99), "EVENT_99");
    }

    #[test]
    fn json_config_and_merge() {
        let mut c = PluginConfig::from_json(
            r#"{"name":"a","idx":"10","events":["pod"],
                "on":{"RUN_POD_SANDBOX":"delay:200","STOP_POD_SANDBOX":{"kind":"error","message":"x"}}}"#,
        )
        .unwrap();
        c.merge(PluginConfig::from_json(r#"{"idx":"20","on":{"synchronize":"hang"}}"#).unwrap());
        assert_eq!(c.name.as_deref(), Some("a"));
        assert_eq!(c.idx.as_deref(), Some("20"));
        let b = c.behaviour().unwrap();
        assert_eq!(b.mask, 0b111);
        assert_eq!(b.action(Target::Event(1)), Action::Delay { ms: 200 });
        assert_eq!(
            b.action(Target::Event(2)),
            Action::Error {
                message: "x".into()
            }
        );
        assert_eq!(b.action(Target::Synchronize), Action::Hang);
        assert_eq!(b.action(Target::Configure), Action::Ok);
        assert!(PluginConfig::from_json(r#"{"bogus":1}"#).is_err());
        assert!(PluginConfig::from_json(r#"{"on":{"NOPE":"ok"}}"#)
            .unwrap()
            .behaviour()
            .is_err());
    }
}
