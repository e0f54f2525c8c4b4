//! The one error type of the crate. Callers mostly care about [`QueueError::StaleToken`]
//! (drop the task: someone else owns it now); everything else is an operator problem.

/// Errors returned by every queue operation.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The query text is empty, too long or contains control characters.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The caller's lease token is not the current one (lease lost, task reclaimed, finished
    /// or cancelled). Nothing was written.
    #[error("stale lease token: the lease is no longer yours")]
    StaleToken,
    /// The task does not exist.
    #[error("task not found")]
    NotFound,
    /// Redis itself failed (connection, script error, ...).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis returned data this crate did not write; never a panic, so a damaged key cannot
    /// take a worker down.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The settings refuse to work with this Redis or this queue (another partition count, a
    /// queue name that cannot be a hash tag, a Redis too old, a repartition that must wait):
    /// the message says what to change, in the settings' own names. Nothing was written.
    #[error("{0}")]
    Config(String),
    /// The queue was repartitioned (`repoll admin repartition`) while this process ran: it
    /// has another partition count now, or is being moved to one, so this handle would write
    /// where the queue no longer reads (and read where it no longer writes). Nothing was
    /// written. Only a restart with the new count helps; not the caller's mistake.
    #[error(
        "queue {queue:?} was repartitioned to {now} partitions while this process ran with \
         {have}: it accepts nothing more; restart it (with REPOLL_PARTITIONS={now})"
    )]
    LayoutChanged {
        /// The queue's name.
        queue: String,
        /// The partition count this process runs with.
        have: u16,
        /// The count the queue has now (or is being moved to).
        now: u16,
    },
}

impl From<model::InvalidQuery> for QueueError {
    fn from(e: model::InvalidQuery) -> Self {
        QueueError::InvalidQuery(e.0)
    }
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, QueueError>;

/// Shorthand for building a [`QueueError::Corrupt`].
pub(crate) fn corrupt(msg: impl Into<String>) -> QueueError {
    QueueError::Corrupt(msg.into())
}

/// Shorthand for building a [`QueueError::Config`].
pub(crate) fn config(msg: impl Into<String>) -> QueueError {
    QueueError::Config(msg.into())
}
