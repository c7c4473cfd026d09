package harness

import "testing"

const sqsHint = "start the server at SQS_ENDPOINT, or unset it to use the in-process SQS test server"

// SQS returns SQS_ENDPOINT once its host accepts TCP connections, or "", nil when the
// variable is unset: the caller then starts the in-process SQS test server.
func SQS() (endpoint string, err error) {
	return endpointFromEnv(ServiceSQS, "SQS_ENDPOINT", sqsHint)
}

// SQSEndpoint returns SQS_ENDPOINT for a test, after Require on SQS's error, or "" when
// the variable is unset and the test should use the in-process server.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	endpoint, err := SQS()
	Require(t, ServiceSQS, err)
	return endpoint
}
