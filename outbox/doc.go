// Package outbox dispatches a transactional outbox to brokers without letting one
// failing destination hold up the others.
//
// An application writes messages into an outbox table inside its own database
// transaction (outbox/postgres), so a message exists exactly when the business change
// that produced it committed. A Processor then claims due rows in batches, under a
// lease so that several dispatchers can share a table, and for each destination in
// the batch either
//
//   - defers the rows, when the destination's circuit is open: nothing is published,
//     the rows become visible again after the circuit's NotBefore (plus jitter), their
//     deferral count goes up and their attempts do not; a row deferred for longer than
//     MaxCircuitDeferral is dead with ReasonDeferralExhausted;
//   - or publishes them in one call through the guarded publisher and marks them
//     published, or, for the ones the broker did not take, adds an attempt and makes
//     them visible again after an exponential backoff; past MaxAttempts they are dead.
//
// Delivery is at least once: a dispatcher that dies mid-batch leaves its rows leased
// until the lease ends, and another dispatcher then publishes them again. The
// dispatcher deletes nothing; settled rows are deleted only by a Retention
// (WithRetention, or Purge from a cron job), after they were published or dead for
// its periods.
//
// Run claims as soon as a Waker signals that rows were committed (outbox/postgres's
// Listener, on the NOTIFY Enqueue sends), and again at once after a batch that claimed
// rows; it polls as the safety net. Dead rows are paged and requeued through
// DeadLetters.
//
// Store is the storage contract; MemoryStore keeps rows in memory for tests and demos,
// and outbox/postgres keeps them in PostgreSQL.
package outbox
