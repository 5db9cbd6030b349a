//! Scraping `/metrics` in tests: one parsed scrape, and polling until a condition holds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tickd::proto::timers_client::TimersClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

use super::rpc::{ack, by_key, get, next_expiration, register, spec, subscribe, within};

/// How long [`scrape_until`] polls before returning what it last saw.
const PATIENCE: Duration = Duration::from_secs(60);

/// One scrape: `name{label="value",...}` (labels sorted by name) → value.
#[derive(Debug)]
pub(crate) struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    pub(crate) fn parse(text: &str) -> Self {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("`series value` line");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                value => value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            samples.insert(canonical(series), value);
        }
        Scrape(samples)
    }

    /// The value of `series` (written with or without labels, in any label order).
    pub(crate) fn get(&self, series: &str) -> Option<f64> {
        self.0.get(&canonical(series)).copied()
    }

    /// How many series the metric `name` has (one per label set).
    pub(crate) fn series(&self, name: &str) -> usize {
        let prefix = format!("{name}{{");
        self.0
            .keys()
            .filter(|series| series.starts_with(&prefix) || *series == name)
            .count()
    }

    pub(crate) fn value(&self, series: &str) -> f64 {
        self.get(series)
            .unwrap_or_else(|| panic!("no series {series} in the scrape:\n{self:#?}"))
    }
}

/// `name{b="2",a="1"}` → `name{a="1",b="2"}`, so lookups ignore label order.
fn canonical(series: &str) -> String {
    let Some((name, labels)) = series.split_once('{') else {
        return series.to_owned();
    };
    let labels = labels.strip_suffix('}').expect("closing brace");
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
        // Values are escaped with backslashes; find the closing quote.
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((index, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push('\\');
                        value.push(escaped);
                    }
                }
                '"' => {
                    end = Some(index);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.expect("closing quote");
        pairs.push((key.trim_start_matches(',').to_owned(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    pairs.sort();
    let labels: Vec<String> = pairs
        .into_iter()
        .map(|(key, value)| format!("{key}=\"{value}\""))
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// A `/metrics` answer: its Content-Type and its body.
pub(crate) struct Exposition {
    pub(crate) content_type: String,
    pub(crate) body: String,
}

/// `GET /metrics` over a plain TCP stream (HTTP/1.0, so the body ends with the connection),
/// with an `Accept` header if given; panics unless the answer is 200.
pub(crate) async fn fetch_metrics(addr: SocketAddr, accept: Option<&str>) -> Exposition {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to metrics");
    let accept = accept.map_or(String::new(), |accept| format!("Accept: {accept}\r\n"));
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: tickd\r\n{accept}\r\n").as_bytes())
        .await
        .expect("send request");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("read response");
    let response = String::from_utf8(response).expect("utf-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers and body");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    let content_type = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no Content-Type in {head}"));
    Exposition {
        content_type,
        body: body.to_owned(),
    }
}

/// The text format (what a scraper asking for nothing in particular gets).
pub(crate) async fn scrape_text(addr: SocketAddr) -> String {
    let exposition = fetch_metrics(addr, None).await;
    assert!(
        exposition.content_type.starts_with("text/plain"),
        "{}",
        exposition.content_type
    );
    exposition.body
}

pub(crate) async fn scrape(addr: SocketAddr) -> Scrape {
    Scrape::parse(&scrape_text(addr).await)
}

/// Waits until nothing is in flight or waiting for a subscriber or sink (every delivery
/// settled), asserting it.
pub(crate) async fn deliveries_settled(addr: SocketAddr) {
    let scrape = scrape_until(addr, |scrape| {
        scrape.value("tickd_delivery_unacked") == 0.0
            && scrape.value("tickd_delivery_buffered") == 0.0
    })
    .await;
    assert_eq!(
        scrape.value("tickd_delivery_unacked"),
        0.0,
        "still in flight"
    );
    assert_eq!(
        scrape.value("tickd_delivery_buffered"),
        0.0,
        "still buffered"
    );
}

/// Scrapes until `ready` holds (the counters of a call are updated as it ends, a moment
/// after its answer left), at most for [`PATIENCE`].
pub(crate) async fn scrape_until(addr: SocketAddr, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let scrape = scrape(addr).await;
        if ready(&scrape) || tokio::time::Instant::now() > deadline {
            return scrape;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers, fires and delivers a timer in namespace `metrics`, leaves one pending, and
/// makes one call fail, so that the labelled families (RPC codes, namespaces, lateness)
/// have series.
pub(crate) async fn exercise(client: &mut TimersClient<Channel>) {
    let mut stream = subscribe(client, "metrics", 30_000, 0).await;
    register(client, spec("metrics", 1, b"fire")).await;
    register(client, spec("metrics", 3_600_000, b"pending")).await;
    let expiration = within(next_expiration(&mut stream)).await;
    assert_eq!(
        ack(client, "metrics", vec![expiration.delivery_id])
            .await
            .acknowledged,
        1
    );
    let missing = get(client, by_key("metrics", "no-such-key")).await;
    assert_eq!(
        missing.expect_err("no such timer").code(),
        tonic::Code::NotFound
    );
}
