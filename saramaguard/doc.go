// Package saramaguard guards producing through IBM/sarama with one circuit per topic,
// taken from a [registry.Registry] under the destination "kafka:<topic>" — the same
// destination the kafka (kafka-go) and kgoguard (franz-go) packages use.
//
// It is a module of its own (github.com/brokerguard/brokerguard/saramaguard), so that
// only the programs that use sarama depend on it and its dependencies.
//
// [SyncProducer] wraps the sarama.SyncProducer [NewSyncProducer] makes: SendMessage
// and SendMessages take a context first and otherwise keep sarama's meaning;
// SendMessages takes one permit per topic and reports the messages not sent, by
// index, in a [*SendError].
// [SyncProducer.Publish] is the [transport.Publisher] contract, so an outbox can
// publish through it. sarama's SyncProducer takes no context, so a call lasts until
// sarama answers; the context decides admission and how an ended call counts
// ([registry.Outcome]: Neutral when the caller cancelled or left the call less than its
// MinCallBudget, a Failure when a deadline that left that budget passed during it). A
// publish of no messages is refused with registry.ErrNoMessages.
//
// [AsyncProducer] wraps a sarama.AsyncProducer built with Producer.Return.Successes and
// Producer.Return.Errors (the constructors refuse a config without them): Send queues
// a message under its topic's permit, completed when sarama reports the message, and
// the reports are forwarded to the AsyncProducer's own Successes and Errors with the
// message's own Metadata. On Close or AsyncClose sarama reports every queued message
// before closing its channels; a permit still pending then is completed as Neutral,
// so each is completed exactly once. A send after Close returns [ErrClosed] instead of
// sarama's panic.
//
// # Classification
//
// [Classify] judges Kafka error codes (sarama.KError) with the table the kafka package
// uses (internal/kafkacode), and sarama's own errors as below. It looks through
// wrapping, sarama.ProducerErrors, [*SendError] and [*transport.BatchError] (their
// entries' worst: transport.Worst).
//
//	Error                                                       Outcome
//	----------------------------------------------------------  -------
//	nil                                                         Success
//	KError: ErrRequestTimedOut, ErrLeaderNotAvailable,          Failure
//	  ErrNotLeaderForPartition, ErrBrokerNotAvailable,
//	  ErrNotEnoughReplicas, ErrNetworkException, ... (the kafka
//	  package's Failure codes)
//	ErrOutOfBrokers, ErrNotConnected, ErrBrokerNotFound,        Failure
//	  ErrControllerNotAvailable, ErrIncompleteResponse
//	network: *net.OpError, io.EOF, ECONNREFUSED, read/write     Failure
//	  timeouts (Net.ReadTimeout on a hung broker)
//	KError: ErrMessageSizeTooLarge, ErrInvalidMessage, ...      Rejected
//	  (the kafka package's Rejected codes)
//	KError: ErrTopicAuthorizationFailed, ErrUnknownTopicOrPartition, Unusable
//	  ... (the kafka package's Unusable codes)
//	KError: every other code                                    Neutral
//	ConfigurationError (a message over MaxMessageBytes),        Neutral
//	  ErrShuttingDown, ErrClosedClient, ErrClosed, context
//	  errors, *registry.RejectedError, anything else
//
// # Partitions and brokers
//
// A topic's partitions are led by different brokers, and one broker down takes only
// its partitions with it. So besides the topic's circuit, the registry keeps evidence
// per partition ([registry.Partitions], tuned by registry.WithPartitionPolicy): a
// partition whose calls failed PartitionPolicy.Failures times in a row (by default
// the circuit's FailureThreshold) is isolated for PartitionPolicy.Isolation (by
// default the circuit's BreakDuration), then admits one message as its probe; the
// topic's circuit opens only when every partition fails. [NewSyncProducer] makes
// sarama's producer with [Partitioner] installed, which acts on that evidence before a
// message is sent: a keyed message bound for an isolated partition is refused at once
// (a [*registry.PartitionRejectedError], which errors.Is(err, breaker.ErrOpen) sees),
// and any other goes to a partition that is not isolated. [AsyncProducer] is judged
// per topic; its configuration may be given Partitioner for the refusals. Isolated
// partitions show in the admin handler's JSON (isolated_partitions) and in
// registry.IsolatedPartitions.
//
// # Settings
//
// Keep Producer.Retry.Max small (0 to 3) and Net.ReadTimeout / Producer.Timeout at a
// few seconds: the circuit is the retry policy, and a SyncProducer call cannot be
// interrupted before sarama gives up.
package saramaguard
