//! A minimal HTTP/1.1 responder for Prometheus scrapes: `GET /metrics` answers the metrics
//! text, anything else 404. One request per connection (`Connection: close`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::{Metrics, render};
use crate::client::Client;
use crate::error::{Error, InputError, Result};

/// Longest request head we read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A bound metrics listener; [`MetricsServer::serve`] answers scrapes until shutdown.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
}

impl MetricsServer {
    /// Binds `addr` (`HOST:PORT`, e.g. `127.0.0.1:9464`; port 0 picks a free one).
    pub async fn bind(addr: &str) -> Result<Self> {
        let parsed: SocketAddr = addr.parse().map_err(|e| {
            InputError::new(
                "--metrics",
                addr,
                format!("is not an address like 127.0.0.1:9464 ({e})"),
            )
        })?;
        let listener = TcpListener::bind(parsed)
            .await
            .map_err(|e| Error::io(format!("listen for metrics on {addr}"), e))?;
        Ok(Self { listener })
    }

    /// The address actually bound (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("read the metrics address", e))
    }

    /// Answers scrapes until `shutdown` fires. Each connection is served in its own task.
    pub async fn serve(self, client: Client, metrics: Arc<Metrics>, shutdown: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = shutdown.cancelled() => return,
            };
            match accepted {
                Ok((stream, _)) => {
                    let (client, metrics) = (client.clone(), metrics.clone());
                    tokio::spawn(async move {
                        if let Err(e) = answer(stream, &client, &metrics).await {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Reads the request head and returns its path, if it is a GET.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head"))??;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    Ok(match (parts.next(), parts.next()) {
        (Some("GET"), Some(path)) => Some(path.to_string()),
        _ => None,
    })
}

async fn answer(mut stream: TcpStream, client: &Client, metrics: &Metrics) -> std::io::Result<()> {
    let path = read_request(&mut stream).await?;
    let (status, ctype, body) = match path.as_deref().map(|p| p.split('?').next().unwrap_or(p)) {
        Some("/metrics") => match render(client.core(), metrics).await {
            Ok(text) => ("200 OK", CONTENT_TYPE, text),
            Err(e) => (
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("{e}\n"),
            ),
        },
        Some(_) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "try /metrics\n".to_string(),
        ),
        None => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET only\n".to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
