//! The `GET /metrics` endpoint of `watch --metrics-addr`: plain HTTP/1.0
//! on a TCP listener, serving a copy of the exposition [`MetricsSink`]
//! keeps. The server only reads that copy, so a slow scraper never holds
//! up the trace.
//!
//! [`MetricsSink`]: super::metrics::MetricsSink

use std::{
    io,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest request head read.
const MAX_HEAD: usize = 1024;
/// A client gets this long to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Listen on `addr` and serve the text in the returned cell; the address
/// bound (port 0 picks one).
pub async fn serve_metrics(addr: SocketAddr) -> io::Result<(SocketAddr, Arc<Mutex<String>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let text = Arc::new(Mutex::new(String::new()));
    let shared = Arc::clone(&text);
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(answer(conn, Arc::clone(&shared)));
        }
    });
    Ok((bound, text))
}

async fn answer(mut conn: tokio::net::TcpStream, text: Arc<Mutex<String>>) {
    // The request head, bounded, with a timeout: it may come in several
    // segments.
    let mut buf = [0u8; MAX_HEAD];
    let mut n = 0;
    let read_head = async {
        while n < buf.len() {
            match conn.read(&mut buf[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    if tokio::time::timeout(HEAD_TIMEOUT, read_head).await.is_err() {
        return;
    }
    let (status, body) = if buf[..n].starts_with(b"GET /metrics") {
        ("200 OK", text.lock().map(|t| t.clone()).unwrap_or_default())
    } else {
        ("404 Not Found", "only /metrics is served\n".to_string())
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body.as_bytes()).await;
}
