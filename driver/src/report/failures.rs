//! A page of a run's failure records (`driver serve`'s `/runs/ID/failures`): the report lists
//! only the first ones; these are every record the store kept, page by page.

/// One page of a run's failure records, in the order they were recorded, with a link to the
/// next page (a run's report lists only its first failures).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FailurePage {
    pub run_id: String,
    /// The records after this id (0: from the first).
    pub after: i64,
    /// At most this many records on a page.
    pub limit: i64,
    pub failures: Vec<ListedFailure>,
    /// The `after` of the next page (None: this is the last).
    pub next_after: Option<i64>,
    /// Failures the workers counted; a worker keeps the records of its first ones only.
    pub counted: u64,
}

/// A failure record with its id in the store and the member that recorded it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ListedFailure {
    pub id: i64,
    pub member_id: String,
    pub record: stress_common::status::FailureRecord,
}
