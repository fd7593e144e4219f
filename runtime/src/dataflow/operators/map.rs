//! `MapOperator`: a stateless step that hands each batch to a `mapper` guest.
//!
//! Invariants: one guest call per batch, never per record. The guest's rejections go
//! to the dead-letter output with the guest's reason; everything else it returns is
//! emitted in order. When a call fails (a trap, a panic, the memory limit, bad output;
//! the CPU deadline too under `"dead-letter"`), the batch is retried record by record,
//! each record alone, an instance dropped after each failure (`retry_alone`): with
//! `on_error = "fail"` the operator fails naming the first record that fails alone (its
//! index in this subtask's input and its key; a call deadline fails at once, naming the
//! batch, rather than wait another deadline); with `"dead-letter"` each such record is
//! refused with the error as its reason and the others' output emitted in input order,
//! as the batch's would have been (a map's output is per record). Under
//! `"dead-letter"`, a record whose call alone ran out of its deadline is called once
//! more, in a fresh instance, before it is refused (`second_try`): the deadline is
//! wall-clock, and on a starved or paused host it passes with the guest barely run; a
//! guest that loops or sleeps on the record runs out twice. At most
//! [`MAX_FAILED_ALONE`] records of a batch may fail alone (each may cost a call
//! deadline, or two); past that the operator fails.
//! A failed operator's checkpoint is never committed, so no partial output of the
//! failed run leaks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::dataflow::operators::OnError;
use crate::dataflow::operators::guest_call::{
    GuestCallError, MAX_FAILED_ALONE, SECOND_CALL_NOTE, calls_again, fail_alone, memory_note,
    sample_and_recycle,
};
use crate::engine::{EngineError, GuestLimits, GuestModule, MapOutput, MapperInstance};
use crate::metrics::guest_memory::GuestMemoryGauge;
use crate::record::batch::RecordBatch;

pub struct MapOperator {
    id: String,
    module: Arc<GuestModule>,
    limits: GuestLimits,
    config: BTreeMap<String, String>,
    instance: Option<MapperInstance>,
    /// Records this operator has been given so far (for error messages).
    records_seen: u64,
    /// The instance's linear memory, sampled after each call.
    memory: GuestMemoryGauge,
    on_error: OnError,
}

impl MapOperator {
    pub fn new(
        id: String,
        module: Arc<GuestModule>,
        limits: GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Self {
        Self {
            id,
            module,
            limits,
            config,
            instance: None,
            records_seen: 0,
            memory: GuestMemoryGauge::detached(),
            on_error: OnError::Fail,
        }
    }

    /// What a record that fails alone does (see the module's invariants).
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Reports the instance's linear memory to `gauge` (a pipeline's per-step figure).
    pub fn with_memory_gauge(mut self, gauge: GuestMemoryGauge) -> Self {
        self.memory = gauge;
        self
    }

    fn instance(&mut self) -> Result<&mut MapperInstance, EngineError> {
        if self.instance.is_none() {
            self.instance = Some(
                self.module
                    .instantiate_mapper(&self.limits, self.config.clone())?,
            );
        }
        Ok(self.instance.as_mut().expect("just instantiated"))
    }
}

impl Operator for MapOperator {
    fn id(&self) -> &str {
        &self.id
    }

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let first = self.records_seen;
        self.records_seen += batch.len() as u64;
        match self.call(batch, first) {
            Ok(output) => {
                emit(&self.id, output, out);
                Ok(())
            }
            Err((error, Some(input))) if self.retries(&error.source) => {
                self.retry_alone(input, first, error, out)
            }
            Err((error, _)) => Err(error.into()),
        }
    }
}

impl MapOperator {
    /// One guest call over `batch` (records `first..` of this subtask). On failure the
    /// instance is dropped, and the batch handed back unless the failure was not the
    /// call's (no instance could be made).
    #[allow(
        clippy::result_large_err,
        reason = "the error carries the batch it hands back, moved once per failed call, never on the record path"
    )]
    fn call(
        &mut self,
        batch: RecordBatch,
        first: u64,
    ) -> Result<MapOutput, (GuestCallError, Option<RecordBatch>)> {
        let (end, input_bytes) = (first + batch.len() as u64, batch.byte_len());
        let key = (batch.len() == 1).then(|| batch.get(0).key.to_vec());
        let result = match self.instance() {
            Ok(instance) => instance
                .map_or_hand_back(batch)
                .map_err(|failed| (failed.error, Some(failed.input))),
            Err(e) => Err((e, None)),
        };
        if result.is_err() {
            // A failed instance is unusable; the next call instantiates anew.
            self.instance = None;
        }
        sample_and_recycle(&self.id, &mut self.instance, &self.memory);
        result.map_err(|(source, input)| {
            let error = GuestCallError {
                module: self.module.name().to_owned(),
                first,
                end,
                key,
                note: memory_note(&source, input_bytes),
                source,
            };
            (error, input)
        })
    }

    /// Whether a call that failed with `error` is retried record by record. Always with
    /// `on_error = "dead-letter"`; with `"fail"` only when the failure was quick: a call
    /// deadline is not spent again (once per record alone) just to name the record.
    fn retries(&self, error: &EngineError) -> bool {
        self.on_error == OnError::DeadLetter || !matches!(error, EngineError::CpuDeadline { .. })
    }

    /// The batch's call failed with `batch_error`: maps its records one at a time (see
    /// the module's invariants).
    fn retry_alone(
        &mut self,
        input: RecordBatch,
        first: u64,
        batch_error: GuestCallError,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        if input.len() == 1 {
            // It failed alone already.
            let error = match self.second_try(batch_error, input.clone(), first) {
                Ok(output) => {
                    emit(&self.id, output, out);
                    return Ok(());
                }
                Err(error) => error,
            };
            if self.on_error == OnError::Fail {
                return Err(error.into());
            }
            let r = input.get(0);
            out.reject(&self.id, error.to_string(), r.key, r.value, r.timestamp);
            return Ok(());
        }
        let mut emitted = RecordBatch::default();
        let mut failed = 0;
        for (i, r) in input.iter().enumerate() {
            let mut one = RecordBatch::default();
            one.push(r.key, r.value, r.timestamp);
            let index = first + i as u64;
            let tried = match self.call(one, index) {
                Err((error, Some(one))) => self.second_try(error, one, index),
                done => done.map_err(|(error, _)| error),
            };
            let error = match tried {
                Ok(output) => {
                    emit_into(&self.id, output, &mut emitted, out);
                    continue;
                }
                Err(error) => error,
            };
            failed += 1;
            if self.on_error == OnError::Fail || failed > MAX_FAILED_ALONE {
                return Err(fail_alone(error, failed).into());
            }
            out.reject(&self.id, error.to_string(), r.key, r.value, r.timestamp);
        }
        if failed == 0 && self.on_error == OnError::Fail {
            return Err(batch_error.into());
        }
        out.emit(emitted);
        Ok(())
    }
}

impl MapOperator {
    /// The call over the one record `one` (record `index` of this subtask) failed with
    /// `error`: under `"dead-letter"`, if it ran out of its deadline, it is made once
    /// more in a fresh instance (see the module's invariants). A second failure is
    /// the record's, its error saying it was the second.
    #[allow(
        clippy::result_large_err,
        reason = "a failed call's error, made once per failed call"
    )]
    fn second_try(
        &mut self,
        error: GuestCallError,
        one: RecordBatch,
        index: u64,
    ) -> Result<MapOutput, GuestCallError> {
        if !calls_again(&self.id, &error.source, self.on_error) {
            return Err(error);
        }
        self.call(one, index).map_err(|(mut again, _)| {
            again.note.push_str(SECOND_CALL_NOTE);
            again
        })
    }
}

/// A successful call's rejections to the dead letters, its records downstream.
fn emit(id: &str, output: MapOutput, out: &mut Output) {
    let mut records = RecordBatch::default();
    emit_into(id, output, &mut records, out);
    out.emit(records);
}

/// Like [`emit`], appending the records to `records` (one record's call at a time).
fn emit_into(id: &str, output: MapOutput, records: &mut RecordBatch, out: &mut Output) {
    for rejection in &output.rejections {
        let r = output.input.get(rejection.index as usize);
        out.reject(id, rejection.reason.clone(), r.key, r.value, r.timestamp);
    }
    if records.is_empty() {
        *records = output.records;
    } else {
        for r in output.records.iter() {
            records.push(r.key, r.value, r.timestamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::GuestInstance;

    struct Instance {
        memory_bytes: usize,
        wants_recycling: bool,
        code_outdated: bool,
    }

    impl GuestInstance for Instance {
        fn module_name(&self) -> &str {
            "m.wasm"
        }
        fn memory_bytes(&self) -> usize {
            self.memory_bytes
        }
        fn wants_recycling(&self) -> bool {
            self.wants_recycling
        }
        fn code_outdated(&self) -> bool {
            self.code_outdated
        }
    }

    fn after_a_call(wants_recycling: bool, code_outdated: bool) -> (bool, u64, u64) {
        let gauge = GuestMemoryGauge::detached();
        let mut instance = Some(Instance {
            memory_bytes: 5 << 20,
            wants_recycling,
            code_outdated,
        });
        sample_and_recycle("op", &mut instance, &gauge);
        (instance.is_some(), gauge.get(), gauge.recycled_count())
    }

    /// Issue 51: a call's deadline is wall-clock, and on a starved or paused host it
    /// passes with the guest barely run. Under `"dead-letter"` a record whose call
    /// alone ran out of its deadline once is called again in a fresh instance and its
    /// output emitted, not refused; one that runs out twice is refused, its reason
    /// saying so. `sleep-until T` (the `sleeper` guest) runs out of a 1 s deadline in
    /// the batch's call and in its first call alone, and fits in its second: T is
    /// 2.5 s ahead, half a deadline of slack either way. Fails without the second try:
    /// the record went to the dead letters.
    #[test]
    fn a_record_that_ran_out_of_its_deadline_once_is_called_again_not_refused() {
        use crate::engine::WasmEngine;
        use crate::test_support::guest_path;
        use std::time::{Duration, SystemTime, UNIX_EPOCH};

        let engine = WasmEngine::new(None).expect("engine");
        let module = Arc::new(engine.load(&guest_path("sleeper")).expect("sleeper"));
        let limits = GuestLimits {
            call_timeout: Duration::from_secs(1),
            ..GuestLimits::default()
        };
        let mut map = MapOperator::new("step-0".into(), module, limits, BTreeMap::new())
            .with_on_error(OnError::DeadLetter);
        // Instantiated first: the deadlines below are the calls' own.
        map.instance().expect("an instance");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
        let slowed = format!("sleep-until {}", now.as_millis() + 2_500);
        let mut batch = RecordBatch::default();
        for (key, value) in [("a", "first"), ("b", slowed.as_str()), ("c", "sleep 5")] {
            batch.push(key.as_bytes(), value.as_bytes(), 0);
        }
        let mut out = Output::default();
        map.handle_batch(batch, &mut out).expect("handled");
        let emitted: Vec<String> = out
            .batches
            .iter()
            .flat_map(|b| {
                b.iter()
                    .map(|r| String::from_utf8_lossy(r.value).into_owned())
            })
            .collect();
        assert_eq!(emitted, ["first", slowed.as_str()]);
        let refused: Vec<(&[u8], &str)> = out
            .dead_letters
            .iter()
            .map(|d| (d.key.as_slice(), d.reason.as_str()))
            .collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].0, b"c");
        assert!(
            refused[0].1.contains("time limit")
                && refused[0]
                    .1
                    .contains("the second call, in a fresh instance"),
            "{}",
            refused[0].1
        );
    }

    /// The instance is kept unless it used half its headroom (a recycle, counted) or
    /// its module has faster code (replaced, not counted); its memory is sampled first.
    #[test]
    fn an_instance_is_dropped_when_it_wants_recycling_or_its_code_is_outdated() {
        let sampled = 5 << 20;
        assert_eq!(after_a_call(false, false), (true, sampled, 0));
        assert_eq!(after_a_call(true, false), (false, sampled, 1));
        assert_eq!(after_a_call(false, true), (false, sampled, 0));
        assert_eq!(after_a_call(true, true), (false, sampled, 1));
    }
}
