package sqstest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

// Example sends a message with the real SDK, then makes the queue fail.
func Example() {
	srv, err := sqstest.New()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := sqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
	}, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(srv.URL())
		o.RetryMaxAttempts = 1
	})
	ctx := context.Background()

	q, _ := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders")})
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("order 1")})
	fmt.Println(err, len(srv.Messages("orders")))

	srv.SetFault("orders", sqstest.KmsThrottled)
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("order 2")})
	var throttled *types.KmsThrottled
	fmt.Println(errors.As(err, &throttled), throttled.ErrorCode(), srv.Requests("orders", "SendMessage"))
	// Output:
	// <nil> 1
	// true KMS.ThrottlingException 2
}

func BenchmarkSendMessage(b *testing.B) {
	srv, err := sqstest.New()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := sqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
		HTTPClient:  &http.Client{Transport: transport},
	}, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
	ctx := context.Background()
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bench")})
	if err != nil {
		b.Fatal(err)
	}
	in := &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("payload"),
		MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.SendMessage(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
