package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

// An SQS queue has one identity whether publishes name it or give its URL: the calls
// are counted under the queue's name, with its circuit, and no series is filed under
// the URL. The SQS server is the in-process test server, driven by the real SDK.
func TestSQSQueueByURLOrName(t *testing.T) {
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	client := awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(srv.URL()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
	})
	ctx := context.Background()
	if _, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("invoices")}); err != nil {
		t.Fatal(err)
	}
	s := newPromService(t, promConfig{policy: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}})
	pub, err := sqs.NewPublisher(client, s.reg)
	if err != nil {
		t.Fatal(err)
	}
	byName := transport.Destination{Broker: "sqs", Name: "invoices"}
	byURL := transport.Destination{Broker: "sqs", Name: srv.QueueURL("invoices")}
	msg := transport.Message{Value: []byte("invoice")}
	for _, d := range []transport.Destination{byName, byURL, byURL} {
		if err := pub.Publish(ctx, d, msg); err != nil {
			t.Fatalf("publish to %s: %v", d, err)
		}
	}
	srv.SetFault("invoices", sqstest.ServiceUnavailable)
	for _, d := range []transport.Destination{byURL, byName, byURL} { // two failures open the circuit; the third is rejected
		if err := pub.Publish(ctx, d, msg); err == nil {
			t.Fatalf("publish to %s succeeded during the fault", d)
		}
	}
	body := s.scrapeBody(t)
	lbl := `messaging_destination_name="invoices",messaging_system="aws_sqs"`
	for _, want := range []string{
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="published",` + lbl + `} 3`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="failed",` + lbl + `} 2`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="rejected",` + lbl + `} 1`,
		`brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="open",` + lbl + `} 1`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "http://") {
		t.Errorf("a series is filed under the queue URL")
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", body)
	}
}
