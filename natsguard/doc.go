// Package natsguard publishes to NATS JetStream streams through nats.go's jetstream
// package (github.com/nats-io/nats.go/jetstream) under circuits taken from a
// [registry.Registry]: one per stream, and one for the connection every stream
// shares.
//
// It is a module of its own (github.com/brokerguard/brokerguard/natsguard), so that
// only the programs that use NATS depend on nats.go.
//
// A [Publisher] is already guarded: create it with [NewPublisher] from a
// jetstream.JetStream and a registry, and call [Publisher.Publish] (it is a
// transport.Publisher, so an outbox can publish through it) or
// [Publisher.PublishAsync]. registry.Guard hands it back as it is.
//
// # A circuit per stream
//
// A destination is a stream, "nats:<stream>" ([Stream]); a message's Key is the
// subject it is published to, which must be one of the stream's subjects. The
// circuit is the stream's rather than the subject's because
//
//   - subjects are often many and made of data ("orders.eu.4711"); streams are few
//     and named by operators, so circuits, telemetry series and outbox holds stay
//     bounded;
//   - what fails, fails per stream: a stream is one store and, in a cluster, one
//     RAFT group with one leader; when its leader is lost, its storage fails or it
//     is full, every subject of the stream fails together, and the others' streams
//     go on;
//   - a full stream (MaxMsgs or MaxBytes with DiscardNew) refuses every subject, so
//     the outbox holds the stream's rows, without spending their attempts, until it
//     drains; a subject over the stream's per-subject limit (MaxMsgsPerSubject with
//     DiscardNewPerSubject) refuses that subject only, so its message is Rejected
//     and charged, and the stream's other subjects go out.
//
// Every message carries Nats-Expected-Stream with the destination's stream, so a
// subject that another stream holds is refused by the server (10060, Rejected)
// instead of being stored, and judged, under the wrong stream.
//
// # The connection's circuit
//
// Every stream of a Publisher shares one NATS connection, and a connection that is
// down fails every stream at once. The Publisher therefore also takes a permit of a
// connection circuit, "nats-connection:<name>" ([WithConnectionName]; by default the
// connection's nats.Name or its first server's host:port), before the stream's, for
// every call. Its evidence is the connection's alone: a call the server answered,
// whatever the answer, is a Success for it (the stream's circuit judges the answer);
// a call that failed while the server answered another call of the Publisher after
// it began is nothing to it (a hung stream, not a dead connection); any other
// Failure of Classify (disconnected, closed, no ack within the timeout) and a
// caller's deadline that left the call its MinCallBudget are its Failures. Once it
// is open, every stream's publish is refused at once with a *registry.RejectedError
// whose Destination is the connection circuit's, the name `brokerguard circuits
// show nats-connection:<name>` shows, and its probes find the server's return for
// every stream. Give it its own policy with registry.WithOverride under that name.
//
// # Publishing
//
// [Publisher.Publish] sends its messages one after the other, each awaiting its ack
// (PublishMsg), under one permit of the stream's circuit weighed by the number of
// messages. [Publisher.PublishAsync] sends one message under a permit of its own and
// completes it exactly once when the message's answer comes: its ack or the
// server's error, the end of the wait when the connection reconnects
// (nats.ErrDisconnected) or closes (nats.ErrConnectionClosed, which nats.go itself
// never gives a pending ack), or the JetStream context's timeout ([ErrAckTimeout]).
// The Publisher sends asynchronous messages through a JetStream context of its own
// on the same connection, whose ack and error handlers receive each message's
// result, the one nats.go puts in its PubAckFuture; the first of the handler, the
// connection's close and Close to take a message from the Publisher's table finishes
// it. A goroutine per stream waiting on the futures in order cost 15-25 % of the
// asynchronous throughput on two cores; the handlers run on the goroutine that reads
// the acks anyway. The caller's context governs the admission and the send; once
// sent, a message's wait is bounded by the timeout. A bound on the messages awaiting
// their acks ([WithMaxPending], default [DefaultMaxPending]) refuses at once beyond
// it ([ErrTooManyPending]), never waiting for room. [Publisher.Close] waits for the
// pending acks within its context and gives the rest up (Neutral, [ErrClosed]).
//
// Headers become NATS headers (several values of a key are kept in order). A
// message's id (Nats-Msg-Id) is, unless a header sets it, the id the caller put in
// the context with transport.WithMessageIDs: the outbox passes each row's, so a row
// published again (after a timeout whose publish reached the stream, or by another
// dispatcher) within the stream's duplicate window (StreamConfig.Duplicates, two
// minutes by default) is stored once, and its ack says Duplicate. The Publisher
// takes such an ack as any other: the message is in the stream, and the server
// answered. Give each outbox table that feeds the same stream its own
// outbox.WithMessageIDPrefix.
//
// # Classification
//
// [Classify] is the table below; the publisher's tests produce each row with a real
// nats-server (the machine's, or one of the test's own for the faults). It looks
// through wrapping and through a *transport.BatchError (its entries' worst,
// transport.Worst).
//
//	What happened                                        Error                                      Outcome
//	acked, or acked as a duplicate of an earlier id      nil                                        Success
//	no ack within the JetStream timeout, no caller       *PublishError (ErrAckTimeout)              Failure
//	  deadline (a stalled server or connection)
//	acks pending when the connection drops               nats.ErrDisconnected                       Failure
//	connection closed by its owner, also with acks       nats.ErrConnectionClosed                   Failure
//	  pending
//	no stream of the destination's name                  jetstream.ErrNoStreamResponse              Unusable
//	stream full: MaxMsgs or MaxBytes with DiscardNew     *jetstream.APIError 503/10077 "maximum     Unusable
//	                                                       messages exceeded", "maximum bytes ..."
//	a name no stream can have ("orders.eu")              *InvalidStreamError                        Unusable
//	subject full: MaxMsgsPerSubject with                 *jetstream.APIError 503/10077 "maximum     Rejected
//	  DiscardNewPerSubject                                 messages per subject exceeded"
//	over the stream's MaxMsgSize                         *jetstream.APIError 400/10054              Rejected
//	over the server's max payload                        nats.ErrMaxPayload                         Rejected
//	wrong expected last sequence                         *jetstream.APIError 400/10071              Rejected
//	subject of another stream (Nats-Expected-Stream)     *jetstream.APIError 400/10060              Rejected
//	the stream exists, its subjects do not include the   ErrSubjectNotInStream                      Rejected
//	  message's
//	no subject (empty Key)                               *InvalidMessageError                       Rejected
//	the caller cancelled, or its deadline passed         context.Canceled, DeadlineExceeded         Neutral (see below)
//	the Publisher's Close (before, or giving up acks)    ErrClosed                                  Neutral
//	too many messages await their acks                   ErrTooManyPending (breaker.ErrSaturated)   Neutral
//
// Classify also maps errors the tests do not produce, by what they say: the
// connection broken or gone (nats.ErrReconnectBufExceeded, ErrNoServers,
// ErrStaleConnection, network errors, jetstream.ErrAsyncPublishTimeout) and a store
// that failed (10077 with another reason) or any other 5xx answer are Failures;
// JetStream off (10076, 10039), a missing stream (10059), 401 and 403 answers,
// permission and authorization errors are Unusable; a wrong expected last message
// id (10070), a wrong sequence on a replicated stream (10164) and any other 4xx
// answer are Rejected; jetstream.ErrTooManyStalledMsgs (a JetStream context's own
// bound, for code that classifies a raw context's errors), a draining connection and
// anything else are Neutral.
//
// The full stream and the full subject share their code, 10077, which nats-server
// gives whenever its store refuses a message, with the store's reason as the
// description. Only the reason tells them apart, so Classify reads it: the three
// reasons of the limits are the fixed texts of nats-server's store errors
// (ErrMaxMsgs, ErrMaxBytes, ErrMaxMsgsPerSubject), and any other reason is a store
// that failed (a Failure).
//
// No stream answering a subject is jetstream.ErrNoStreamResponse (nats.go retries
// no-responders twice, 250 ms apart, before it says so), whether the stream does not
// exist or exists without the subject. The Publisher asks the server whether the
// stream exists: if it does, the subject is the message's mistake
// ([ErrSubjectNotInStream], Rejected), so one row with a wrong subject cannot hold a
// whole stream's outbox rows.
//
// # Deadlines
//
// nats.go ends a publish that waited too long with a plain context.DeadlineExceeded,
// whether the caller's deadline passed or the JetStream context's own timeout (its
// DefaultTimeout, applied when the caller's context has none). The Publisher tells
// them apart by the caller's context: when it is still live, the timeout was the
// library's, and the error becomes [ErrAckTimeout] (a Failure, matching
// transport.ErrNoAnswer: the server had its full timeout). When the caller's context
// ended, its error is returned as it is, and the registry's deadline rule
// (registry.Outcome) judges the call: a cancellation is Neutral; a deadline is a
// Failure when the call started with the policy's MinCallBudget (default 100 ms) and
// Neutral when it started with less. Classify alone calls a bare context error
// Neutral, as it cannot see the call's start.
//
// A publish that timed out while the connection was reconnecting may still be sent
// once the connection is back (nats.go buffers it): the message may then be stored
// although the call failed. With a message id, the outbox's retry of it is a
// duplicate, stored once.
//
// # Goroutines
//
// NewPublisher starts one goroutine that watches the connection for its close, and
// Close stops it. The asynchronous messages' promises run on nats.go's goroutines:
// the one that reads the acks, its ack timers', its reconnection's; or in Close.
package natsguard
