// Package integration holds the tests that run brokerguard against real servers and
// the harness that finds or starts them (internal/harness). The SQS test server
// they use is a supported package of its own, sqs/sqstest. Nothing outside this
// folder imports it.
package integration
