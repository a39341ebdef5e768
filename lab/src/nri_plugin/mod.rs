//! Fault-injecting NRI test plugins for the lab (`bin/nri-test-plugin`).
//!
//! A plugin connects to the runtime's NRI socket (external) or adopts the
//! socket a runtime hands it as fd 3 (pre-launched), splits the stream with
//! the NRI multiplexer ([`mux`]), serves the Plugin service with the
//! `ttrpc` crate and registers through a `ttrpc` client, then answers each
//! request as its configuration ([`config`]) says: at once, after a delay,
//! with an error, never (hang) or by exiting (crash). Everything it receives
//! and answers is recorded as ground truth ([`crate::truth`]); see
//! [`plugin`] for the records.
//!
//! The wire protocol as containerd 1.7.24 (NRI v0.6.1) speaks it: the
//! plugin sends RegisterPlugin on connection 2; the runtime sends Configure
//! on connection 1 (our answer carries the events mask), then, for external
//! plugins only, Synchronize with the pods and containers it knows, then the
//! events. v0.6.1 does not synchronize pre-launched plugins (they are
//! started before the runtime has any state; `startPlugins` only registers
//! and configures them).
//!
//! # Pre-launched plugins in the lab
//!
//! containerd execs every executable `NN-name` in `plugin_path`
//! (`$NRI_TRACE_LAB_DIR/nri/plugins`) with no arguments and only
//! NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 in its
//! environment, when it starts (`lab.sh up`), and waits up to 5 s for each to
//! register: put the plugin there before `up`. By the v0.6.1 source, a
//! pre-launched plugin that fails to register or configure fails NRI's
//! start, which the lab's containerd requires: keep them working. Two ways:
//!
//! 1. A wrapper script `$LAB/nri/plugins/30-prelaunched` (mode 0755):
//!    ```sh
//!    #!/bin/sh
//!    exec /path/to/nri-test-plugin --truth /tmp/30.truth.ndjson \
//!        --on RUN_POD_SANDBOX=delay:100 2>>/tmp/30.log
//!    ```
//!    The environment passes through `exec`, so the plugin finds its fd.
//! 2. The binary itself copied or linked as `$LAB/nri/plugins/30-name`, with
//!    its config in `30-name.json` beside it (mode 0644: any executable file
//!    there must be a plugin, or containerd refuses to start).
//!
//! Either way a config string in `$LAB/nri/conf.d/30-name.conf` (or
//! `name.conf`), which containerd sends in Configure, is merged over the
//! plugin's own config (`events` and `on` only).

pub mod config;
pub mod mux;
pub mod plugin;

pub use config::{parse_action, Behaviour, PluginConfig, Target};
pub use plugin::{run, Endpoint, PluginOptions, CRASH_EXIT_CODE};
