// Package integration holds the tests that run brokerguard against real servers, the
// harness that finds or starts them (integration/harness), and the SQS test server
// (integration/sqsserver). Nothing outside this folder imports it.
package integration
