//! The CRI state task: the runtime's pods and containers asked over CRI
//! at start and after a restart, each answer into the event stream.

use std::{path::PathBuf, time::Duration};

use tokio::sync::mpsc;

use super::clock::now_timestamp;
use crate::capture::CaptureEvent;

/// Why the CRI state is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ask {
    Start,
    /// A new runtime process listens on the CRI socket: it may not answer
    /// CRI calls until it has loaded its state (containerd's CRI plugin
    /// answers "server is not initialized yet"), so it is asked again a
    /// few times.
    Restart,
}

/// Tries after a restart, and the pause before the n-th (n x this).
const RESTART_TRIES: u32 = 8;
const RESTART_BACKOFF: Duration = Duration::from_millis(250);

/// The CRI state task: one query per ask, its answer into the event
/// stream. It holds the stream weakly (the stream ends with the drain
/// task) and ends when the drain task drops its asker. The last query's
/// connection stays open until the next: its peer is known to the capture
/// long before it closes (see [`drop_ignored_peers`]).
pub(super) async fn ask_cri_state(
    path: PathBuf,
    tx: mpsc::WeakSender<CaptureEvent>,
    mut asked: mpsc::UnboundedReceiver<Ask>,
) {
    let mut _open = None;
    while let Some(why) = asked.recv().await {
        let tries = if why == Ask::Restart {
            RESTART_TRIES
        } else {
            1
        };
        let mut failed = None;
        for n in 0..tries {
            if n > 0 {
                tokio::time::sleep(RESTART_BACKOFF * n).await;
            }
            match crate::capture::cri_state::query(&path, now_timestamp).await {
                Ok((state, channel)) => {
                    log::debug!(
                        "CRI state: {} pods, {} containers, {} bytes in {} µs",
                        state.pods.len(),
                        state.containers.len(),
                        state.bytes,
                        state.took_ns / 1000
                    );
                    _open = Some(channel);
                    failed = None;
                    let Some(tx) = tx.upgrade() else { return };
                    if tx.send(CaptureEvent::CriState(state)).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            // The error and its sources, each once (tonic's transport
            // error says little without the io::Error under it).
            let mut why = String::new();
            let mut next: Option<&dyn std::error::Error> = Some(&e);
            while let Some(err) = next {
                let text = err.to_string();
                if !why.contains(&text) {
                    if !why.is_empty() {
                        why.push_str(": ");
                    }
                    why.push_str(&text);
                }
                next = err.source();
            }
            log::warn!(
                "cannot read the runtime's pods and containers over CRI ({why}): pods made \
                 before the trace are named only once a traced call names them. Give the \
                 runtime's CRI socket with --cri-socket, or --no-cri-state not to ask"
            );
        }
    }
}
