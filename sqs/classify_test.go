package sqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// opErr wraps err the way the SDK wraps an answer with the given HTTP status.
func opErr(status int, err error) error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
	}}
}

// sendErr wraps err the way the SDK wraps a request it could not send.
func sendErr(err error) error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage", Err: &smithyhttp.RequestSendError{Err: err}}
}

// The branches of Classify, one by one, on error values shaped like the SDK's.
// The integration tests in integration/sqs produce each row with the real SDK.
func TestClassifyBranches(t *testing.T) {
	generic := func(code string, fault smithy.ErrorFault) error {
		return &smithy.GenericAPIError{Code: code, Message: "m", Fault: fault}
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"entry sender fault", &EntryError{Code: "InvalidParameterValue", SenderFault: true}, breaker.Rejected},
		{"entry access denied", &EntryError{Code: "AccessDenied", SenderFault: true}, breaker.Unusable},
		{"entry receiver fault", &EntryError{Code: "InternalError"}, breaker.Failure},
		{"entry throttled, blamed on the sender", &EntryError{Code: "ThrottlingException", SenderFault: true}, breaker.Failure},
		{"entry KMS-throttled, blamed on the sender", &EntryError{Code: "KMS.ThrottlingException", SenderFault: true}, breaker.Failure},
		{"entry in a batch error", &transport.BatchError{Failed: []transport.MessageError{{Err: &EntryError{Code: "InternalError"}}}}, breaker.Failure},
		{"missing result", ErrMissingResult, breaker.Failure},
		{"cancelled", sendErr(context.Canceled), breaker.Neutral},
		{"RequestThrottled", opErr(403, &types.RequestThrottled{}), breaker.Failure},
		{"KmsThrottled", opErr(400, &types.KmsThrottled{}), breaker.Failure},
		{"QueueDoesNotExist", opErr(400, &types.QueueDoesNotExist{}), breaker.Unusable},
		{"QueueDoesNotExist on a 500", opErr(500, &types.QueueDoesNotExist{}), breaker.Unusable},
		{"InvalidMessageContents", opErr(400, &types.InvalidMessageContents{}), breaker.Rejected},
		{"KmsAccessDenied", opErr(400, &types.KmsAccessDenied{}), breaker.Unusable},
		{"KmsDisabled", opErr(400, &types.KmsDisabled{}), breaker.Unusable},
		{"KmsNotFound", opErr(400, &types.KmsNotFound{}), breaker.Unusable},
		{"KmsInvalidState", opErr(400, &types.KmsInvalidState{}), breaker.Unusable},
		{"KmsInvalidKeyUsage", opErr(400, &types.KmsInvalidKeyUsage{}), breaker.Unusable},
		{"KmsOptInRequired", opErr(400, &types.KmsOptInRequired{}), breaker.Unusable},
		{"ThrottlingException", opErr(400, generic("ThrottlingException", smithy.FaultUnknown)), breaker.Failure},
		{"RequestLimitExceeded", opErr(400, generic("RequestLimitExceeded", smithy.FaultUnknown)), breaker.Failure},
		{"InternalError", opErr(500, generic("InternalError", smithy.FaultUnknown)), breaker.Failure},
		{"ServiceUnavailable", opErr(503, generic("ServiceUnavailable", smithy.FaultUnknown)), breaker.Failure},
		{"unknown code, 502", opErr(502, generic("BadGateway", smithy.FaultUnknown)), breaker.Failure},
		{"unknown code, server fault", opErr(400, generic("Odd", smithy.FaultServer)), breaker.Failure},
		{"InvalidParameterValue", opErr(400, generic("InvalidParameterValue", smithy.FaultClient)), breaker.Rejected},
		{"AccessDenied", opErr(403, generic("AccessDenied", smithy.FaultUnknown)), breaker.Unusable},
		{"batch too long", opErr(400, &types.BatchRequestTooLong{}), breaker.Rejected},
		{"retry quota", errors.Join(opErr(500, generic("InternalError", smithy.FaultUnknown)), fmt.Errorf("failed to get rate limit token, %w", ratelimit.QuotaExceededError{})), breaker.Failure},
		{"retry quota alone", ratelimit.QuotaExceededError{}, breaker.Failure},
		{"attempts", &retry.MaxAttemptsError{Attempt: 3, Err: errors.New("x")}, breaker.Failure},
		{"refused", sendErr(refused), breaker.Failure},
		{"refused, bare", refused, breaker.Failure},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), breaker.Failure},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), breaker.Failure},
		{"EOF", fmt.Errorf("read: %w", io.EOF), breaker.Failure},
		{"unexpected EOF", io.ErrUnexpectedEOF, breaker.Failure},
		{"deadline", context.DeadlineExceeded, breaker.Failure},
		{"net timeout", &net.DNSError{IsTimeout: true}, breaker.Failure},
		{"request not sent", sendErr(errors.New("tls: bad certificate")), breaker.Failure},
		{"invalid message", &InvalidMessageError{Index: 0, Reason: "r"}, breaker.Rejected},
		{"invalid destination", &transport.DestinationError{Input: "x", Reason: "r"}, breaker.Neutral},
		{"anything else", errors.New("application"), breaker.Neutral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
