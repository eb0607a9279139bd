//! Telling people a request waits: one JSON POST per request filed, to
//! the deployment's webhook (`[console] webhook_url_file`), with the link
//! to decide it in the console.
//!
//! The body is Slack's and Mattermost's incoming-webhook message (`text`,
//! with their `<URL|label>` link and `&`, `<`, `>` escaped as they ask),
//! plus an `airlock` object with the request's fields for any other
//! receiver. It names who asked, the tool (or how many changes a plan
//! has), the request id, when it expires and the link: never an argument
//! value, which may be more than the channel should read.
//!
//! The call that filed the request never waits for it: [`Webhook::filed`]
//! puts the message in a queue of [`QUEUE`] and returns; one task sends
//! them in turn, each within [`SEND_TIMEOUT`]. A full queue drops the
//! message; a failed send is logged (without the URL: it is the secret
//! that lets anyone post) and not retried.

use std::{sync::Arc, time::Duration};

use airlock_gateway::{approval::Request, observe::Filed};
use reqwest::Url;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Messages waiting to be sent; more are dropped (and logged).
pub const QUEUE: usize = 256;
/// Bound on one send, connect included.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages one identity's requests may cause a minute; the rest are
/// counted and said in its next message, so an agent filing and
/// withdrawing requests in a loop cannot drown the channel (or the queue
/// everyone shares).
pub const PER_IDENTITY_PER_MINUTE: u32 = 6;
/// Identities whose counts are kept before old ones are forgotten.
const COUNTED_IDENTITIES: usize = 10_000;

/// One identity's messages in the current minute.
#[derive(Default)]
struct Count {
    minute_from_ms: i64,
    sent: u32,
    /// Requests not announced since its last message.
    held_back: u64,
}

/// The webhook, as `[console]` gives it.
pub struct Webhook {
    queue: mpsc::Sender<Value>,
    counts: std::sync::Mutex<std::collections::HashMap<String, Count>>,
    /// Where the console is reached, for the links: no trailing slash.
    public_url: String,
}

impl Webhook {
    /// Starts the sending task (on the current tokio runtime) for `url`:
    /// https://, or plain HTTP on loopback (tests, a local relay).
    pub fn start(
        url: &str,
        public_url: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Arc<Self>, String> {
        let target = Url::parse(url).map_err(|_| {
            "the webhook URL in webhook_url_file is not a URL (the file holds the URL alone)"
                .to_string()
        })?;
        let loopback = matches!(target.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
        if !(target.scheme() == "https" || target.scheme() == "http" && loopback) {
            return Err("the webhook URL must be https:// (plain http only on loopback)".into());
        }
        let public = Url::parse(public_url)
            .map_err(|e| format!("public_url `{public_url}` is not a URL ({e})"))?;
        if !matches!(public.scheme(), "https" | "http") {
            return Err(format!("public_url `{public_url}` must be http(s)://"));
        }
        let tls = airlock_oauth::outbound_tls(ca_file)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(SEND_TIMEOUT)
            .timeout(SEND_TIMEOUT)
            .build()
            .map_err(|e| format!("webhook: HTTP client: {}", e.without_url()))?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "the webhook needs the server's runtime".to_string())?;
        let (queue, mut next) = mpsc::channel::<Value>(QUEUE);
        runtime.spawn(async move {
            while let Some(message) = next.recv().await {
                let id = message["airlock"]["id"].as_str().unwrap_or("").to_string();
                match http.post(target.clone()).json(&message).send().await {
                    Ok(r) if r.status().is_success() => {
                        tracing::debug!(request = %id, "the webhook was told of a request");
                    }
                    Ok(r) => {
                        tracing::warn!(request = %id, status = %r.status(), "the webhook refused a request's message; it is not sent again");
                    }
                    Err(e) => {
                        tracing::warn!(request = %id, error = %e.without_url(), "the webhook could not be told of a request; it is not sent again");
                    }
                }
            }
        });
        Ok(Arc::new(Self {
            queue,
            counts: Default::default(),
            public_url: public_url.trim_end_matches('/').to_string(),
        }))
    }

    /// Whether `r` may be announced now, and how many of its identity's
    /// requests were held back since its last message.
    fn admit(&self, r: &Request) -> Option<u64> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.len() >= COUNTED_IDENTITIES && !counts.contains_key(&r.identity) {
            counts.retain(|_, c| r.created_ms - c.minute_from_ms < 60_000);
            if counts.len() >= COUNTED_IDENTITIES {
                counts.clear();
            }
        }
        let c = counts.entry(r.identity.clone()).or_default();
        if r.created_ms - c.minute_from_ms >= 60_000 {
            c.minute_from_ms = r.created_ms;
            c.sent = 0;
        }
        if c.sent >= PER_IDENTITY_PER_MINUTE {
            c.held_back += 1;
            return None;
        }
        c.sent += 1;
        Some(std::mem::take(&mut c.held_back))
    }

    /// The message for `r`.
    pub fn message(&self, r: &Request) -> Value {
        self.message_with(r, 0)
    }

    fn message_with(&self, r: &Request, held_back: u64) -> Value {
        let link = format!("{}/console/requests/{}", self.public_url, r.id);
        let what = match &r.changes {
            Some(changes) => {
                let n = changes.iter().filter(|c| c.is_change()).count();
                format!("a plan of {n} change{}", if n == 1 { "" } else { "s" })
            }
            None => format!("to call {}", code(&r.tool)),
        };
        let minutes = ((r.expires_ms - r.created_ms).max(0) / 60_000).max(1);
        let more = match held_back {
            0 => String::new(),
            n => format!(
                " ({n} more from {} were not announced: see the console)",
                code(&r.identity)
            ),
        };
        let text = format!(
            "Airlock: {} asks {} (request {}); it expires in {minutes} min unless decided. <{}|Decide in the console>{more}",
            code(&r.identity),
            what,
            code(&r.id),
            link
        );
        json!({
            "text": text,
            // Mattermost: no @-mentions from what the message quotes.
            "link_names": 0,
            "airlock": {
                "event": "request_filed",
                "id": r.id,
                "identity": r.identity,
                "tool": r.tool,
                "changes": r.changes.as_ref().map(|c| c.iter().filter(|c| c.is_change()).count()),
                "created_ms": r.created_ms,
                "expires_ms": r.expires_ms,
                "link": link,
            }
        })
    }
}

impl Filed for Webhook {
    fn filed(&self, r: &Request) {
        let Some(held_back) = self.admit(r) else {
            return;
        };
        if let Err(e) = self.queue.try_send(self.message_with(r, held_back)) {
            tracing::warn!(request = %r.id, error = %e, "the webhook's queue is full; this request's message is dropped");
        }
    }
}

/// `s` as a code span: no link, mention or formatting in Slack or
/// Mattermost (backticks dropped, Slack's `&`, `<`, `>` escaped).
fn code(s: &str) -> String {
    format!("`{}`", slack_escape(&s.replace('`', "")))
}

/// Slack's escaping of message text: `&`, `<` and `>` only.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_gateway::approval::Status;

    #[tokio::test]
    async fn the_message_links_the_request_and_carries_no_argument() {
        let hook = Webhook::start(
            "http://127.0.0.1:9/hook",
            "https://airlock.example.test/",
            None,
        )
        .unwrap();
        let r = Request {
            id: "ap-00ff".into(),
            identity: "alice<b>&".into(),
            tool: "vm_stop".into(),
            tool_key: None,
            args_hash: "h".into(),
            summary: "password=hunter2".into(),
            detail: Some("password=hunter2".into()),
            status: Status::Pending,
            created_ms: 0,
            expires_ms: 15 * 60_000,
            decided_by: None,
            decided_via: None,
            changes: None,
            reason: None,
        };
        let m = hook.message(&r);
        let text = m["text"].as_str().unwrap();
        assert_eq!(
            text,
            "Airlock: `alice&lt;b&gt;&amp;` asks to call `vm_stop` (request `ap-00ff`); it expires in 15 min unless decided. <https://airlock.example.test/console/requests/ap-00ff|Decide in the console>"
        );
        // One identity's flood is held back, and said in its next message.
        let mut r2 = r.clone();
        r2.identity = "@channel`x".into();
        let admitted: Vec<Option<u64>> = (0..PER_IDENTITY_PER_MINUTE + 3)
            .map(|_| hook.admit(&r2))
            .collect();
        assert!(admitted[..PER_IDENTITY_PER_MINUTE as usize]
            .iter()
            .all(|a| *a == Some(0)));
        assert!(admitted[PER_IDENTITY_PER_MINUTE as usize..]
            .iter()
            .all(Option::is_none));
        assert_eq!(hook.admit(&r), Some(0), "another identity is not held back");
        r2.created_ms = 60_000;
        assert_eq!(
            hook.admit(&r2),
            Some(3),
            "the next minute says how many were not"
        );
        let m = hook.message_with(&r2, 3);
        let text = m["text"].as_str().unwrap();
        assert!(
            text.starts_with("Airlock: `@channelx` asks")
                && text.contains("(3 more from `@channelx`"),
            "{text}"
        );
        assert_eq!(m["link_names"], 0);
        assert_eq!(
            m["airlock"]["link"],
            "https://airlock.example.test/console/requests/ap-00ff"
        );
        assert!(!m.to_string().contains("hunter2"), "{m}");
        for (url, needle) in [
            ("http://hooks.example.test/x", "must be https"),
            ("not a url", "not a URL"),
        ] {
            let e = Webhook::start(url, "https://a.example.test", None)
                .err()
                .unwrap();
            assert!(e.contains(needle), "{e}");
        }
    }
}
