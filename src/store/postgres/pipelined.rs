//! A write transaction whose `BEGIN` travels with its first statements.
//!
//! tokio-postgres's `transaction()` waits for `BEGIN`'s answer before it hands out the
//! transaction: a round trip of its own, which a worker whose database is a network hop away
//! pays on every settle. Here `BEGIN` is one more request of a pipelined batch: the caller
//! joins [`Pipelined::begin`] first (`tokio::try_join!(biased; tx.begin(), ...)`), so it is
//! sent before anything the other futures send, and the server runs them in that order.
//! `BEGIN` on an idle connection can only fail when the connection does, and then every
//! statement after it fails too.
//!
//! A connection must never go back to the pool inside a transaction. A transaction that
//! ends in an error is rolled back before its connection is returned; one dropped midway (its
//! future cancelled) takes its connection out of the pool, and closing it rolls back.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;

use crate::error::StoreError;

/// A pooled connection with a transaction that [`Pipelined::begin`] opens.
pub(crate) struct Pipelined {
    conn: Option<Object>,
    /// `BEGIN` may have been sent, and neither `COMMIT` nor `ROLLBACK` has answered.
    open: AtomicBool,
}

impl Pipelined {
    /// Wraps a pooled connection; nothing is sent yet.
    pub(crate) fn new(conn: Object) -> Pipelined {
        Pipelined {
            conn: Some(conn),
            open: AtomicBool::new(false),
        }
    }

    /// The connection, for the transaction's statements (sent after [`Self::begin`]).
    pub(crate) fn client(&self) -> &Object {
        // Taken only by `drop`.
        self.conn.as_ref().expect("a live transaction's connection")
    }

    /// Sends `BEGIN`: polled before the first statements are sent, it goes ahead of them
    /// on the same round trip.
    pub(crate) async fn begin(&self) -> Result<(), StoreError> {
        self.open.store(true, Ordering::Release);
        self.client()
            .batch_execute("BEGIN")
            .await
            .map_err(|e| StoreError::pg("begin", e))
    }

    /// Commits. An error may still have committed (the answer was lost): the caller does
    /// not run the transaction again.
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        debug_assert!(self.open.load(Ordering::Acquire), "COMMIT without BEGIN");
        let done = self.client().batch_execute("COMMIT").await;
        // Answered, even with an error: the server ended the transaction (or the
        // connection is closed, and the pool drops it).
        self.open.store(false, Ordering::Release);
        done.map_err(|e| StoreError::pg("commit", e))
    }

    /// Rolls back after an error, so the connection goes back to the pool idle.
    pub(crate) async fn rollback(self) {
        if !self.open.load(Ordering::Acquire) || self.client().is_closed() {
            self.open.store(false, Ordering::Release);
            return;
        }
        if self.client().batch_execute("ROLLBACK").await.is_ok() {
            self.open.store(false, Ordering::Release);
        }
    }
}

impl Drop for Pipelined {
    fn drop(&mut self) {
        if self.open.load(Ordering::Acquire)
            && let Some(conn) = self.conn.take()
        {
            // Out of the pool and closed: the server rolls the transaction back.
            drop(Object::take(conn));
        }
    }
}
