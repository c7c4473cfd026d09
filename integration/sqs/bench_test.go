package sqs_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkSendMessageBatch compares a batch of ten messages sent by the SDK
// directly (raw, with a prepared request) with the same messages through the
// guarded publisher, which builds the request and takes a permit for it.
// Each runs against its own server (or queue, with SQS_ENDPOINT).
func BenchmarkSendMessageBatch(b *testing.B) {
	body := strings.Repeat("x", 256)
	ms := make([]transport.Message, 10)
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for i := range ms {
		ms[i] = transport.Message{Value: []byte(body), Headers: []transport.Header{
			{Key: "content-type", Value: []byte("text/plain")},
			{Key: "seq", Value: []byte(strconv.Itoa(i))},
		}}
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"content-type": {DataType: aws.String("String"), StringValue: aws.String("text/plain")},
				"seq":          {DataType: aws.String("String"), StringValue: aws.String(strconv.Itoa(i))},
			}}
	}
	ctx := context.Background()

	b.Run("raw", func(b *testing.B) {
		e := newEnv(b)
		c := client(b, e.endpoint, nil)
		q := e.queue(b, c, "bench-raw", nil)
		in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL(b, c, q)), Entries: entries}
		b.ReportAllocs()
		for b.Loop() {
			out, err := c.SendMessageBatch(ctx, in)
			if err != nil || len(out.Failed) != 0 {
				b.Fatal(err, out.Failed)
			}
		}
	})
	b.Run("guarded", func(b *testing.B) {
		e := newEnv(b)
		c := client(b, e.endpoint, nil)
		q := e.queue(b, c, "bench-guarded", nil)
		g := newGuard(b, c, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute})
		d := dest(q)
		b.ReportAllocs()
		for b.Loop() {
			if err := g.pub.Publish(ctx, d, ms...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
