//! The router's live status page, served on its HTTP port next to `/metrics`:
//!
//! ```text
//!  GET /             page.html with the current document embedded (shown at once, no request)
//!  GET /status.json  the document (json.rs) the page's script polls every few seconds
//!                    <- gathered at most once per DOCUMENT_MAX_AGE, whoever asks
//!  sampler task      every 5 s: command counters -> ops/s, p50/p99 ring (sampler.rs)
//! ```
//!
//! The page is self-contained (inline CSS and script, no external resource; the
//! Content-Security-Policy forbids any) and its script writes every value with `textContent`, so
//! nothing from the cluster (collection names are user input) is ever parsed as HTML; the one
//! value placed in the HTML by the server, the embedded document, is escaped for a `<script>`
//! element ([`script_safe_json`]) and the title text with [`escape_html`].
//!
//! Must not: change state (GETs only; the commands it runs are `replSetGetStatus` and
//! `balancerStatus`), hold the router's state alive (weak references), or let the sampler outlive
//! the router's shutdown (it stops with the HTTP port's stop signal).

pub mod json;
pub mod sampler;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use crate::state::RouterState;
use sampler::Samples;

/// A document younger than this is served again instead of asking the cluster (a few open
/// pages cost the cluster what one does).
pub const DOCUMENT_MAX_AGE: Duration = Duration::from_secs(1);

/// The page, with [`DATA_MARKER`] where the document goes.
const PAGE: &str = include_str!("page.html");
const DATA_MARKER: &str = "{{STATUS_JSON}}";
const TITLE_MARKER: &str = "{{TITLE}}";

/// Nothing but the page's own inline style and script, and requests to this port.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Page {
    state: Weak<RouterState>,
    samples: Samples,
    /// The last document and when it was built; the lock also makes concurrent requests share
    /// one gathering.
    last: tokio::sync::Mutex<Option<(Instant, Arc<String>)>>,
}

/// `GET /` and `GET /status.json`, with the sampler started for them (it ends when `stop`
/// changes or its sender is gone).
pub fn routes(state: &Arc<RouterState>, stop: watch::Receiver<()>) -> axum::Router {
    let samples = Samples::default();
    // Detached: it ends on `stop` or when the state is gone.
    drop(sampler::spawn(Arc::downgrade(state), samples.clone(), stop));
    let page = Arc::new(Page { state: Arc::downgrade(state), samples, last: tokio::sync::Mutex::new(None) });
    axum::Router::new().route("/", get(index)).route("/status.json", get(status_json)).with_state(page)
}

/// The current document as JSON text; `None` once the router is gone.
async fn current(page: &Page) -> Option<Arc<String>> {
    let mut last = page.last.lock().await;
    if let Some((at, doc)) = last.as_ref()
        && at.elapsed() < DOCUMENT_MAX_AGE
    {
        return Some(Arc::clone(doc));
    }
    let state = page.state.upgrade()?;
    let inputs = json::gather(&state, &page.samples).await;
    drop(state);
    let doc = Arc::new(json::document(&inputs).to_string());
    *last = Some((Instant::now(), Arc::clone(&doc)));
    Some(doc)
}

fn gone() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the router is shutting down").into_response()
}

async fn status_json(State(page): State<Arc<Page>>) -> Response {
    let Some(doc) = current(&page).await else { return gone() };
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], doc.as_str().to_owned())
        .into_response()
}

async fn index(State(page): State<Arc<Page>>) -> Response {
    let Some(doc) = current(&page).await else { return gone() };
    let title = page.state.upgrade().map(|s| s.settings.listen.to_string()).unwrap_or_default();
    let html = render(&title, &doc);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        html,
    )
        .into_response()
}

/// The page with `title` (the router's address) and the document `json` in it.
fn render(title: &str, json: &str) -> String {
    PAGE.replacen(TITLE_MARKER, &escape_html(title), 1).replacen(DATA_MARKER, &script_safe_json(json), 1)
}

/// `text` safe as HTML text or a quoted attribute value.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON text safe inside a `<script>` element: `<`, `>` and `&` (which JSON has only inside
/// strings) and the two line separators JavaScript once refused become `\u` escapes, so no value
/// can close the element (`</script>`) or open a comment; the text parses to the same value.
pub fn script_safe_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            escape_html(r#"<b a="1">O'Neil & co</b>"#),
            "&lt;b a=&quot;1&quot;&gt;O&#39;Neil &amp; co&lt;/b&gt;"
        );
        assert_eq!(escape_html("plain: 127.0.0.1:27017"), "plain: 127.0.0.1:27017");
    }

    #[test]
    fn embedded_json_cannot_close_its_script_and_parses_to_the_same_value() {
        let evil = "app.</script><script>alert(1)</script><!--\u{2028}&";
        let json = serde_json::json!({ "collections": [{ "ns": evil }] }).to_string();
        let safe = script_safe_json(&json);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'), "{safe}");
        assert!(!safe.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["collections"][0]["ns"], evil);
    }

    #[test]
    fn the_page_gets_the_document_and_title_once_and_loads_nothing_from_elsewhere() {
        assert_eq!(PAGE.matches(DATA_MARKER).count(), 1);
        assert_eq!(PAGE.matches(TITLE_MARKER).count(), 1);
        let html = render("<router>", r#"{"ns":"</script>"}"#);
        assert!(html.contains(r#"{"ns":"\u003c/script\u003e"}"#), "{html}");
        assert!(html.contains("&lt;router&gt;"));
        assert!(!html.contains("{{"), "every marker is replaced");
        // The SVG namespace is a name, not a resource.
        let page = PAGE.replace("\"http://www.w3.org/2000/svg\"", "");
        for outside in
            ["http://", "https://", "src=", "@import", "url(", "innerHTML", "insertAdjacentHTML", "document.write"]
        {
            let found = page.lines().find(|l| l.contains(outside));
            assert!(found.is_none(), "the page must not use {outside}: {found:?}");
        }
    }

    #[tokio::test]
    async fn the_document_is_reused_while_fresh_and_the_page_is_gone_with_the_router() {
        let page = Page { state: Weak::new(), samples: Samples::default(), last: tokio::sync::Mutex::new(None) };
        assert!(current(&page).await.is_none(), "no router, no document");
        let doc = Arc::new("{}".to_owned());
        *page.last.lock().await = Some((Instant::now(), Arc::clone(&doc)));
        assert_eq!(current(&page).await.as_deref(), Some(&"{}".to_owned()), "a fresh document is served again");
    }
}
