package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/transport"
)

// A publisher over a real SQS client, with the SDK's retries kept short so
// that the circuit sees failures quickly, and the three kinds of error a
// caller handles.
func Example() {
	var cfg aws.Config // from config.LoadDefaultConfig in a real program
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.RetryMaxAttempts = 2 })

	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		panic(err)
	}
	pub, err := sqs.NewPublisher(client, reg)
	if err != nil {
		panic(err)
	}

	orders := transport.Destination{Broker: sqs.Broker, Name: "orders"}
	err = pub.Publish(context.Background(), orders,
		transport.Message{Value: []byte(`{"id":1}`), Headers: []transport.Header{{Key: "content-type", Value: []byte("application/json")}}},
		transport.Message{Value: []byte(`{"id":2}`)},
	)
	var open *breaker.OpenError
	var batch *transport.BatchError
	switch {
	case errors.As(err, &open):
		fmt.Println("queue is failing; come back at", open.NotBefore)
	case errors.As(err, &batch):
		for _, f := range batch.Failed {
			fmt.Println("message", f.Index, "not sent:", f.Err)
		}
	case err != nil:
		fmt.Println("nothing sent:", err)
	}
}

// Classify on errors the SDK returns.
func ExampleClassify() {
	fmt.Println(sqs.Classify(&types.KmsThrottled{}))
	fmt.Println(sqs.Classify(&types.QueueDoesNotExist{}))
	fmt.Println(sqs.Classify(&sqs.EntryError{Code: "InternalError"}))
	fmt.Println(sqs.Classify(context.Canceled))
	// Output:
	// failure
	// unusable
	// failure
	// neutral
}

// acceptAll stands in for the SQS client: it accepts every message except
// those whose body is "bad".
type acceptAll struct{ requests int }

func (a *acceptAll) SendMessage(context.Context, *awssqs.SendMessageInput, ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	a.requests++
	return &awssqs.SendMessageOutput{}, nil
}

func (a *acceptAll) SendMessageBatch(_ context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	a.requests++
	out := &awssqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		if aws.ToString(e.MessageBody) == "bad" {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidMessageContents"), SenderFault: true})
		} else {
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (a *acceptAll) GetQueueUrl(_ context.Context, in *awssqs.GetQueueUrlInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.example/000000000000/" + aws.ToString(in.QueueName))}, nil
}

// Twelve messages go in two requests; the failed ones are reported by their
// index in the call, and say nothing about the queue's health.
func ExamplePublisher_Publish() {
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	client := &acceptAll{}
	pub, _ := sqs.NewPublisher(client, reg)

	msgs := make([]transport.Message, 12)
	for i := range msgs {
		msgs[i] = transport.Message{Value: []byte("ok")}
	}
	msgs[4].Value, msgs[11].Value = []byte("bad"), []byte("bad")
	orders := transport.Destination{Broker: sqs.Broker, Name: "orders"}
	err := pub.Publish(context.Background(), orders, msgs...)

	var batch *transport.BatchError
	if errors.As(err, &batch) {
		for _, f := range batch.Failed {
			fmt.Println(f.Index, f.Err)
		}
	}
	c, _ := reg.Circuit(orders)
	fmt.Println(client.requests, "requests; circuit", c.Snapshot().State)
	// Output:
	// 4 sqs: batch entry failed: InvalidMessageContents (sender fault)
	// 11 sqs: batch entry failed: InvalidMessageContents (sender fault)
	// 2 requests; circuit closed
}

// A FIFO queue: the group is the message key, the deduplication ID a header.
func ExampleWithDeduplicationID() {
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	pub, _ := sqs.NewPublisher(&acceptAll{}, reg, sqs.WithDeduplicationID(sqs.FromHeader("event-id")))
	err := pub.Publish(context.Background(), transport.Destination{Broker: sqs.Broker, Name: "payments.fifo"},
		transport.Message{Key: []byte("customer-42"), Value: []byte("charged"), Headers: []transport.Header{{Key: "event-id", Value: []byte("evt-1")}}})
	fmt.Println(err)
	err = pub.Publish(context.Background(), transport.Destination{Broker: sqs.Broker, Name: "payments.fifo"},
		transport.Message{Value: []byte("no key")})
	fmt.Println(errors.Is(err, sqs.ErrInvalidMessage), err)
	// Output:
	// <nil>
	// true sqs: message 0: no message group ID for FIFO queue "payments.fifo"
}
