package sqstest_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

// apiCode returns the SDK's error code for err, failing the test when err
// is not an API error.
func apiCode(t *testing.T, err error) string {
	t.Helper()
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v is not a smithy.APIError", err)
	}
	return apiErr.ErrorCode()
}

// is reports whether err holds an error of type *E.
func is[E any, P interface {
	*E
	error
}](err error) bool {
	var target P
	return errors.As(err, &target)
}

func TestErrorsDecodeIntoSDKTypes(t *testing.T) {
	srv, c, url := setup(t, "faulty", nil)
	for _, tc := range []struct {
		fault  sqstest.Fault
		code   string
		status int
		side   smithy.ErrorFault
		typed  func(error) bool // nil: a generic API error
	}{
		{sqstest.QueueDoesNotExist, "AWS.SimpleQueueService.NonExistentQueue", 400, smithy.FaultClient, is[types.QueueDoesNotExist]},
		{sqstest.InvalidMessageContents, "InvalidMessageContents", 400, smithy.FaultClient, is[types.InvalidMessageContents]},
		{sqstest.RequestThrottled, "RequestThrottled", 403, smithy.FaultClient, is[types.RequestThrottled]},
		{sqstest.KmsThrottled, "KMS.ThrottlingException", 400, smithy.FaultClient, is[types.KmsThrottled]},
		{sqstest.KmsAccessDenied, "KMS.AccessDeniedException", 400, smithy.FaultClient, is[types.KmsAccessDenied]},
		{sqstest.KmsDisabled, "KMS.DisabledException", 400, smithy.FaultClient, is[types.KmsDisabled]},
		{sqstest.InvalidParameterValue, "InvalidParameterValue", 400, smithy.FaultClient, nil},
		{sqstest.AccessDenied, "AccessDenied", 403, smithy.FaultClient, nil},
		{sqstest.ThrottlingException, "ThrottlingException", 400, smithy.FaultClient, nil},
		{sqstest.InternalError, "InternalError", 500, smithy.FaultServer, nil},
		{sqstest.ServiceUnavailable, "ServiceUnavailable", 503, smithy.FaultServer, nil},
	} {
		t.Run(tc.code, func(t *testing.T) {
			srv.SetFault("faulty", tc.fault)
			defer srv.ClearFault("faulty")
			before := srv.Requests("faulty", "SendMessage")
			_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")})
			checkAPIError(t, err, tc.code, tc.status, tc.side)
			if tc.typed != nil && !tc.typed(err) {
				t.Errorf("error %T %v is not the SDK's typed error", err, err)
			}
			var generic *smithy.GenericAPIError
			if tc.typed == nil && !errors.As(err, &generic) {
				t.Errorf("error %v is not a generic API error", err)
			}
			if n := srv.Requests("faulty", "SendMessage") - before; n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func checkAPIError(t *testing.T, err error, code string, status int, fault smithy.ErrorFault) {
	t.Helper()
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v is not a smithy.APIError", err)
	}
	if apiErr.ErrorCode() != code || apiErr.ErrorFault() != fault {
		t.Errorf("code %q fault %v, want %q %v", apiErr.ErrorCode(), apiErr.ErrorFault(), code, fault)
	}
	var resp *awshttp.ResponseError
	if !errors.As(err, &resp) || resp.HTTPStatusCode() != status {
		t.Errorf("HTTP status of %v, want %d", err, status)
	}
}

func TestInvalidRequestsAnswerAsSQS(t *testing.T) {
	srv, c, url := setup(t, "strict", nil)
	ctx := context.Background()

	missing := srv.QueueURL("missing")
	_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &missing, MessageBody: aws.String("x")})
	if !is[types.QueueDoesNotExist](err) {
		t.Errorf("send to a missing queue: %v", err)
	}
	_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	if !is[types.QueueDoesNotExist](err) {
		t.Errorf("GetQueueUrl of a missing queue: %v", err)
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("bad \x00 byte")})
	if !is[types.InvalidMessageContents](err) {
		t.Errorf("body with NUL: %v", err)
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", 262144-3)),
		MessageAttributes: map[string]types.MessageAttributeValue{"k": str("String", "v")}})
	checkAPIError(t, err, "InvalidParameterValue", 400, smithy.FaultClient)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", 262144-8)),
		MessageAttributes: map[string]types.MessageAttributeValue{"k": str("String", "v")}}); err != nil {
		t.Errorf("message of exactly 262,144 bytes: %v", err)
	}

	entry := func(id string, size int) types.SendMessageBatchRequestEntry {
		return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(strings.Repeat("y", size))}
	}
	many := make([]types.SendMessageBatchRequestEntry, 11)
	for i := range many {
		many[i] = entry("e"+string(rune('a'+i)), 1)
	}
	for _, tc := range []struct {
		entries []types.SendMessageBatchRequestEntry
		typed   func(error) bool
	}{
		{[]types.SendMessageBatchRequestEntry{}, is[types.EmptyBatchRequest]},
		{many, is[types.TooManyEntriesInBatchRequest]},
		{[]types.SendMessageBatchRequestEntry{entry("a", 1), entry("a", 1)}, is[types.BatchEntryIdsNotDistinct]},
		{[]types.SendMessageBatchRequestEntry{entry("bad id!", 1)}, is[types.InvalidBatchEntryId]},
		{[]types.SendMessageBatchRequestEntry{entry("a", 200000), entry("b", 200000)}, is[types.BatchRequestTooLong]},
	} {
		_, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: tc.entries})
		if !tc.typed(err) {
			t.Errorf("batch of %d entries: %T %v", len(tc.entries), err, err)
		}
	}
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: aws.String("nonsense")})
	if !is[types.ReceiptHandleIsInvalid](err) {
		t.Errorf("delete with a bad handle: %v", err)
	}
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("strict"), Attributes: map[string]string{"VisibilityTimeout": "5"}})
	if !is[types.QueueNameExists](err) {
		t.Errorf("re-create with other attributes: %v", err)
	}
	if got := createQueue(t, c, "strict", nil); got != url {
		t.Errorf("re-create with the same attributes returned %q, want %q", got, url)
	}
}

func TestHangIsReleasedByContextCancel(t *testing.T) {
	srv, c, url := setup(t, "stuck", nil)
	srv.SetFault("stuck", sqstest.Hang)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")})
		errc <- err
	}()
	eventually(t, "held request", func() bool { return srv.Requests("stuck", "SendMessage") == 1 })
	select {
	case err := <-errc:
		t.Fatalf("held request returned before cancel: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}

	srv.ClearFault("stuck")
	if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")}); err != nil {
		t.Fatalf("after clearing the fault: %v", err)
	}
}

func TestRefusedConnectionsRecoverOnTheSamePort(t *testing.T) {
	srv, c, url := setup(t, "flaky", nil)
	ctx := context.Background()
	send := func() error {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")})
		return err
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	endpoint := srv.URL()

	srv.RefuseConnections()
	// The client's pooled connection was closed under it: the first send may
	// fail while writing on it, before the client dials again.
	err := send()
	var apiErr smithy.APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("first send while refusing: %v, want a transport error", err)
	}
	if err := send(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("second send while refusing: %v, want connection refused", err)
	}

	if err := srv.AcceptConnections(); err != nil {
		t.Fatal(err)
	}
	if srv.URL() != endpoint {
		t.Fatalf("endpoint moved from %s to %s", endpoint, srv.URL())
	}
	if err := send(); err != nil {
		t.Fatalf("after accepting again: %v", err)
	}
	if n := len(srv.Messages("flaky")); n != 2 {
		t.Fatalf("%d messages kept, want 2", n)
	}

	srv.Close()
	if err := srv.AcceptConnections(); !errors.Is(err, sqstest.ErrClosed) {
		t.Fatalf("AcceptConnections after Close: %v, want ErrClosed", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{}
	c := newClientOn(t, srv, transport, 1)
	ctx := context.Background()
	url := createQueue(t, c, "busy", nil)
	stuck := createQueue(t, c, "stuck", nil)
	srv.SetFault("stuck", sqstest.Hang)

	// One request held by a fault and one long poll are in flight when the server closes.
	done := make(chan error, 2)
	go func() {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &stuck, MessageBody: aws.String("x")})
		done <- err
	}()
	go func() {
		_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
		done <- err
	}()
	eventually(t, "both requests in flight", func() bool {
		return srv.Requests("stuck", "SendMessage") == 1 && srv.Requests("busy", "ReceiveMessage") == 1
	})
	srv.Close()
	for range 2 {
		if err := <-done; err == nil {
			t.Error("a request in flight succeeded although the server closed")
		}
	}
	srv.Close() // idempotent
	transport.CloseIdleConnections()

	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}
