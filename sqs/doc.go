// Package sqs publishes to Amazon SQS queues through
// github.com/aws/aws-sdk-go-v2/service/sqs, with one circuit per queue.
//
// A [Publisher] is already guarded: create it with [NewPublisher] from an SDK
// client (or anything with the three methods of [API]) and a registry, and
// call Publish. Do not wrap it in registry.Guard as well.
//
// # Destinations
//
// Destination.Broker must be "sqs". Destination.Name is a queue name
// ("orders", "orders.fifo") or a queue URL
// ("https://sqs.us-east-1.amazonaws.com/123456789012/orders"). Either way the
// circuit is keyed by the queue name, sqs:<queue-name>, so a queue's URL and
// its name share one circuit, and errors name that destination. A name is
// resolved to its URL with GetQueueUrl on first use and the URL is cached
// (until the queue is reported missing); a URL is used as given. Queues of the
// same name in other accounts or regions would share the circuit, so give
// each account and region its own registry (and Publisher).
//
// # Sending
//
// One message goes by SendMessage. Several go by SendMessageBatch in chunks of
// at most 10 entries whose payload — body plus every attribute's name, data
// type and value, as SQS counts it — stays within 262,144 bytes
// ([WithMaxBatchBytes] raises it for queues that allow 1 MiB). A chunk that
// would hold a single message is sent by SendMessage.
//
// Every request is its own guarded call: it takes one permit from the queue's
// circuit, and the permit is completed with what that request's result says.
// A Publish of 25 messages is three permits, and when the circuit opens
// between them the rest of the messages are not sent. The GetQueueUrl lookup
// of a queue's first request runs under that request's permit.
//
// Message.Value is the body, sent as is: SQS accepts only valid Unicode text
// without most control characters and answers InvalidMessageContents
// otherwise. Each header becomes a message attribute with the header's key as
// its name: a value that is SQS-valid text becomes a String attribute, any
// other value a Binary one. SQS keeps at most 10 attributes, no duplicates and
// no empty values; the publisher refuses a message with a repeated, unnamed or
// empty header before sending anything (an [*InvalidMessageError]). [Headers]
// turns received attributes back into headers, sorted by key, as the order is
// not kept.
//
// Queues whose name ends in ".fifo" are FIFO queues: MessageGroupId is
// Message.Key unless [WithGroupID] says otherwise, and a message without one
// is refused before sending. MessageDeduplicationId comes from
// [WithDeduplicationID] (for example FromHeader("dedup-id")) or, when that
// gives none, from the message's id (transport.WithMessageIDs): the outbox
// passes each row's, so a row published twice within SQS's five-minute window
// is stored once while distinct rows with equal bodies are all stored. A
// message with neither needs ContentBasedDeduplication on the queue, which
// drops every message whose body equals one sent in the last five minutes: do
// not rely on it for rows that may repeat a body. Standard queues get neither.
//
// # Errors
//
// Publish returns nil when every message was accepted. An invalid
// destination (transport.ErrInvalidDestination) or message
// ([ErrInvalidMessage]) is refused before anything is sent or any permit
// taken. When a publish made one request, or was refused before any, it
// returns that error: a *registry.RejectedError when the circuit refused, the
// caller's context error, or the SDK's error. Otherwise, when any message failed, it returns a
// *transport.BatchError listing each failed message by its index in msgs:
// entry failures as an [*EntryError], and the messages of a request that
// failed as a whole, or that the circuit refused, with that error.
//
// # Classification
//
// [Classify] maps an error to what it says about the queue's health. The
// publisher completes each permit with registry.Outcome, which applies the
// registry's deadline rule before Classify: when the caller cancelled, the
// outcome is Neutral whatever the error; when the caller's deadline ended the
// call, it is a Failure if the call started with at least the policy's
// MinCallBudget (default 100ms: the queue had a fair chance and did not
// answer, which with the SDK's default HTTP client, which has no timeout of
// its own, is the only way a hung queue shows) and Neutral if it started with
// less. A batch is its failed entries' worst (transport.Worst). A Publish of no
// messages is refused with registry.ErrNoMessages before any permit is taken.
// Rejected and Unusable are Neutral to the circuit; the outbox charges a Rejected
// row an attempt and holds an Unusable queue (docs/classification.md).
//
//	Error                                                       Outcome
//	*EntryError with SenderFault and a destination code         Unusable
//	  (AccessDenied, NonExistentQueue, KMS.*: see below)
//	*EntryError with SenderFault, any other non-throttling code Rejected
//	*EntryError without SenderFault, or with a throttling code  Failure
//	ErrMissingResult (a batch response that omits an entry)     Failure
//	context.Canceled                                            Neutral
//	*types.RequestThrottled, *types.KmsThrottled                Failure
//	*types.QueueDoesNotExist                                    Unusable
//	*types.InvalidMessageContents                               Rejected
//	*types.KmsAccessDenied, KmsDisabled, KmsNotFound,
//	  KmsInvalidState, KmsInvalidKeyUsage, KmsOptInRequired     Unusable
//	API error code AccessDenied, AccessDeniedException,
//	  InvalidSecurity, InvalidClientTokenId, SignatureDoesNotMatch,
//	  ExpiredToken, QueueDeletedRecently, UnsupportedOperation,
//	  or HTTP status 403                                        Unusable
//	API error code ThrottlingException (and Throttling,
//	  RequestThrottled, RequestLimitExceeded)                   Failure
//	API error code InternalError, InternalFailure,
//	  ServiceUnavailable, or any HTTP status of 500 or more     Failure
//	any other API error: InvalidParameterValue (also "message
//	  too long"), batch-request errors, ...                     Rejected
//	retry quota exhausted (ratelimit.QuotaExceededError)        Failure
//	attempts exhausted (*retry.MaxAttemptsError)                Failure
//	context.DeadlineExceeded or a net.Error timeout             Failure
//	connection refused or reset, EOF, broken pipe, any
//	  *net.OpError or *smithyhttp.RequestSendError              Failure
//	*InvalidMessageError (refused before sending)              Rejected
//	invalid destination                                         Neutral
//	anything else                                               Neutral
//
// A deadline Classify sees counts as a Failure because the publisher only asks
// Classify when the caller's context is still live: the timeout was one the
// client set (an http.Client Timeout, for example), and the queue did not
// answer in time.
// Codes are those the SDK reports: SQS is query-compatible, so ErrorCode()
// is the legacy code ("AWS.SimpleQueueService.NonExistentQueue",
// "KMS.ThrottlingException"); types are matched with errors.As first, and no
// error is ever matched by its text.
//
// # Retries
//
// The SDK retries throttling, 5xx answers and connection errors by itself
// (three attempts, with exponential backoff of up to 20 s, drawing on a retry
// quota). All of that happens inside one permit, so the circuit sees only the
// final result, and a call against a failing queue holds its permit for the
// whole backoff. With a circuit in front, keep the SDK's retries short: set
// sqs.Options.RetryMaxAttempts to 1 or 2 (or a retry.Standard with a small
// MaxBackoff), give calls a deadline or the HTTP client a Timeout, and let the
// circuit and the caller's own retry (the outbox's backoff) do the rest. When
// the retry quota or the attempts run out the error is a Failure.
package sqs
