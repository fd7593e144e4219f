//! `TransactionalProducer`: the calls the commit unit makes on one of its producers,
//! as a seam, so that the unit's slot alternation and two-phase commit can be tested in
//! process with a fake producer (see `commit_unit_tests.rs`), while a run always uses
//! rdkafka's `ThreadedProducer`.
//!
//! Invariants: each method is exactly the rdkafka call of the same name (the blanket
//! implementation below forwards and adds nothing); a record handed over by `send`
//! gets exactly one delivery report, which counts it done in its `InFlight`; a record
//! `send` refuses is handed back and gets none.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError as RdKafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::connector::kafka::commit_unit::DeliveryContext;
use crate::connector::kafka::in_flight::InFlight;

/// A record as the commit unit sends it: its delivery report counts it in `InFlight`.
pub type UnitRecord<'a> = BaseRecord<'a, [u8], [u8], Arc<InFlight>>;

pub trait TransactionalProducer: Send + Sync {
    /// Where delivery reports and error events are recorded.
    fn context(&self) -> &DeliveryContext;
    /// The client's fatal error, if it has one.
    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)>;
    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()>;
    fn begin_transaction(&self) -> KafkaResult<()>;
    #[allow(clippy::result_large_err)]
    fn send<'a>(&self, record: UnitRecord<'a>) -> Result<(), (RdKafkaError, UnitRecord<'a>)>;
    fn flush(&self, timeout: Duration) -> KafkaResult<()>;
    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()>;
    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()>;
}

impl TransactionalProducer for ThreadedProducer<DeliveryContext> {
    fn context(&self) -> &DeliveryContext {
        Producer::context(self)
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.client().fatal_error()
    }

    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::init_transactions(self, timeout)
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        Producer::begin_transaction(self)
    }

    fn send<'a>(&self, record: UnitRecord<'a>) -> Result<(), (RdKafkaError, UnitRecord<'a>)> {
        ThreadedProducer::send(self, record)
    }

    fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::flush(self, timeout)
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()> {
        Producer::send_offsets_to_transaction(self, offsets, group, timeout)
    }

    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::commit_transaction(self, timeout)
    }
}
