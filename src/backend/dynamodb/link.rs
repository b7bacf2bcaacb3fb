//! [`Link`]: the DynamoDB client lockrun uses — the official SDK with the standard credential
//! chain, an HTTPS client on rustls and ring (no C library in the build), the SDK's standard retry
//! policy (throttling and transient errors retried with jittered backoff) kept inside lockrun's own
//! deadline on every request, and the server's clock read from each response's `Date` header.
//!
//! Errors are sorted once here ([`Failure`]): a failed condition, a missing table (created on
//! first use, see [`super::table`]), a refusal by the service, no credentials from the chain, or
//! no answer; messages name the endpoint and, for a refusal, the action the credentials lack.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, Region, RuntimeComponents};
use aws_sdk_dynamodb::error::{BoxError, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::{DateTime, DateTimeFormat};
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};

use super::settings::Settings;
use crate::backend::{BackendError, answer};
use crate::clock::BootInstant;
use crate::messages::{duration, fragment};

/// Longest wait for a request that is not a renewal (retries included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The SDK's tries per request (throttling, 5xx, dropped connections), its backoff starting at
/// [`FIRST_BACKOFF`] and doubling up to [`MAX_BACKOFF`], all within the request's own deadline.
const MAX_ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_millis(400);
/// The region when an `endpoint=` server is used and neither the URL nor the environment names
/// one (local servers ignore it; the signature needs one).
const LOCAL_REGION: &str = "us-east-1";

/// An HTTPS client (on rustls and ring) with a connection pool of its own.
fn https(tls: &TlsContext) -> aws_sdk_dynamodb::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .tls_context(tls.clone())
        .build_https()
}

/// Why a request failed.
#[derive(Debug)]
pub enum Failure {
    /// The write's condition did not hold.
    Condition,
    /// The table does not exist (yet).
    NoTable,
    /// The table exists, with a key that is not lockrun's.
    ForeignKey,
    /// The service refused; `code` is its error code.
    Refused { code: String, message: String },
    /// The credential chain gave no credentials to sign with: nothing was sent.
    NoCredentials(String),
    /// No answer: the endpoint cannot be reached, or did not answer in time.
    Unanswered(String),
}

/// One DynamoDB table, reached through the SDK.
pub struct Link {
    pub client: Client,
    /// A client with connections of its own, made on first use, for a holder's looks at its seat
    /// (see the lease): a look held up by a silent network must not take the connection that the
    /// renewals go out on, and leave the next renewal to open a new one in the silence.
    aside: std::sync::OnceLock<Client>,
    /// The client's configuration and TLS, for the one aside.
    config: aws_sdk_dynamodb::Config,
    tls: TlsContext,
    pub table: String,
    /// Whether a missing table may be created.
    pub create: bool,
    /// Where requests go, for messages: the `endpoint=` URL or the region's service endpoint.
    endpoint: String,
    clock: Arc<ServerClock>,
    /// Set once the table is known to exist.
    ready: tokio::sync::OnceCell<()>,
}

impl Link {
    /// Loads the AWS configuration and makes the client; sends nothing.
    pub async fn open(settings: &Settings) -> Result<Self, BackendError> {
        // A plain-HTTP endpoint (a local server) needs no trust store: loading the system's
        // roots would cost every run a few milliseconds for nothing.
        let mut tls = TlsContext::builder();
        if settings
            .endpoint
            .as_ref()
            .is_some_and(|e| e.starts_with("http://"))
        {
            tls = tls.with_trust_store(TrustStore::empty());
        }
        let tls = tls.build().map_err(|e| BackendError::Failed {
            endpoint: format!("dynamodb://{}", settings.table),
            reason: fragment(&e.to_string(), &[]),
        })?;
        let retry = RetryConfig::standard()
            .with_max_attempts(MAX_ATTEMPTS)
            .with_initial_backoff(FIRST_BACKOFF)
            .with_max_backoff(MAX_BACKOFF);
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https(&tls))
            .retry_config(retry)
            .timeout_config(timeouts);
        // With a local server, the region need not be looked up (least of all from an EC2
        // instance's metadata service).
        let region = settings.region.clone().or_else(|| {
            settings.endpoint.as_ref().map(|_| {
                ["AWS_REGION", "AWS_DEFAULT_REGION"]
                    .iter()
                    .find_map(|key| std::env::var(key).ok().filter(|v| !v.is_empty()))
                    .unwrap_or_else(|| LOCAL_REGION.to_owned())
            })
        });
        if let Some(region) = region {
            loader = loader.region(Region::new(region));
        }
        let sdk = loader.load().await;
        let Some(region) = sdk.region().map(|r| r.to_string()) else {
            return Err(BackendError::Failed {
                endpoint: format!("dynamodb://{}", settings.table),
                reason: "no AWS region: set AWS_REGION (or a profile's region), or add \
                         ?region=REGION to the URL"
                    .into(),
            });
        };
        let clock = Arc::new(ServerClock::default());
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(SharedClock(Arc::clone(&clock)));
        let endpoint = match &settings.endpoint {
            Some(url) => {
                config = config.endpoint_url(url);
                url.clone()
            }
            None => format!("dynamodb.{region}.amazonaws.com"),
        };
        let config = config.build();
        Ok(Link {
            client: Client::from_conf(config.clone()),
            aside: std::sync::OnceLock::new(),
            config,
            tls,
            table: settings.table.clone(),
            create: settings.create,
            endpoint,
            clock,
            ready: tokio::sync::OnceCell::new(),
        })
    }

    /// The client whose connections are kept apart from [`Link::client`]'s.
    pub fn aside(&self) -> &Client {
        self.aside.get_or_init(|| {
            let config = self.config.to_builder().http_client(https(&self.tls));
            Client::from_conf(config.build())
        })
    }

    /// Where requests go, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends one request (`action` names its permission, such as `dynamodb:UpdateItem`), giving
    /// up after `limit`, the SDK's retries included. A missing table is created first when
    /// `settings` allow it, and the request sent again.
    pub async fn send<T, E, F, Fut>(
        &self,
        limit: Duration,
        action: &'static str,
        request: F,
    ) -> Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        let started = BootInstant::now();
        match self.once(limit, action, request()).await {
            Err(Failure::NoTable) if self.ready.get().is_none() => {
                super::table::ensure(self).await?;
                let left = limit.saturating_sub(BootInstant::now().saturating_since(started));
                self.once(left.max(limit / 2), action, request()).await
            }
            other => other,
        }
    }

    /// Like [`Link::send`], but a missing table is never created: where it may be created on
    /// first use it is an answer (`None`, nothing in it yet), and with `create=false` the error
    /// the run would meet.
    pub async fn read<T, E, Fut>(
        &self,
        limit: Duration,
        action: &'static str,
        request: Fut,
    ) -> Result<Option<T>, Failure>
    where
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        match self.once(limit, action, request).await {
            Ok(answer) => Ok(Some(answer)),
            Err(Failure::NoTable) if self.create => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One request within `limit`, its failure sorted.
    pub async fn once<T, E, Fut>(
        &self,
        limit: Duration,
        action: &'static str,
        request: Fut,
    ) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        match answer::within(limit, request).await {
            Ok(Ok(answer)) => {
                let _ = self.ready.set(());
                Ok(answer)
            }
            Ok(Err(e)) => Err(sort(e, action)),
            Err(_) => Err(Failure::Unanswered(format!(
                "no answer within {}",
                duration(limit)
            ))),
        }
    }

    /// The failure as a backend error, naming the endpoint (and the table, for a missing one).
    pub fn error(&self, failure: Failure) -> BackendError {
        match failure {
            Failure::Unanswered(reason) => BackendError::Unreachable {
                endpoint: self.endpoint.clone(),
                reason,
            },
            Failure::Condition => self.failed("a conditional write failed unexpectedly".into()),
            Failure::NoTable => self.failed(format!(
                "table {} does not exist (create=false: create it with a string partition key \
                 named {}, or drop create=false)",
                self.table,
                super::item::KEY
            )),
            Failure::Refused { code, message } => self.failed(match message.is_empty() {
                true => format!("the service refused: {code}"),
                false => format!("the service refused: {code}: {message}"),
            }),
            Failure::ForeignKey => self.failed(format!(
                "table {} is not lockrun's: its key is not a single string partition key named \
                 {} (name a table for lockrun alone; it creates one on first use)",
                self.table,
                super::item::KEY
            )),
            Failure::NoCredentials(reason) => self.failed(reason),
        }
    }

    /// An error about this table that is not a refusal by the service.
    pub fn failed(&self, reason: String) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoint.clone(),
            reason,
        }
    }

    /// The server's wall clock now, from the latest response's `Date` header (whole seconds)
    /// plus the time since, by the boot clock: `(earliest, latest)` it can be. `None` before any
    /// response.
    pub fn server_now(&self) -> Option<(SystemTime, SystemTime)> {
        let latest = *self
            .clock
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (date, seen) = latest?;
        let since = BootInstant::now().saturating_since(seen);
        Some((date + since, date + since + Duration::from_secs(1)))
    }
}

/// A conditional write's outcome: a failed condition is an answer (`None`), not an error.
pub fn conditional<T>(sent: Result<T, Failure>) -> Result<Option<T>, Failure> {
    match sent {
        Ok(answer) => Ok(Some(answer)),
        Err(Failure::Condition) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sorts an SDK error: its service error code decides; a request that never got an answer is
/// [`Failure::Unanswered`].
fn sort<E>(e: SdkError<E, HttpResponse>, action: &'static str) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let code = e.code().unwrap_or_default().to_owned();
    let message = fragment(e.message().unwrap_or_default(), &[]);
    match code.as_str() {
        "ConditionalCheckFailedException" => return Failure::Condition,
        "ResourceNotFoundException" => return Failure::NoTable,
        "AccessDeniedException" | "UnrecognizedClientException" => {
            return Failure::Refused {
                code,
                message: format!("the credentials lack {action} on this table ({message})"),
            };
        }
        "ValidationException"
            if message
                .to_lowercase()
                .contains("key element does not match") =>
        {
            return Failure::ForeignKey;
        }
        "" => {}
        _ => return Failure::Refused { code, message },
    }
    if let Some(reason) = credentials_missing(&e) {
        return Failure::NoCredentials(reason);
    }
    let text = fragment(&chain(&e), &[]);
    match e {
        SdkError::DispatchFailure(_) => {
            Failure::Unanswered(crate::messages::io_cause(&e).unwrap_or(text))
        }
        SdkError::TimeoutError(_) => Failure::Unanswered(text),
        // An HTTP answer that is not DynamoDB's: something else listens there.
        SdkError::ResponseError(_) => Failure::Refused {
            code: "an answer that is not DynamoDB's".into(),
            message: text,
        },
        _ => Failure::Unanswered(text),
    }
}

/// Why the credential chain gave nothing to sign a request with, when that is why it failed.
fn credentials_missing(e: &(dyn StdError + 'static)) -> Option<String> {
    let found = std::iter::successors(Some(e), |&e| e.source())
        .find_map(|e| e.downcast_ref::<CredentialsError>())?;
    Some(match found {
        CredentialsError::CredentialsNotLoaded(_) => "no AWS credentials: none of the standard \
            chain's sources has any (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or \
            the default profile, SSO, a web identity token, an ECS or EC2 role)"
            .to_owned(),
        other => format!(
            "cannot get AWS credentials: {}",
            fragment(&chain(other), &[])
        ),
    })
}

/// An error and its causes, `: `-separated, each said once.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// The server's latest `Date`, and when it was read by the boot clock.
#[derive(Debug, Default)]
struct ServerClock {
    latest: Mutex<Option<(SystemTime, BootInstant)>>,
}

/// The interceptor that records each response's `Date` header.
#[derive(Debug)]
struct SharedClock(Arc<ServerClock>);

impl Intercept for SharedClock {
    fn name(&self) -> &'static str {
        "lockrun server clock"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let seen = BootInstant::now();
        let date = context
            .response()
            .headers()
            .get("date")
            .and_then(|text| DateTime::from_str(text, DateTimeFormat::HttpDate).ok())
            .and_then(|date| SystemTime::try_from(date).ok());
        if let Some(date) = date {
            *self.0.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some((date, seen));
        }
        Ok(())
    }
}
