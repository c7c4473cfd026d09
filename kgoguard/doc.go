// Package kgoguard guards producing through a franz-go client (github.com/twmb/franz-go/pkg/kgo)
// with one circuit per topic, taken from a [registry.Registry] under the destination
// "kafka:<topic>" — the same destination the kafka package (kafka-go) uses, so a topic
// has one circuit whichever client writes to it.
//
// It is a module of its own (github.com/brokerguard/brokerguard/kgoguard), so that
// only the programs that use franz-go depend on it.
//
// A [Producer] wraps a *kgo.Client. [Producer.Produce] and [Producer.ProduceSync] have
// franz-go's signatures; [Producer.Publish] is the [transport.Publisher] contract, so
// an outbox can publish through it. A topic whose circuit is open is refused without
// touching the client. Every admitted call's permit is completed exactly once: franz-go
// calls a record's promise exactly once whatever happens to it (answered, failed, its
// context ended, its delivery timeout or retries ran out, the client closed or
// aborted), and the permit is completed there, so Flush and Close leave no permit
// behind.
//
// # Classification
//
// [Classify] judges Kafka error codes with the table the kafka package uses
// (internal/kafkacode), and franz-go's own errors as below. It looks through wrapping
// and through [*transport.BatchError] (its entries' worst: transport.Worst).
//
//	Error                                                       Outcome
//	----------------------------------------------------------  -------
//	nil                                                         Success
//	*kerr.Error: RequestTimedOut, LeaderNotAvailable,           Failure
//	  NotLeaderForPartition, BrokerNotAvailable, NotEnoughReplicas,
//	  NetworkException, KafkaStorageError, ThrottlingQuotaExceeded,
//	  UnknownServerError, ... (the kafka package's Failure codes)
//	kgo.ErrRecordRetries, kgo.ErrRecordTimeout (the client's    Failure
//	  retry limit or delivery timeout ran out)
//	network: *net.OpError, *net.DNSError, io.EOF,               Failure
//	  io.ErrUnexpectedEOF, ECONNREFUSED, ECONNRESET, timeouts
//	*kerr.Error: MessageTooLarge, CorruptMessage, InvalidRecord, Rejected
//	  RecordListTooLarge, InvalidTimestamp
//	*kerr.Error: UnknownTopicOrPartition, TopicAuthorization-    Unusable
//	  Failed, ClusterAuthorizationFailed, InvalidTopicException, ...
//	  (the kafka package's Unusable codes)
//	*kerr.Error: every other code                               Neutral
//	kgo.ErrClientClosed, kgo.ErrAborting, kgo.ErrMaxBuffered,   Neutral
//	  context.Canceled, context.DeadlineExceeded,
//	  *registry.RejectedError, anything else
//
// Independently of Classify, a call whose context has ended completes as the registry
// says ([registry.Outcome]): Neutral when the caller cancelled or gave the call less
// than its policy's MinCallBudget, a Failure when a deadline that left that budget
// ended it (a hung broker). A record's promise is judged against the context given to
// Produce and the time the call started. A publish of no messages is refused with
// registry.ErrNoMessages.
//
// # Partitions and brokers
//
// A topic's partitions are led by different brokers, and one broker down takes only
// its partitions with it. So besides the topic's circuit, the registry keeps evidence
// per partition ([registry.Partitions], tuned by registry.WithPartitionPolicy): a
// partition whose calls failed PartitionPolicy.Failures times in a row (by default
// the circuit's FailureThreshold) is isolated for PartitionPolicy.Isolation (by
// default the circuit's BreakDuration), then admits one record as its probe. The
// client's partitioner, [Partitioner], acts on it before a record is buffered: a
// keyed record bound for an isolated partition is refused at once (a
// [*registry.PartitionRejectedError], which errors.Is(err, breaker.ErrOpen) sees),
// and an unkeyed record goes to another partition. The topic's circuit opens only
// when every partition fails: while some partition answers, one broker's failures
// are the partitions', not the topic's. [New] refuses a client built without
// Partitioner (franz-go fixes a client's partitioner when the client is made):
//
//	reg, _ := registry.New(policy)
//	cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil)))
//	p, _ := kgoguard.New(cl, reg)
//
// Isolated partitions show in the admin handler's JSON (isolated_partitions), in
// "brokerguard circuits show" and in registry.IsolatedPartitions.
//
// # Client settings
//
// franz-go's defaults retry without limit, which hides a failing broker from the
// circuit until the caller gives up. Recommended for a guarded client:
//
//   - RecordRetries: a small number (0 to 3). A record then fails with the broker's
//     code once its retries are spent, or with ErrRecordRetries when franz-go could
//     not tell whether its last request was written (a request timeout).
//   - RecordDeliveryTimeout: a few seconds; ProduceRequestTimeout likewise.
//   - With idempotent writes (franz-go's default) a record whose request is
//     outstanding, or whose answer was RequestTimedOut, is retried past RecordRetries
//     and cannot be failed by its context: only the delivery timeout ends it. Set
//     DisableIdempotentWrite when the caller's deadline must end a call, or keep
//     RecordDeliveryTimeout short.
//   - As franz-go documents, only the first record's context in a batch decides
//     whether the batch is cancelled: a record's context must live until its promise.
package kgoguard
