// Package outbox dispatches a transactional outbox to brokers without letting one
// failing destination hold up the others, or wear out its own rows.
//
// An application writes messages into an outbox table inside its own database
// transaction (outbox/postgres), so a message exists exactly when the business change
// that produced it committed. A Processor then claims due rows in batches, under a
// lease so that several dispatchers can share a table, and publishes each
// destination's rows in one call through the guarded publisher.
//
// # What a user needs
//
// Enqueue an [Entry] in your transaction with the store's Enqueue (outbox/postgres),
// build one [Processor] at start-up with [NewProcessor] (the store, the registry, the
// adapter's publisher) and call [Processor.Run]. The options that matter first:
// [WithClassifier] (the adapter's Classify, so that message errors spend attempts and
// outages do not), [WithMaxAttempts], [WithMaxCircuitDeferral], [WithRetention],
// [WithWaker] and [WithHooks] (telemetry). The store of outbox/memory is the store for
// tests and demos. On call: dead rows are paged and requeued with [DeadFilter] and [Page]
// through the store ([DeadLetters]), [Purge] deletes old rows from a cron job, and
// [OnCall] reports holds and dead counts.
//
// # For store authors
//
// A store implements [Store] (claims with [ClaimRequest], write-backs with [Report],
// [Failure], [Deferral] and [Hold], each fenced by its claim's token, and [Record],
// [Status] for rows), and optionally [DeadLetters], [OnCall], [Purger] and [Waker];
// package outbox/storekit (ParseStatus, CheckRequeue, CheckDeadPage,
// CheckDeleteLimit, DeadReason) keeps its validation and reasons the same as the
// others'. The memory and PostgreSQL stores
// pass the same tests (integration/outbox).
//
// # Holding a destination, not its rows
//
// When a destination is unavailable (its circuit is open, the guarded publisher
// rejects the call, or a publish fails in a way the classifier calls a Failure), the
// Processor holds the destination: one write in the store (Hold) until the circuit's
// deadline, plus jitter. The rows it had claimed are given back as they are (their
// deferral count goes up, nothing else); while the hold lasts no claim, of any
// dispatcher sharing the store, takes the destination's rows, so they are neither
// read nor rewritten (a claim another dispatcher already had in flight when the hold
// was written may still take and try one batch of them, and holds the destination
// in turn if that publish fails). When the hold ends the next claim takes one row (WithProbeBatch)
// as the probe and extends the hold by its lease: if the probe goes out, the hold is
// dropped and the rest follow; if not, the destination is held again. An hour-long
// outage with 30-second breaks costs about two row updates and two hold writes per
// break, however many rows wait.
//
// # Attempts measure the message, time measures the destination
//
// A failure is an outage, the destination's, or the message's own, as the classifier
// says: WithClassifier's, else the publisher's (transport.Classifying: every
// adapter's publisher and registry.Guard's have one); NewProcessor refuses to run
// without one (ErrNoClassifier):
//
//   - An outage (breaker.Failure, or the circuit's refusal) spends the destination's
//     time, never a row's attempts: a destination held for longer than
//     MaxCircuitDeferral has its rows enqueued more than MaxCircuitDeferral ago made
//     dead with ReasonDeferralExhausted, when the hold is renewed (at the end of a
//     break).
//   - A destination that is unusable (breaker.Unusable: missing, forbidden,
//     misconfigured; its broker is healthy and its circuit stays closed) is held as
//     an outage is, for the unusable backoff (WithUnusableBackoff: 5 s doubling to 5
//     minutes), then probed with one row; the hold records why (HoldInfo.Unusable)
//     and UnusableHooks are told. Its rows spend no attempts, and go out in order
//     once a probe goes through.
//   - The message's own failure (breaker.Rejected, breaker.Neutral) costs the row an attempt and a capped, jittered
//     backoff; the MaxAttempts-th makes it dead with ReasonAttemptsExhausted. When a
//     publish of several rows fails as a whole for a message's reason, the rows are
//     sent again one at a time, so that the bad one ends alone.
//
// A row the store cannot decode is dead at once with ReasonUndecodable, and a row
// whose destination is not valid with ReasonInvalidDestination; the rest of the batch
// goes on. LastError of a dead row starts with its reason.
//
// # Fencing
//
// Every claim has a token of its own, and every write-back names it: a store changes
// only rows that claim still leases. A call whose lease ended, of this Processor or
// another, changes nothing; ProcessPending may be called from several goroutines.
//
// # Order per key
//
// Rows of one destination and key are published in enqueue order: a claim takes the
// oldest rows first, and skips a row while an earlier pending row of its destination
// and key waits (for its backoff) or is leased; a probe is the oldest claimable row;
// a row refused by the broker keeps the later rows of its key in the batch back. This
// holds for a single dispatcher, and for several sharing a table as long as leases
// do not run out mid-publish, with two exceptions: two claims running at the same
// instant may each take rows of one key (PostgreSQL skips rows another claim is
// locking), and a broker that refuses a message yet accepts a later one of its key
// in the same call has published that one first (Kafka fails a partition's batch as
// a whole, so kafka-go's writer does not do this). Rows without a key have no order.
//
// # Delivery
//
// Delivery is at least once. A row is published again when the dispatcher that
// published it dies, is cancelled or loses its database before recording it, or
// when its publish outlasts the lease and another dispatcher takes the row over.
// WithIDHeader lets consumers drop those duplicates. The dispatcher deletes nothing;
// settled rows are deleted only by a Retention (WithRetention, or Purge from a cron
// job), once they have been published or dead for its periods.
//
// # Latency and dead rows
//
// Run claims as soon as a Waker signals that rows were committed (outbox/postgres's
// Listener, on the NOTIFY Enqueue sends; a Store on a pgxpool.Pool gives one by
// itself, see CommitWaker), and again at once after a batch that claimed rows; it
// polls as the safety net. Dead rows are paged and requeued through DeadLetters. A row requeued while its destination is still held counts its outage
// time from its enqueue and from the hold's start, as before: requeueing rows that died
// of circuit_deferral_exhausted helps once the destination is back, not during the
// outage that killed them.
//
// # The store's own failures
//
// Every store call of the Processor has a deadline (WithStoreTimeout), and Run does
// not end on errors: it reports each one (WithErrorHandler, log/slog by default;
// StoreErrorHooks for a metric), backs off (WithErrorBackoff) and claims again, until
// its context ends.
//
// Store is the storage contract; outbox/memory keeps rows in memory for tests and demos,
// and outbox/postgres keeps them in PostgreSQL.
package outbox
