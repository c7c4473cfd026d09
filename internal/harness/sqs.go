package harness

import (
	"context"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

const sqsHint = "start the server at SQS_ENDPOINT, or unset it to use the in-process SQS test server"

// SQS returns SQS_ENDPOINT once its host accepts TCP connections, or "", nil when the
// variable is unset: the caller then starts the in-process SQS test server.
func SQS() (endpoint string, err error) {
	return endpointFromEnv(serviceSQS, "SQS_ENDPOINT", sqsHint)
}

// SQSEndpoint returns SQS_ENDPOINT for a test, after Require on SQS's error, or "" when
// the variable is unset and the test should use the in-process server.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	endpoint, err := SQS()
	Require(t, serviceSQS, err)
	return endpoint
}

// ProxiedSQS starts an SQS test server of the test's own with queue created on it,
// and returns an AWS SDK client with its defaults that reaches the server through a
// Proxy (to make it slow or hung), and that proxy. Both end with the test.
func ProxiedSQS(t testing.TB, queue string) (*awssqs.Client, *Proxy) {
	t.Helper()
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The queue is created directly, so that a proxy already shaped cannot delay it.
	if _, err := sqsClient(srv.URL()).CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(queue)}); err != nil {
		t.Fatal(err)
	}
	proxy := NewProxy(t, u.Host)
	return sqsClient("http://" + proxy.Addr()), proxy
}

// sqsClient is the AWS SDK's SQS client with its defaults for the server at
// endpoint, with test credentials.
func sqsClient(endpoint string) *awssqs.Client {
	return awssqs.New(awssqs.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
}
