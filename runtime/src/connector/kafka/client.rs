//! Small, blocking helpers around librdkafka clients shared by the source, the sink and
//! the start-up checks: client configuration, the authentication check, topic metadata,
//! broker configuration, topic creation.
//!
//! Invariants: every call here is bounded by the caller's timeout (an unreachable
//! broker becomes `KafkaError::Unreachable` after it, never a hang); the admin API's
//! futures are driven by `block_on` on the calling OS thread (the admin client has its
//! own polling thread), so no async executor is involved. Every Weir Kafka client is
//! configured by [`client_config`] from an [`Endpoint`], so each carries its
//! connector's security settings; a refused login is reported by [`authenticate`] as
//! soon as the broker answers, not after a timeout.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::{ClientConfig, TopicPartitionList};

use crate::connector::kafka::error::{KafkaError, reason};
use crate::connector::kafka::error_class::{ErrorClass, classify, classify_code, is_denied};
use crate::connector::kafka::names::is_derived_topic;
use crate::connector::kafka::security::ClientSecurity;

/// The broker setting bounding `transaction.timeout.ms`.
pub const TRANSACTION_MAX_TIMEOUT: &str = "transaction.max.timeout.ms";

/// How often [`authenticate`] looks for the broker's answer to the login.
const AUTHENTICATE_STEP: Duration = Duration::from_millis(100);

/// Where a connector's clients connect, and as whom: its bootstrap servers and its
/// resolved security settings (password included, never shown by `Debug`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub bootstrap: String,
    pub security: ClientSecurity,
}

impl Endpoint {
    /// Plaintext, unauthenticated: as a connector without a `security` table.
    pub fn plaintext(bootstrap: impl Into<String>) -> Self {
        Endpoint {
            bootstrap: bootstrap.into(),
            security: ClientSecurity::default(),
        }
    }
}

/// Settings every Weir Kafka client shares, the endpoint's security settings included.
pub fn client_config(endpoint: &Endpoint, connect_timeout: Duration) -> ClientConfig {
    let mut config = ClientConfig::new();
    endpoint.security.apply(&mut config);
    config
        .set("bootstrap.servers", &endpoint.bootstrap)
        .set(
            "socket.connection.setup.timeout.ms",
            connect_timeout.as_millis().max(1000).to_string(),
        )
        // librdkafka logs through the `log` crate; Weir reports errors itself.
        .set("log_level", "3");
    config
}

/// A client context that sends librdkafka's logs and error events to `tracing` at
/// debug level instead of stderr: Weir reports every failure that matters itself, in one
/// line (an unreachable broker would otherwise print a line per connection attempt).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietContext;

impl ClientContext for QuietContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_quietly(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::debug!(%error, reason, "librdkafka error event");
    }
}

impl ConsumerContext for QuietContext {}

/// Delivery reports ignored: a producer with this context checks its records through
/// its transaction's commit (see `takeover`).
impl ProducerContext for QuietContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// `ClientContext::log` for Weir's clients.
pub fn log_quietly(level: RDKafkaLogLevel, fac: &str, message: &str) {
    tracing::debug!(?level, fac, message, "librdkafka");
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` to completion on this thread, giving up after `timeout`.
pub fn block_on<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// Reads that may meet a group coordinator still loading (a fresh broker creates
/// `__consumer_offsets` on first use) are retried, with this pause, until their timeout.
const COORDINATOR_RETRY: Duration = Duration::from_millis(200);

/// Runs the read `f` until it succeeds, fails for good, or `timeout` passes; retries
/// only the group coordinator's "not ready yet" answers and request timeouts.
pub fn retry_read<T>(
    timeout: Duration,
    mut f: impl FnMut() -> Result<T, RdKafkaError>,
) -> Result<T, RdKafkaError> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Err(e)
                if Instant::now() + COORDINATOR_RETRY < deadline
                    && classify(&e) == ErrorClass::Retriable =>
            {
                tracing::debug!(error = %e, "kafka: group coordinator not ready, retrying the read");
                std::thread::sleep(COORDINATOR_RETRY);
            }
            other => return other,
        }
    }
}

/// The longest single wait of [`committed_offsets`] before it looks for a refusal.
const OFFSET_FETCH_STEP: Duration = Duration::from_secs(1);

/// The offsets `consumer`'s group committed for `partitions`, read as `retry_read`
/// does, in steps of at most `OFFSET_FETCH_STEP`: between them the consumer's queue is
/// searched for a refusal. librdkafka reports a group the principal may not use
/// (GROUP_AUTHORIZATION_FAILED on FindCoordinator) only as an error event there and
/// keeps looking for the coordinator, so without this the read would just time out.
pub fn committed_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &TopicPartitionList,
    timeout: Duration,
) -> Result<TopicPartitionList, RdKafkaError> {
    let deadline = Instant::now() + timeout;
    retry_read(timeout, || {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), OFFSET_FETCH_STEP);
        let result = consumer.committed_offsets(partitions.clone(), step);
        while let Some(event) = consumer.poll(Duration::ZERO) {
            if let Err(e) = event
                && is_denied(&e)
            {
                return Err(e);
            }
        }
        result
    })
}

/// The partition ids of `topic`, sorted; a missing topic or an unreachable broker is
/// refused with what to change.
pub fn topic_partitions<C: ClientContext>(
    client: &Client<C>,
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, KafkaError> {
    let metadata =
        client
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| KafkaError::Unreachable {
                bootstrap: bootstrap.to_owned(),
                timeout,
                reason: reason(&e),
            })?;
    let missing = || KafkaError::MissingTopic {
        topic: topic.to_owned(),
        bootstrap: bootstrap.to_owned(),
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(missing());
    };
    if let Some(err) = t.error() {
        let code = RDKafkaErrorCode::from(err);
        return Err(match code {
            RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => missing(),
            other => KafkaError::from_code(
                format!("cannot read the metadata of topic {topic} on {bootstrap}"),
                other,
            ),
        });
    }
    let mut partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Err(missing());
    }
    partitions.sort_unstable();
    Ok(partitions)
}

/// The partitions of a source's `topic`, as [`topic_partitions`] reads them (each
/// read bounded by `connect_timeout`). One of the pipeline's own topics
/// (`names::is_derived_topic`: a repartition topic, which the pipeline's sink side
/// creates at start) is waited for up to `failover_timeout`, since a starved or
/// failing-over cluster lists a new topic late; still missing, it is
/// `MissingOwnTopic`, which never tells the user to create it by hand (a topic made
/// with the wrong settings would be worse than none).
pub fn source_topic_partitions<C: ClientContext>(
    client: &Client<C>,
    bootstrap: &str,
    topic: &str,
    (connect_timeout, failover_timeout): (Duration, Duration),
) -> Result<Vec<i32>, KafkaError> {
    let started = Instant::now();
    loop {
        match topic_partitions(client, bootstrap, topic, connect_timeout) {
            Err(KafkaError::MissingTopic { .. })
                if is_derived_topic(topic) && started.elapsed() < failover_timeout =>
            {
                std::thread::sleep(OWN_TOPIC_POLL);
            }
            Err(KafkaError::MissingTopic { topic, bootstrap }) if is_derived_topic(&topic) => {
                return Err(KafkaError::MissingOwnTopic {
                    topic,
                    bootstrap,
                    waited: failover_timeout,
                });
            }
            other => return other,
        }
    }
}

/// Wait between two looks for one of the pipeline's own topics.
const OWN_TOPIC_POLL: Duration = Duration::from_millis(200);

/// Logs in to `endpoint` with its credentials (a no-op without `security`): fails as
/// soon as the broker refuses them (`AuthenticationFailed`), or after `timeout` if it
/// never answers. librdkafka reports a refused login only as an error event and retries
/// it forever, so without this check a wrong password would surface as a timeout (or
/// not at all, in a consumer's poll loop).
pub fn authenticate(endpoint: &Endpoint, timeout: Duration) -> Result<(), KafkaError> {
    if endpoint.security == ClientSecurity::default() {
        return Ok(());
    }
    let refused = |reason: String| KafkaError::AuthenticationFailed {
        bootstrap: endpoint.bootstrap.clone(),
        principal: endpoint.security.principal(),
        reason,
    };
    // No group.id: error events stay on the main queue, which `poll` serves.
    let probe: BaseConsumer<QuietContext> = client_config(endpoint, timeout)
        .create_with_context(QuietContext)
        .map_err(|e| KafkaError::client("cannot create a Kafka client", &e))?;
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe.fetch_metadata(None, AUTHENTICATE_STEP) {
            Ok(_) => return Ok(()),
            Err(e) if is_denied(&e) => return Err(refused(reason(&e))),
            Err(e) => reason(&e),
        };
        while let Some(event) = probe.poll(Duration::ZERO) {
            if let Err(e) = event
                && is_denied(&e)
            {
                return Err(refused(reason(&e)));
            }
        }
        if Instant::now() >= deadline {
            return Err(KafkaError::Unreachable {
                bootstrap: endpoint.bootstrap.clone(),
                timeout,
                reason: last,
            });
        }
    }
}

/// An admin client for `endpoint`.
pub fn admin(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<AdminClient<QuietContext>, KafkaError> {
    client_config(endpoint, timeout)
        .create_with_context(QuietContext)
        .map_err(|e| {
            KafkaError::client(
                format!(
                    "cannot create a Kafka admin client for {}",
                    endpoint.bootstrap
                ),
                &e,
            )
        })
}

/// Request and operation timeouts of an admin call.
pub fn admin_options(timeout: Duration) -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout))
}

/// The brokers' `transaction.max.timeout.ms`, read with DescribeConfigs from the first
/// broker of the metadata that answers (one may be down: a cluster rides through that,
/// so the check must too), each asked for its share of `timeout`; `None` if the
/// principal may not describe the cluster's configuration (a tenant's principal on a
/// shared cluster usually may not: the broker then checks the transaction timeout
/// itself, at `init_transactions`).
pub fn broker_transaction_max_timeout_ms(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    timeout: Duration,
) -> Result<Option<u64>, KafkaError> {
    let unreachable = |reason| unreachable(bootstrap, timeout, reason);
    let deadline = Instant::now() + timeout;
    let metadata = admin
        .inner()
        .fetch_metadata(None, timeout)
        .map_err(|e| unreachable(reason(&e)))?;
    let brokers: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
    let mut last = unreachable("the cluster reported no broker".into());
    for (i, broker) in brokers.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = (left / (brokers.len() - i) as u32).max(Duration::from_secs(1));
        match transaction_max_timeout_of(admin, *broker, bootstrap, share) {
            Err(e @ KafkaError::Unreachable { .. }) => {
                tracing::debug!(broker, error = %e, "kafka: a broker did not answer; asking the next");
                last = e;
            }
            answered => return answered,
        }
    }
    Err(last)
}

/// `transaction.max.timeout.ms` of broker `broker` (see the caller).
fn transaction_max_timeout_of(
    admin: &AdminClient<QuietContext>,
    broker: i32,
    bootstrap: &str,
    timeout: Duration,
) -> Result<Option<u64>, KafkaError> {
    let unreachable = |reason| unreachable(bootstrap, timeout, reason);
    let spec = [ResourceSpecifier::Broker(broker)];
    let what =
        || format!("cannot read {TRANSACTION_MAX_TIMEOUT} of broker {broker} at {bootstrap}");
    let results = block_on(
        admin.describe_configs(&spec, &admin_options(timeout)),
        timeout + Duration::from_secs(1),
    )
    .ok_or_else(|| unreachable(format!("DescribeConfigs did not answer ({})", what())))?
    .map_err(|e| match classify(&e) {
        // A broker that is down or failing over: the caller asks another.
        ErrorClass::Retriable => unreachable(format!("{}: {}", what(), reason(&e))),
        _ => KafkaError::client(what(), &e),
    })?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| KafkaError::Client {
            what: what(),
            reason: "empty answer".into(),
        })?
        .map_err(|code| match classify_code(code) {
            // The broker was asked and did not answer in time (it is down or its
            // session has not timed out yet): the caller asks another.
            ErrorClass::Retriable => unreachable(format!("{}: {code}", what())),
            _ => KafkaError::from_code(what(), code),
        });
    let resource = match resource {
        Err(KafkaError::NotAuthorized { .. }) => return Ok(None),
        other => other?,
    };
    // rust-rdkafka drops a resource's own error code and answers with no entries: a
    // broker that may be described reports hundreds, so none at all is that error, for
    // a client without DescribeConfigs on the cluster: CLUSTER_AUTHORIZATION_FAILED.
    if resource.entries.is_empty() {
        return Ok(None);
    }
    let value = resource
        .get(TRANSACTION_MAX_TIMEOUT)
        .and_then(|e| e.value.clone())
        .ok_or_else(|| KafkaError::Client {
            what: what(),
            reason: "the broker did not report it".into(),
        })?;
    value.parse().map(Some).map_err(|_| KafkaError::Client {
        what: what(),
        reason: format!("not a number: {value:?}"),
    })
}

/// Creates the `kind` topic `topic` (`partitions` partitions, the broker's default
/// replication, `configs`) unless it exists; an existing topic is left as it is (the
/// caller checks its partition count if it matters).
pub fn ensure_topic(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    (kind, topic): (&str, &str),
    partitions: i32,
    configs: &[(&str, &str)],
    timeout: Duration,
) -> Result<(), KafkaError> {
    if topic_partitions(admin.inner(), bootstrap, topic, timeout).is_ok() {
        return Ok(());
    }
    let what = || format!("cannot create the {kind} topic {topic} on {bootstrap}");
    // -1: the broker's default.replication.factor (KIP-464).
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let results = block_on(
        admin.create_topics([&new], &admin_options(timeout)),
        timeout + Duration::from_secs(1),
    )
    .ok_or_else(|| no_answer(bootstrap, timeout, &format!("CreateTopics ({})", what())))?
    .map_err(|e| KafkaError::client(what(), &e))?;
    // Created here, or by someone else just before (another worker): then its
    // partition count is theirs, and the caller checks it if it matters.
    let mut created_here = false;
    for result in results {
        match result {
            Ok(_) => created_here = true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::from_code(what(), code)),
        }
    }
    // The controller answers CreateTopics before the broker's metadata lists the new
    // partitions; a client reading the topic at once (the marker, a repartition source)
    // would be told the partition is unknown. Wait, bounded, until the broker lists it
    // (all of it, if we created it).
    let deadline = Instant::now() + timeout;
    loop {
        match topic_partitions(admin.inner(), bootstrap, topic, timeout) {
            Ok(listed) if !created_here || listed.len() == partitions as usize => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Ok(_) if Instant::now() >= deadline => return Ok(()),
            _ => std::thread::sleep(TOPIC_METADATA_POLL),
        }
    }
}

/// Wait between two looks at a just-created topic's metadata.
const TOPIC_METADATA_POLL: Duration = Duration::from_millis(50);

/// The broker at `bootstrap` could not be reached within `timeout`.
fn unreachable(bootstrap: &str, timeout: Duration, reason: String) -> KafkaError {
    KafkaError::Unreachable {
        bootstrap: bootstrap.to_owned(),
        timeout,
        reason,
    }
}

/// A call to the broker that did not answer within `timeout`.
fn no_answer(bootstrap: &str, timeout: Duration, call: &str) -> KafkaError {
    unreachable(bootstrap, timeout, format!("{call} did not answer"))
}

/// Every topic the principal may see on the cluster, with its partition count.
pub fn list_topics(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    timeout: Duration,
) -> Result<Vec<(String, usize)>, KafkaError> {
    let metadata =
        admin
            .inner()
            .fetch_metadata(None, timeout)
            .map_err(|e| KafkaError::Unreachable {
                bootstrap: bootstrap.to_owned(),
                timeout,
                reason: reason(&e),
            })?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_owned(), t.partitions().len()))
        .collect())
}

/// Deletes `topics` (DeleteTopics); returns those that existed.
pub fn delete_topics(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<String>, KafkaError> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let results = block_on(
        admin.delete_topics(&names, &admin_options(timeout)),
        timeout + Duration::from_secs(1),
    )
    .ok_or_else(|| no_answer(bootstrap, timeout, "DeleteTopics"))?
    .map_err(|e| KafkaError::client("deleting topics", &e))?;
    let mut deleted = Vec::new();
    for result in results {
        match result {
            Ok(topic) => deleted.push(topic),
            Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((topic, code)) => {
                return Err(KafkaError::from_code(
                    format!("deleting topic {topic}"),
                    code,
                ));
            }
        }
    }
    Ok(deleted)
}
