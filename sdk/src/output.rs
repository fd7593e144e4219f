//! What a guest function may return as its output records.

use crate::Record;
use crate::framing::Batch;

/// The output of a `#[map]` function or an aggregate's `emit` function: zero, one or
/// several records.
///
/// Implemented for [`Record`] (map), [`Option<Record>`] (filter: `None` drops the input)
/// and [`Vec<Record>`] (flat-map: any number, in order). Sealed.
pub trait IntoRecords: sealed::Sealed {
    #[doc(hidden)]
    fn push_into(self, out: &mut Batch);
}

impl IntoRecords for Record {
    fn push_into(self, out: &mut Batch) {
        out.push_record(&self);
    }
}

impl IntoRecords for Option<Record> {
    fn push_into(self, out: &mut Batch) {
        if let Some(record) = self {
            out.push_record(&record);
        }
    }
}

impl IntoRecords for Vec<Record> {
    fn push_into(self, out: &mut Batch) {
        for record in &self {
            out.push_record(record);
        }
    }
}

/// What an aggregate's update function may return: `()` (never refuses a record) or
/// `Result<(), Error>` (`Err` refuses the record). Sealed.
pub trait UpdateResult: sealed::Sealed {
    #[doc(hidden)]
    fn into_result(self) -> crate::Result<()>;
}

impl UpdateResult for () {
    fn into_result(self) -> crate::Result<()> {
        Ok(())
    }
}

impl UpdateResult for crate::Result<()> {
    fn into_result(self) -> crate::Result<()> {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Record {}
    impl Sealed for Option<crate::Record> {}
    impl Sealed for Vec<crate::Record> {}
    impl Sealed for () {}
    impl Sealed for crate::Result<()> {}
}
