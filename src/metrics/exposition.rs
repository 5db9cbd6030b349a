//! `GET /metrics`: the scrape in the format the scraper asks for, labelled as such.
//!
//! `prometheus-client` writes OpenMetrics 1.0. Prometheus asks for it in its `Accept`
//! header and gets it as is; anyone else (curl, `promtool check metrics`, older scrapers)
//! gets the Prometheus text format 0.0.4, which is what the Go client serves by default
//! too. The two formats share their sample lines; only the metadata differs (see
//! [`openmetrics_to_text`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use super::registry::Metrics;

pub(crate) const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub(crate) const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `GET /metrics` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(error = %error, "metrics listener accept failed");
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(respond(&metrics, &request)) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %error, "metrics connection ended");
            }
        });
    }
}

fn respond(metrics: &Metrics, request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        let mut response =
            Response::new(Full::new(Bytes::from_static(b"not found; try /metrics\n")));
        *response.status_mut() = StatusCode::NOT_FOUND;
        return response;
    }
    let accept = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let openmetrics = metrics.encode();
    let (body, content_type) = if prefers_openmetrics(&accept) {
        (openmetrics, OPENMETRICS_CONTENT_TYPE)
    } else {
        (openmetrics_to_text(&openmetrics), TEXT_CONTENT_TYPE)
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// True when `accept` ranks `application/openmetrics-text` above zero and no lower than
/// the text format (`text/plain`, `text/*` or `*/*`), as Prometheus' own header does:
/// `application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`.
pub(crate) fn prefers_openmetrics(accept: &str) -> bool {
    let mut openmetrics: f64 = 0.0;
    let mut text: f64 = 0.0;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media_type = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|parameter| parameter.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, value)| value.trim().parse().unwrap_or(0.0));
        match media_type.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => text = text.max(quality),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// Rewrites OpenMetrics metadata as the text format 0.0.4 has it; samples pass unchanged.
///
/// - A counter family `x` has samples `x_total`: in the text format its HELP and TYPE name
///   `x_total`.
/// - An info family `x` (one sample `x_info ... 1`) is a gauge `x_info`.
/// - `unknown` is `untyped`; `# UNIT` and `# EOF` do not exist.
pub(crate) fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut text = String::with_capacity(openmetrics.len());
    // HELP comes before TYPE in a family's metadata, but its name depends on the type.
    let mut pending_help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(help) = line.strip_prefix("# HELP ") {
            pending_help = Some(help.split_once(' ').unwrap_or((help, "")));
            continue;
        }
        if let Some(family) = line.strip_prefix("# TYPE ") {
            let (name, kind) = family.split_once(' ').unwrap_or((family, "unknown"));
            let (sample_name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            if let Some((_, help)) = pending_help.take().filter(|(of, _)| *of == name) {
                text.push_str(&format!("# HELP {sample_name} {help}\n"));
            }
            text.push_str(&format!("# TYPE {sample_name} {kind}\n"));
            continue;
        }
        text.push_str(line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_text_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(prefers_openmetrics(prometheus));
        assert!(prefers_openmetrics("application/openmetrics-text"));
        assert!(!prefers_openmetrics(""));
        assert!(!prefers_openmetrics("*/*"));
        assert!(!prefers_openmetrics("text/plain"));
        assert!(!prefers_openmetrics(
            "text/plain;q=0.9,application/openmetrics-text;q=0.5"
        ));
        assert!(!prefers_openmetrics("application/openmetrics-text;q=0"));
        assert!(!prefers_openmetrics("application/openmetrics-text;q=oops"));
    }

    #[test]
    fn metadata_is_renamed_for_the_text_format_and_samples_are_kept() {
        let openmetrics = "# HELP tickd_timers_fired Timer firings.\n\
                           # TYPE tickd_timers_fired counter\n\
                           tickd_timers_fired_total 3\n\
                           # HELP tickd_worker_busy_seconds Busy time.\n\
                           # TYPE tickd_worker_busy_seconds counter\n\
                           # UNIT tickd_worker_busy_seconds seconds\n\
                           tickd_worker_busy_seconds_total 0.5\n\
                           # HELP tickd_build Build.\n\
                           # TYPE tickd_build info\n\
                           tickd_build_info{version=\"0.1.0\"} 1\n\
                           # HELP tickd_serving Serving.\n\
                           # TYPE tickd_serving gauge\n\
                           tickd_serving 1\n\
                           # EOF\n";
        assert_eq!(
            openmetrics_to_text(openmetrics),
            "# HELP tickd_timers_fired_total Timer firings.\n\
             # TYPE tickd_timers_fired_total counter\n\
             tickd_timers_fired_total 3\n\
             # HELP tickd_worker_busy_seconds_total Busy time.\n\
             # TYPE tickd_worker_busy_seconds_total counter\n\
             tickd_worker_busy_seconds_total 0.5\n\
             # HELP tickd_build_info Build.\n\
             # TYPE tickd_build_info gauge\n\
             tickd_build_info{version=\"0.1.0\"} 1\n\
             # HELP tickd_serving Serving.\n\
             # TYPE tickd_serving gauge\n\
             tickd_serving 1\n"
        );
    }
}
