//! `tickctl`: the command-line client of tickd, over its gRPC API.
//!
//! ```text
//! tickctl add --delay 30m --key order-42 --payload 'close order 42' -n orders
//! tickctl pending -n orders            # a table; --output json for scripts
//! tickctl watch -n orders              # one line per expiration, until Ctrl-C
//! ```
//!
//! Exit codes: 0 ok; 1 the server refused the call (the message names the gRPC code);
//! 2 bad usage (clap's own errors, bad durations, unreadable files); 3 tickd unreachable.

mod cli;
mod output;

use std::future::Future;
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use cli::{Cli, Command, Output};
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{self, subscribe_request, timer_ref, TimerRef, TimerSpec};

/// Why tickctl stops with an error; each kind has its exit code.
enum Failure {
    /// Bad input found after parsing the command line (exit 2).
    Usage(String),
    /// The server answered with an error status (exit 1; 3 for UNAVAILABLE).
    Status(Status),
    /// The server could not be reached (exit 3).
    Unreachable(String),
    /// Anything else, e.g. a stream that ended early (exit 1).
    Other(String),
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure::Status(status)
    }
}

impl Failure {
    fn report(&self) -> ExitCode {
        match self {
            Failure::Usage(message) => {
                eprintln!("tickctl: {message}");
                ExitCode::from(2)
            }
            Failure::Status(status) => {
                let message = one_line(status.message());
                let message = if message.is_empty() {
                    "(no message)".to_owned()
                } else {
                    message
                };
                eprintln!("tickctl: {}: {message}", code_name(status.code()));
                if status.code() == Code::Unavailable {
                    ExitCode::from(3)
                } else {
                    ExitCode::from(1)
                }
            }
            Failure::Unreachable(message) => {
                eprintln!("tickctl: {message}");
                ExitCode::from(3)
            }
            Failure::Other(message) => {
                eprintln!("tickctl: {message}");
                ExitCode::from(1)
            }
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The canonical gRPC name of a status code, as in the gRPC spec.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn main() -> ExitCode {
    // Clap prints its own usage errors and exits with 2 (0 for --help and --version).
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return Failure::Other(format!("starting the runtime: {error}")).report(),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

/// Adds `authorization: Bearer TOKEN` to every call when a token is configured.
#[derive(Clone)]
struct Auth(Option<MetadataValue<Ascii>>);

impl Interceptor for Auth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Timers = TimersClient<InterceptedService<Channel, Auth>>;

/// What every command needs: a connected client and the global options.
struct Ctx {
    channel: Channel,
    auth: Auth,
    timers: Timers,
    namespace: String,
    output: Output,
    timeout: Duration,
}

impl Ctx {
    fn json(&self) -> bool {
        self.output == Output::Json
    }

    /// A unary request carrying the deadline, also enforced here.
    async fn unary<T, F>(&self, call: F) -> Result<T, Failure>
    where
        F: Future<Output = Result<Response<T>, Status>>,
    {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => Ok(result?.into_inner()),
            Err(_) => Err(Failure::Status(Status::deadline_exceeded(format!(
                "no answer within --timeout {}",
                humantime::format_duration(self.timeout)
            )))),
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    fn timer_ref(&self, target: &cli::Target) -> Option<TimerRef> {
        let target = match (&target.id, &target.key) {
            (Some(id), _) => timer_ref::Target::Id(id.clone()),
            (None, Some(key)) => timer_ref::Target::Key(key.clone()),
            (None, None) => return None,
        };
        Some(TimerRef {
            namespace: self.namespace.clone(),
            target: Some(target),
        })
    }

    fn namespace_shown(&self) -> &str {
        if self.namespace.is_empty() {
            "(default)"
        } else {
            &self.namespace
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let auth = Auth(token(&cli.connection)?);
    let channel = connect(&cli.connection).await?;
    let ctx = Ctx {
        timers: TimersClient::with_interceptor(channel.clone(), auth.clone()),
        channel,
        auth,
        namespace: cli.namespace,
        output: cli.output,
        timeout: cli.connection.timeout,
    };
    match cli.command {
        Command::Add(args) => add(ctx, args).await,
        Command::AddBatch(args) => add_batch(ctx, args).await,
        Command::Cancel(args) => cancel(ctx, args).await,
        Command::Get(args) => get(ctx, args).await,
        Command::Pending(args) => pending(ctx, args).await,
        Command::Touch(args) => touch(ctx, args).await,
        Command::Keepalive(args) => keepalive(ctx, args).await,
        Command::Watch(args) => watch(ctx, args).await,
        Command::Consume(args) => consume(ctx, args).await,
        Command::Ack(args) => ack(ctx, args).await,
        Command::Health(args) => health(ctx, args).await,
    }
}

fn token(connection: &cli::Connection) -> Result<Option<MetadataValue<Ascii>>, Failure> {
    let token = match (&connection.token, &connection.token_file) {
        (Some(token), _) => token.trim().to_owned(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|error| {
                Failure::Usage(format!("reading --token-file {}: {error}", path.display()))
            })?
            .trim()
            .to_owned(),
        (None, None) => return Ok(None),
    };
    if token.is_empty() {
        return Err(Failure::Usage("the token is empty".into()));
    }
    MetadataValue::try_from(format!("Bearer {token}"))
        .map(Some)
        .map_err(|_| Failure::Usage("the token has characters not allowed in a header".into()))
}

/// Reads a PEM file named by a TLS flag.
fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|error| Failure::Usage(format!("reading {flag} {}: {error}", path.display())))
}

/// The client TLS settings, or None for plaintext; `https://` needs `--tls-ca` (this build
/// carries no system trust roots).
fn tls_config(
    connection: &cli::Connection,
    https: bool,
) -> Result<Option<ClientTlsConfig>, Failure> {
    let wanted = https
        || connection.tls_ca.is_some()
        || connection.tls_cert.is_some()
        || connection.tls_server_name.is_some();
    if !wanted {
        return Ok(None);
    }
    let Some(ca) = &connection.tls_ca else {
        return Err(Failure::Usage(
            "TLS needs --tls-ca (the CA that signed tickd's certificate)".into(),
        ));
    };
    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem("--tls-ca", ca)?));
    if let (Some(cert), Some(key)) = (&connection.tls_cert, &connection.tls_key) {
        tls = tls.identity(Identity::from_pem(
            read_pem("--tls-cert", cert)?,
            read_pem("--tls-key", key)?,
        ));
    }
    if let Some(name) = &connection.tls_server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(Some(tls))
}

/// Connects eagerly, so an unreachable server is reported before any call is made.
async fn connect(connection: &cli::Connection) -> Result<Channel, Failure> {
    let endpoint = connection.endpoint.as_str();
    let timeout = connection.timeout;
    let unreachable = |error: &dyn std::error::Error| {
        Failure::Unreachable(format!(
            "cannot reach tickd at {endpoint}: {}",
            root_cause(error)
        ))
    };
    let connecting = if let Some(path) = endpoint.strip_prefix("unix:") {
        let path = path.strip_prefix("//").unwrap_or(path).to_owned();
        if path.is_empty() {
            return Err(Failure::Usage(format!(
                "--endpoint {endpoint:?}: no socket path"
            )));
        }
        if tls_config(connection, false)?.is_some() {
            return Err(Failure::Usage(
                "TLS is for TCP endpoints; tickd's Unix socket is plaintext".into(),
            ));
        }
        // The URI is a placeholder: the connector dials the socket.
        let endpoint = Endpoint::from_static("http://tickd.sock").connect_timeout(timeout);
        tokio::time::timeout(
            timeout,
            endpoint.connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            })),
        )
        .await
    } else {
        let explicit_http = endpoint.starts_with("http://");
        let https = endpoint.starts_with("https://");
        let tls = tls_config(connection, https)?;
        if explicit_http && tls.is_some() {
            return Err(Failure::Usage(format!(
                "--endpoint {endpoint:?} is plaintext; use https:// (or HOST:PORT) with the --tls-* flags"
            )));
        }
        let url = if endpoint.contains("://") {
            endpoint.to_owned()
        } else if tls.is_some() {
            format!("https://{endpoint}")
        } else {
            format!("http://{endpoint}")
        };
        let mut parsed = Endpoint::from_shared(url)
            .map_err(|error| Failure::Usage(format!("--endpoint {endpoint:?}: {error}")))?
            .connect_timeout(timeout);
        if let Some(tls) = tls {
            parsed = parsed
                .tls_config(tls)
                .map_err(|error| Failure::Usage(format!("TLS settings: {}", root_cause(&error))))?;
        }
        tokio::time::timeout(timeout, parsed.connect()).await
    };
    match connecting {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(error)) => Err(unreachable(&error)),
        Err(_) => Err(Failure::Unreachable(format!(
            "cannot reach tickd at {endpoint}: no connection within --timeout {}",
            humantime::format_duration(timeout)
        ))),
    }
}

/// The innermost cause of an error: "connection refused" rather than "transport error".
fn root_cause(error: &dyn std::error::Error) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    one_line(&innermost.to_string())
}

fn prost_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

fn prost_timestamp(time: SystemTime) -> prost_types::Timestamp {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => prost_types::Timestamp {
            seconds: since.as_secs() as i64,
            nanos: since.subsec_nanos() as i32,
        },
        Err(before) => {
            let before = before.duration();
            let mut seconds = -(before.as_secs() as i64);
            let mut nanos = before.subsec_nanos() as i32;
            if nanos > 0 {
                seconds -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            prost_types::Timestamp { seconds, nanos }
        }
    }
}

fn read_payload(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut payload = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().lock().read_to_end(&mut payload)
    } else {
        std::fs::File::open(path).and_then(|mut file| file.read_to_end(&mut payload))
    };
    read.map_err(|error| Failure::Usage(format!("reading payload {}: {error}", path.display())))?;
    Ok(payload)
}

async fn add(ctx: Ctx, args: cli::AddArgs) -> Result<ExitCode, Failure> {
    if args.delay.is_none() && args.deadline.is_none() && args.ttl.is_none() {
        return Err(Failure::Usage(
            "add needs --delay, --deadline, or --ttl (a lease that fires after its ttl)".into(),
        ));
    }
    let payload = match (&args.payload, &args.payload_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => read_payload(path)?,
        (None, None) => Vec::new(),
    };
    let spec = TimerSpec {
        namespace: ctx.namespace.clone(),
        key: args.key.unwrap_or_default(),
        delay: args.delay.map(prost_duration),
        deadline: args.deadline.map(prost_timestamp),
        payload: payload.into(),
        repeat: args.repeat.map(prost_duration),
        ttl: args.ttl.map(prost_duration),
    };
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::NewTimeoutRequest { timer: Some(spec) });
    let answer = ctx.unary(timers.new_timeout(request)).await?;
    let timer = answer
        .timer
        .ok_or_else(|| Failure::Other("the server answered without a timer".into()))?;
    if ctx.json() {
        output::json_pretty(
            &json!({ "created": answer.created, "timer": output::timer_json(&timer) }),
        );
    } else {
        output::line(&timer.id);
        if !answer.created {
            eprintln!(
                "tickctl: key {:?} was already registered; its existing timer is kept",
                timer.key
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One JSON line of `add-batch` as a TimerSpec.
fn batch_spec(ctx: &Ctx, number: usize, text: &str) -> Result<TimerSpec, Failure> {
    let bad = |why: String| Failure::Usage(format!("line {number}: {why}"));
    let value: Value = serde_json::from_str(text).map_err(|error| bad(error.to_string()))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    let mut spec = TimerSpec {
        namespace: ctx.namespace.clone(),
        ..Default::default()
    };
    for (field, value) in object {
        let text = value
            .as_str()
            .ok_or_else(|| bad(format!("{field}: expected a string")))?;
        match field.as_str() {
            "namespace" => spec.namespace = text.to_owned(),
            "key" => spec.key = text.to_owned(),
            "payload" => spec.payload = text.as_bytes().to_vec().into(),
            "delay" => spec.delay = Some(prost_duration(cli::duration(text).map_err(bad)?)),
            "repeat" => spec.repeat = Some(prost_duration(cli::duration(text).map_err(bad)?)),
            "ttl" => spec.ttl = Some(prost_duration(cli::duration(text).map_err(bad)?)),
            "deadline" => spec.deadline = Some(prost_timestamp(cli::rfc3339(text).map_err(bad)?)),
            other => return Err(bad(format!("unknown field {other:?}"))),
        }
    }
    Ok(spec)
}

async fn add_batch(ctx: Ctx, args: cli::AddBatchArgs) -> Result<ExitCode, Failure> {
    let input = read_payload(&args.file)?;
    let input = String::from_utf8(input)
        .map_err(|_| Failure::Usage(format!("{} is not UTF-8", args.file.display())))?;
    let mut lines = Vec::new();
    let mut specs = Vec::new();
    for (index, text) in input.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        specs.push(batch_spec(&ctx, index + 1, text)?);
        lines.push(index + 1);
    }
    if specs.is_empty() {
        return Err(Failure::Usage("add-batch: no timers in the input".into()));
    }
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::NewTimeoutsRequest { timers: specs });
    let answer = ctx.unary(timers.new_timeouts(request)).await?;
    let mut failed = 0;
    for (line, result) in lines.iter().zip(&answer.results) {
        match &result.result {
            Some(proto::new_timeout_result::Result::Registered(registered)) => {
                let timer = registered.timer.clone().unwrap_or_default();
                if ctx.json() {
                    output::json_line(&json!({
                        "line": line,
                        "created": registered.created,
                        "timer": output::timer_json(&timer),
                    }));
                } else {
                    output::line(&timer.id);
                }
            }
            Some(proto::new_timeout_result::Result::Error(error)) => {
                failed += 1;
                let code = code_name(Code::from_i32(error.code));
                if ctx.json() {
                    output::json_line(&json!({
                        "line": line,
                        "error": { "code": code, "message": error.message },
                    }));
                } else {
                    output::line(format!(
                        "error line={line} {code}: {}",
                        one_line(&error.message)
                    ));
                }
            }
            None => {
                return Err(Failure::Other(format!(
                    "line {line}: the server gave no result"
                )))
            }
        }
    }
    if failed > 0 {
        eprintln!("tickctl: {failed} of {} timers were refused", lines.len());
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

async fn cancel(ctx: Ctx, args: cli::TargetArgs) -> Result<ExitCode, Failure> {
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::CancelRequest {
        timer: ctx.timer_ref(&args.target),
    });
    let answer = ctx.unary(timers.cancel(request)).await?;
    if ctx.json() {
        output::json_pretty(&json!({ "cancelled": answer.cancelled }));
    } else if answer.cancelled {
        output::line("cancelled");
    } else {
        output::line("not pending (already fired or cancelled)");
    }
    Ok(ExitCode::SUCCESS)
}

async fn get(ctx: Ctx, args: cli::TargetArgs) -> Result<ExitCode, Failure> {
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::GetRequest {
        timer: ctx.timer_ref(&args.target),
    });
    let answer = ctx.unary(timers.get(request)).await?;
    show_timer(&ctx, answer.timer)
}

fn show_timer(ctx: &Ctx, timer: Option<proto::Timer>) -> Result<ExitCode, Failure> {
    let timer =
        timer.ok_or_else(|| Failure::Other("the server answered without a timer".into()))?;
    if ctx.json() {
        output::json_pretty(&output::timer_json(&timer));
    } else {
        output::line(output::timer_details(&timer));
    }
    Ok(ExitCode::SUCCESS)
}

async fn pending(ctx: Ctx, args: cli::PendingArgs) -> Result<ExitCode, Failure> {
    if args.dead && ctx.namespace.is_empty() {
        return Err(Failure::Usage("--dead needs a --namespace".into()));
    }
    let mut timers = ctx.timers.clone();
    let mut listed = Vec::new();
    let mut page_token = String::new();
    let mut first: Option<proto::PendingResponse> = None;
    loop {
        let wanted = args.limit.saturating_sub(listed.len());
        let request = ctx.request(proto::PendingRequest {
            namespace: ctx.namespace.clone(),
            page_size: (wanted as u64).min(u64::from(args.page_size)) as u32,
            page_token: page_token.clone(),
            include_dead: args.dead && first.is_none(),
        });
        let mut page = ctx.unary(timers.pending(request)).await?;
        listed.append(&mut page.timers);
        page_token = std::mem::take(&mut page.next_page_token);
        if first.is_none() {
            first = Some(page);
        }
        if page_token.is_empty() || listed.len() >= args.limit {
            break;
        }
    }
    let first = first.unwrap_or_default();
    listed.truncate(args.limit);
    if ctx.json() {
        let mut value = json!({
            "count": first.count,
            "timers": listed.iter().map(output::timer_json).collect::<Vec<_>>(),
            "more": !page_token.is_empty(),
        });
        if !ctx.namespace.is_empty() {
            value["dead_count"] = json!(first.dead_count);
        }
        if args.dead {
            value["dead"] = first
                .dead_expirations
                .iter()
                .map(output::expiration_json)
                .collect();
        }
        output::json_pretty(&value);
        return Ok(ExitCode::SUCCESS);
    }
    if !listed.is_empty() {
        let rows: Vec<_> = listed.iter().map(output::timer_row).collect();
        output::line(output::table(&output::TIMER_HEADER, &rows));
    }
    let mut summary = format!("{} pending", first.count);
    if (listed.len() as u64) < first.count && args.limit > 0 {
        summary.push_str(&format!(" (listed {}; see --limit)", listed.len()));
    }
    if first.dead_count > 0 {
        summary.push_str(&format!(", {} dead", first.dead_count));
    }
    output::line(summary);
    if args.dead && !first.dead_expirations.is_empty() {
        let header = ["DELIVERY", "ID", "KEY", "FIRED_AT", "ATTEMPTS", "PAYLOAD"];
        let rows: Vec<_> = first
            .dead_expirations
            .iter()
            .map(|dead| {
                let timer = dead.timer.clone().unwrap_or_default();
                vec![
                    dead.delivery_id.clone(),
                    timer.id.clone(),
                    if timer.key.is_empty() {
                        "-".into()
                    } else {
                        timer.key.clone()
                    },
                    output::timestamp(dead.fired_at.as_ref()),
                    dead.attempt.to_string(),
                    output::payload(&timer.payload),
                ]
            })
            .collect();
        output::line(output::table(&header, &rows));
    }
    Ok(ExitCode::SUCCESS)
}

async fn touch(ctx: Ctx, args: cli::TouchArgs) -> Result<ExitCode, Failure> {
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::TouchRequest {
        timer: ctx.timer_ref(&args.target),
        ttl: args.ttl.map(prost_duration),
    });
    let answer = ctx.unary(timers.touch(request)).await?;
    show_timer(&ctx, answer.timer)
}

/// Resolves on Ctrl-C (or never, if the signal cannot be listened for).
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn keepalive(ctx: Ctx, args: cli::KeepaliveArgs) -> Result<ExitCode, Failure> {
    let targets: Vec<TimerRef> = args
        .ids
        .iter()
        .map(|id| cli::Target {
            id: Some(id.clone()),
            key: None,
        })
        .chain(args.keys.iter().map(|key| cli::Target {
            id: None,
            key: Some(key.clone()),
        }))
        .filter_map(|target| ctx.timer_ref(&target))
        .collect();
    let interval = match (args.interval, args.ttl) {
        (Some(interval), _) => interval,
        (None, Some(ttl)) => ttl / 3,
        (None, None) => {
            // Each lease's own ttl, read with Get; the shortest sets the pace.
            let mut shortest: Option<Duration> = None;
            let mut timers = ctx.timers.clone();
            for target in &targets {
                let request = ctx.request(proto::GetRequest {
                    timer: Some(target.clone()),
                });
                let timer = ctx
                    .unary(timers.get(request))
                    .await?
                    .timer
                    .unwrap_or_default();
                let ttl = output::std_duration(timer.ttl.as_ref())
                    .filter(|ttl| !ttl.is_zero())
                    .ok_or_else(|| {
                        Failure::Usage(format!(
                            "timer {} has no ttl (it is not a lease); give --ttl",
                            timer.id
                        ))
                    })?;
                shortest = Some(shortest.map_or(ttl, |current| current.min(ttl)));
            }
            shortest.unwrap_or(Duration::from_secs(1)) / 3
        }
    }
    .max(Duration::from_millis(1));

    let (heartbeats, outgoing) = mpsc::channel::<proto::KeepAliveRequest>(targets.len().max(1) * 2);
    let mut timers = ctx.timers.clone();
    let opening = timers.keep_alive(ReceiverStream::new(outgoing));
    // The call's headers arrive only once the stream is open; the first round is sent
    // right away by the loop below, so send nothing before awaiting it.
    let mut answers = tokio::time::timeout(ctx.timeout, opening)
        .await
        .map_err(|_| Failure::Status(Status::deadline_exceeded("KeepAlive stream did not open")))??
        .into_inner();
    if std::io::stderr().is_terminal() {
        eprintln!(
            "tickctl: keeping {} lease(s) alive every {}; Ctrl-C to stop",
            targets.len(),
            humantime::format_duration(Duration::from_millis(interval.as_millis() as u64))
        );
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sequence = 0u64;
    let mut rounds_sent = 0u64;
    let mut answered = 0u64;
    let expected = |rounds: u64| rounds * targets.len() as u64;
    loop {
        let more_rounds = args.count.is_none_or(|count| rounds_sent < count);
        tokio::select! {
            _ = ticker.tick(), if more_rounds => {
                for target in &targets {
                    sequence += 1;
                    let heartbeat = proto::KeepAliveRequest {
                        timer: Some(target.clone()),
                        ttl: args.ttl.map(prost_duration),
                        sequence,
                    };
                    if heartbeats.send(heartbeat).await.is_err() {
                        return Err(Failure::Other("the KeepAlive stream closed".into()));
                    }
                }
                rounds_sent += 1;
            }
            answer = answers.message() => {
                let answer = answer?.ok_or_else(|| {
                    Failure::Other("the server closed the KeepAlive stream".into())
                })?;
                if let Some(error) = &answer.error {
                    // The lease is lost (or never existed): nothing to keep alive.
                    return Err(Failure::Status(Status::new(
                        Code::from_i32(error.code),
                        format!("heartbeat {}: {}", answer.sequence, error.message),
                    )));
                }
                answered += 1;
                if ctx.json() {
                    output::json_line(&json!({
                        "sequence": answer.sequence,
                        "id": answer.id,
                        "deadline": output::timestamp(answer.deadline.as_ref()),
                    }));
                } else {
                    output::line(format!(
                        "kept id={} deadline={} sequence={}",
                        answer.id,
                        output::timestamp(answer.deadline.as_ref()),
                        answer.sequence
                    ));
                }
                if args.count.is_some_and(|count| answered >= expected(count)) {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            _ = interrupted() => return Ok(ExitCode::SUCCESS),
        }
    }
}

async fn subscribe(
    ctx: &Ctx,
    request: proto::SubscribeRequest,
) -> Result<tonic::Streaming<proto::SubscribeResponse>, Failure> {
    let mut timers = ctx.timers.clone();
    let opening = timers.subscribe(request);
    Ok(tokio::time::timeout(ctx.timeout, opening)
        .await
        .map_err(|_| Failure::Status(Status::deadline_exceeded("Subscribe stream did not open")))??
        .into_inner())
}

async fn watch(ctx: Ctx, args: cli::WatchArgs) -> Result<ExitCode, Failure> {
    let request = proto::SubscribeRequest {
        namespace: ctx.namespace.clone(),
        mode: subscribe_request::Mode::Observer as i32,
        ..Default::default()
    };
    let mut stream = subscribe(&ctx, request).await?;
    // Printed once the server has registered the observer: expirations from now on are shown.
    eprintln!(
        "tickctl: watching namespace {}; Ctrl-C to stop",
        ctx.namespace_shown()
    );
    let mut seen = 0u64;
    while args.count.is_none_or(|count| seen < count) {
        let expiration = tokio::select! {
            message = stream.message() => next_expiration(message)?,
            _ = interrupted() => break,
        };
        print_expiration(&ctx, &expiration);
        seen += 1;
    }
    Ok(ExitCode::SUCCESS)
}

fn next_expiration(
    message: Result<Option<proto::SubscribeResponse>, Status>,
) -> Result<proto::Expiration, Failure> {
    message?
        .ok_or_else(|| Failure::Other("the server closed the Subscribe stream".into()))?
        .expiration
        .ok_or_else(|| Failure::Other("the server sent an empty Subscribe message".into()))
}

fn print_expiration(ctx: &Ctx, expiration: &proto::Expiration) {
    if ctx.json() {
        output::json_line(&output::expiration_json(expiration));
    } else {
        output::line(output::expiration_line(expiration));
    }
}

async fn consume(ctx: Ctx, args: cli::ConsumeArgs) -> Result<ExitCode, Failure> {
    let request = proto::SubscribeRequest {
        namespace: ctx.namespace.clone(),
        mode: subscribe_request::Mode::Shared as i32,
        ack_timeout: args.ack_timeout.map(prost_duration),
        max_unacked: args.max_unacked.unwrap_or(0),
        auto_ack: args.auto_ack,
    };
    let mut stream = subscribe(&ctx, request).await?;
    eprintln!(
        "tickctl: consuming namespace {}; Ctrl-C to stop",
        ctx.namespace_shown()
    );
    let mut timers = ctx.timers.clone();
    let mut taken = 0u64;
    while args.count.is_none_or(|count| taken < count) {
        let expiration = tokio::select! {
            message = stream.message() => next_expiration(message)?,
            _ = interrupted() => break,
        };
        print_expiration(&ctx, &expiration);
        if !args.auto_ack {
            let namespace = expiration
                .timer
                .as_ref()
                .map(|timer| timer.namespace.clone())
                .unwrap_or_else(|| ctx.namespace.clone());
            let request = ctx.request(proto::AckRequest {
                namespace,
                delivery_ids: vec![expiration.delivery_id.clone()],
            });
            let answer = ctx.unary(timers.ack(request)).await?;
            if !answer.unknown.is_empty() {
                eprintln!(
                    "tickctl: delivery {} was no longer awaiting an ack (it will be delivered again)",
                    expiration.delivery_id
                );
            }
        }
        taken += 1;
    }
    Ok(ExitCode::SUCCESS)
}

async fn ack(ctx: Ctx, args: cli::AckArgs) -> Result<ExitCode, Failure> {
    let mut timers = ctx.timers.clone();
    let request = ctx.request(proto::AckRequest {
        namespace: ctx.namespace.clone(),
        delivery_ids: args.delivery_ids,
    });
    let answer = ctx.unary(timers.ack(request)).await?;
    if ctx.json() {
        output::json_pretty(&json!({
            "acknowledged": answer.acknowledged,
            "unknown": answer.unknown,
        }));
    } else {
        output::line(format!("acknowledged {}", answer.acknowledged));
    }
    if !answer.unknown.is_empty() {
        eprintln!(
            "tickctl: not awaiting an ack (already acknowledged, redelivered, or unknown): {}",
            answer.unknown.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

async fn health(ctx: Ctx, args: cli::HealthArgs) -> Result<ExitCode, Failure> {
    let mut health = HealthClient::with_interceptor(ctx.channel.clone(), ctx.auth.clone());
    let request = ctx.request(HealthCheckRequest {
        service: args.service.clone(),
    });
    let answer = ctx.unary(health.check(request)).await?;
    let status = ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown);
    let name = status.as_str_name();
    if ctx.json() {
        output::json_pretty(&json!({ "service": args.service, "status": name }));
    } else {
        output::line(name);
    }
    Ok(if status == ServingStatus::Serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
