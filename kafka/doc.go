// Package kafka guards publishing through a segmentio/kafka-go Writer with
// one circuit per topic, taken from a [registry.Registry] under the destination
// "kafka:<topic>".
//
// A [Publisher] wraps one Writer. Publish (the [transport.Publisher] contract) writes
// to one topic; WriteMessages takes kafka-go messages for many topics, splits them per
// topic, rejects the topics whose circuit is open without touching the writer, writes
// the others and returns a [*TopicsError] naming the topics that failed.
//
// # Partitions
//
// Under each topic's circuit, Publish keeps evidence per partition
// ([registry.Partitions]): a partition whose calls keep failing (its leader is down or
// hung) is isolated, a keyed message bound for it is refused with a
// [*registry.PartitionRejectedError] (errors.Is(err, breaker.ErrOpen)), unkeyed
// messages go to the other partitions (NewPublisher sets the writer's Balancer to one
// that asks the Balancer set before), and a partition's failures count against the
// topic's circuit only when no other partition answers. [Publisher.PartitionOf] tells the outbox where a key goes.
// See docs/partitions.md.
//
// # Classification
//
// [Classify] maps what kafka-go returns to what it says about the broker's health.
// It looks through wrapping, through kafka-go's WriteErrors entry by entry (that type
// has no Unwrap), through [*transport.BatchError] and [*TopicsError]; a multi-message
// error is its parts' worst (transport.Worst: Failure, then Rejected, then Unusable).
// Rejected and Unusable are Neutral to the circuit; the outbox charges a Rejected
// row an attempt and holds an Unusable topic (docs/classification.md).
//
//	Error                                                        Outcome
//	-----------------------------------------------------------  -------
//	nil                                                          Success
//	network: *net.OpError (dial, read, write, i/o timeout),      Failure
//	  *net.DNSError, io.ErrUnexpectedEOF, io.EOF, ECONNREFUSED,
//	  ECONNRESET, EPIPE, any error whose Timeout() is true
//	context.DeadlineExceeded inside a kafka.WriteErrors entry    Failure
//	  or a *WriteError (the writer's own WriteTimeout)
//	broker codes: RequestTimedOut, LeaderNotAvailable,           Failure
//	  NotLeaderForPartition, BrokerNotAvailable,
//	  ReplicaNotAvailable, NetworkException, NotEnoughReplicas,
//	  NotEnoughReplicasAfterAppend, NotController,
//	  KafkaStorageError, FencedLeaderEpoch, UnknownLeaderEpoch,
//	  PreferredLeaderNotAvailable, EligibleLeadersNotAvailable,
//	  ThrottlingQuotaExceeded, Unknown (-1, a broker-side error)
//	protocol.ErrNoLeader "topic partition has no leader" (the    Failure
//	  metadata names no live leader for the partition)
//	other protocol.Error values, made by protocol.Errorf while   Failure
//	  reading an answer ("correlation id mismatch", checksum
//	  mismatch): the connection's byte stream is broken
//	protocol.ErrNoTopic "topic not found", ErrNoPartition        Unusable
//	  "topic partition not found" (missing from the metadata)
//	protocol.ErrNoRecord, ErrNoReset                             Neutral
//	bare context.Canceled / context.DeadlineExceeded (kafka-go   Neutral
//	  returns the caller's context error as is; see below)
//	message codes: MessageSizeTooLarge, MessageTooLargeError     Rejected
//	  (over the writer's BatchBytes), InvalidMessage,
//	  RecordListTooLarge, InvalidRecord, InvalidTimestamp
//	destination codes: UnknownTopicOrPartition, InvalidTopic,    Unusable
//	  TopicAuthorizationFailed, ClusterAuthorizationFailed,
//	  InvalidRequiredAcks, UnsupportedForMessageFormat,
//	  TransactionalIDAuthorizationFailed, SaslAuthenticationFailed,
//	  UnsupportedCompressionType
//	every other broker code (InvalidMessageSize, PolicyViolation, Neutral
//	  UnsupportedVersion, ...)
//	kafka-go's plain errors.New / fmt.Errorf strings: "mismatching Neutral
//	  leaders" (never for the writer's one-partition requests),
//	  an unregistered compression codec, "no address was given",
//	  "Topic must (not) be specified" (the Publisher refuses
//	  those first), decoding errors without a type
//	io.ErrClosedPipe (writer closed), ErrClosed, errors of this  Neutral
//	  package about destinations, registry.ErrNoMessages,
//	  *registry.RejectedError, anything else
//
// The Publisher's circuits then apply the registry's deadline rule (registry.Outcome)
// to every call, whatever Classify says: a call ended by the caller's cancellation is
// Neutral; a call ended by the caller's deadline is a Failure when it started with at
// least the policy's MinCallBudget beyond the time the writer may hold a synchronous
// write for its batch (BatchTimeout, unless BatchSize is 1; default budget 100ms: the
// broker had a fair chance and did not answer, as when it hangs below the writer's 10s
// WriteTimeout), and Neutral when it started with less. A Publish or WriteMessages of no messages is refused with
// registry.ErrNoMessages before any permit is taken.
//
// # Writer settings
//
// kafka-go's defaults are made for throughput, not for failing fast. [NewWriter]
// returns a writer with the settings recommended for a guarded request path:
//
//   - RequiredAcks: RequireOne or RequireAll. With the default RequireNone the broker
//     sends no answer, so its errors never reach the circuit: NewPublisher refuses
//     such a writer unless [WithFireAndForget] says so. (Async is no such setting: the
//     Publisher completes the permits of an asynchronous writer from its Completion,
//     which reports the broker's errors.)
//   - BatchTimeout: a few milliseconds (default 1s). A synchronous write of fewer than
//     BatchSize messages waits for the batch timeout before anything is sent; or set
//     BatchSize to the number of messages you write per call (1 for single writes).
//     This matters for the circuit, not only for latency: a caller's deadline that
//     passes while the writer may still wait for its batch is no verdict on the broker,
//     so the deadline rule below asks for the budget beyond BatchTimeout. With the 1s
//     default, callers' deadlines under 1.1s never count, and a hung broker opens the
//     circuit only through the writer's own WriteTimeout.
//   - MaxAttempts: 1 to 3 (default 10, with backoff 100ms..1s between attempts). The
//     circuit is the retry policy; each kafka-go retry against a dead broker costs a
//     dial or write timeout plus backoff.
//   - WriteTimeout and ReadTimeout: 2-5s (default 10s); a timeout is a Failure.
//   - Transport: a *kafkago.Transport of your own with DialTimeout 1-2s (default 5s),
//     so that its connections can be closed with CloseIdleConnections when you are
//     done; the Writer does not close a Transport it did not create.
//
// # Topics
//
// A Writer either has a fixed Topic, and then every message goes there and must not
// name a topic (Publish accepts only that topic as destination), or has none, and then
// every message names its topic (Publish sets it from the destination).
//
// # Asynchronous writers
//
// With Writer.Async, WriteMessages returns once the messages are queued. The Publisher
// then installs its own Writer.Completion (calling the one that was set before) and
// completes each call's permit once every message of the call has been reported:
// Failure when any message failed for a reason Classify counts as Failure, otherwise
// Success when at least one was written. It uses Message.WriterData to find the call
// and gives the caller's WriterData back before the previous Completion sees it.
// Permits of messages still queued when Close gives up are completed as Neutral, and
// so is the permit of a write during which the writer panicked (the panic goes on).
//
// # Closing
//
// kafka-go's Writer.Close waits for every queued batch, and a batch retries up to
// MaxAttempts times, so with the broker down it can take minutes. [Publisher.Close]
// waits at most until its context ends or the close timeout passes
// ([DefaultCloseTimeout], see [WithCloseTimeout]); the writer's own Close then goes on
// in a goroutine that ends when kafka-go gives up, which [Publisher.Flushed] reports.
package kafka
