// Package sqstest is an in-process Amazon SQS endpoint for tests and
// benchmarks, as kfake is for Kafka: test a service's SQS publishing, including
// throttling, hangs and refused connections, without AWS or LocalStack. It is a
// supported package of brokerguard (brokerguard's own SQS tests run on it). It speaks the AWS JSON 1.0 protocol that current versions of
// github.com/aws/aws-sdk-go-v2/service/sqs use (POST, X-Amz-Target:
// AmazonSQS.<Action>, Content-Type: application/x-amz-json-1.0) and keeps
// queues in memory.
//
// Point the SDK at it with BaseEndpoint:
//
//	srv, err := sqstest.New()
//	...
//	defer srv.Close()
//	client := sqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: creds},
//		func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
//
// Queue URLs have the form <URL()>/<account>/<name>; any QueueUrl whose last
// path segment names a queue is accepted.
//
// # Implemented
//
//   - CreateQueue (attributes FifoQueue, ContentBasedDeduplication,
//     VisibilityTimeout, DelaySeconds, MaximumMessageSize; others are stored
//     and echoed), GetQueueUrl, GetQueueAttributes (message counts and the
//     attributes above), SendMessage, SendMessageBatch, ReceiveMessage,
//     DeleteMessage, DeleteMessageBatch.
//   - Standard and FIFO queues. FIFO queues require MessageGroupId, drop a
//     message whose deduplication ID (MessageDeduplicationId, or the SHA-256
//     of the body with ContentBasedDeduplication) was seen in the last five
//     minutes, return SequenceNumber, and hold back a group's later messages
//     while an earlier one is in flight.
//   - ReceiveMessage honours MaxNumberOfMessages, VisibilityTimeout,
//     WaitTimeSeconds (long polls end early when a message arrives; capped at
//     20 s of real time), MessageAttributeNames ("All", ".*", names and
//     "prefix.*") and MessageSystemAttributeNames or AttributeNames ("All" or
//     names).
//   - MD5OfMessageBody and MD5OfMessageAttributes, per entry in batches.
//   - Validation as SQS does it: size limit on body plus attributes
//     (MaximumMessageSize, default 262,144 bytes; SQS has allowed up to
//     1,048,576 since 2025, which the attribute can model), characters SQS refuses in a
//     body, at most 10 attributes, batch limits (empty, more than 10 entries,
//     repeated or malformed entry IDs, total size).
//   - Error responses the SDK decodes into its typed errors; see [Fault].
//   - Test controls: per-queue faults switchable at run time ([Server.SetFault],
//     including [Hang]), per-entry batch failures ([Server.SetBatchEntryFault]),
//     refusing and re-accepting connections on the same port
//     ([Server.RefuseConnections], [Server.AcceptConnections]), request
//     counters ([Server.Requests]) and a broker-side view of stored messages
//     ([Server.Messages]).
//   - An injectable clock ([WithClock]) for deduplication windows, visibility
//     and delays, so tests never sleep.
//
// # Not implemented
//
// Authentication (signatures are not checked), ChangeMessageVisibility,
// PurgeQueue, DeleteQueue, ListQueues, SetQueueAttributes, tags, permissions,
// dead-letter queues and redrive, message retention, KMS, list-valued
// attributes, MessageSystemAttributes on send (AWSTraceHeader),
// ReceiveRequestAttemptId, FIFO high-throughput deduplication scopes and
// queue-level ReceiveMessageWaitTimeSeconds. Standard queues deliver in send
// order and never deliver twice within a visibility timeout.
//
// The server starts no goroutine beyond those of its net/http server;
// [Server.Close] ends all of them before it returns.
package sqstest
