package sqs

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/brokerguard/brokerguard/breaker"
)

// ErrMissingResult is the error of a batch entry that a SendMessageBatch
// response listed neither as successful nor as failed. The message may or
// may not have been stored, so it is reported as not published.
var ErrMissingResult = errors.New("sqs: batch response has no result for the entry")

// EntryError is the failure of one entry of a SendMessageBatch request, as
// SQS reported it.
type EntryError struct {
	Code        string // SQS's error code, e.g. "InternalError"
	Message     string // SQS's description
	SenderFault bool   // true when SQS blames the request, not itself
}

// Error names the code, the side at fault and the description.
func (e *EntryError) Error() string {
	side := "receiver"
	if e.SenderFault {
		side = "sender"
	}
	msg := "sqs: batch entry failed: " + e.Code + " (" + side + " fault)"
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Classify maps an error of SQS publishing to what it says about the queue's
// health; the table is in the package documentation. It returns Success for
// a nil error. The publisher applies the registry's deadline rule
// (registry.Outcome) first: the caller's cancellation is Neutral, and the
// caller's deadline a Failure only for a call that started with the policy's
// MinCallBudget.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	if entry, ok := errors.AsType[*EntryError](err); ok {
		// A throttled entry is the queue shedding load, whichever side SQS blames.
		switch {
		case failureCodes[entry.Code] || !entry.SenderFault:
			return breaker.Failure
		case unusableCodes[entry.Code]:
			return breaker.Unusable
		}
		return breaker.Rejected
	}
	if _, ok := errors.AsType[*InvalidMessageError](err); ok {
		return breaker.Rejected
	}
	switch {
	case errors.Is(err, ErrMissingResult):
		return breaker.Failure
	case errors.Is(err, context.Canceled):
		return breaker.Neutral
	}
	if apiErr, ok := errors.AsType[smithy.APIError](err); ok {
		return classifyAPI(err, apiErr)
	}
	if _, ok := errors.AsType[ratelimit.QuotaExceededError](err); ok {
		return breaker.Failure
	}
	if _, ok := errors.AsType[*retry.MaxAttemptsError](err); ok {
		return breaker.Failure
	}
	if isConnectionError(err) {
		return breaker.Failure
	}
	return breaker.Neutral
}

// failureCodes are the API error codes of throttling and of SQS's own
// failures.
var failureCodes = map[string]bool{
	"ThrottlingException":     true,
	"Throttling":              true,
	"RequestThrottled":        true,
	"RequestLimitExceeded":    true,
	"KMS.ThrottlingException": true,
	"InternalError":           true,
	"InternalFailure":         true,
	"ServiceUnavailable":      true,
}

// unusableCodes are the API error codes that say the queue cannot take any message
// from this client: it does not exist, the credentials may not send to it, or its KMS
// key cannot be used. Every send fails until someone fixes the queue or the IAM
// policy.
var unusableCodes = map[string]bool{
	"AWS.SimpleQueueService.NonExistentQueue":     true,
	"QueueDoesNotExist":                           true,
	"AWS.SimpleQueueService.QueueDeletedRecently": true,
	"QueueDeletedRecently":                        true,
	"AccessDenied":                                true,
	"AccessDeniedException":                       true,
	"InvalidSecurity":                             true,
	"InvalidAddress":                              true,
	"InvalidClientTokenId":                        true,
	"UnrecognizedClientException":                 true,
	"SignatureDoesNotMatch":                       true,
	"ExpiredToken":                                true,
	"UnsupportedOperation":                        true,
	"AWS.SimpleQueueService.UnsupportedOperation": true,
	"KMS.AccessDeniedException":                   true,
	"KMS.DisabledException":                       true,
	"KMS.NotFoundException":                       true,
	"KMS.InvalidStateException":                   true,
	"KMS.InvalidKeyUsageException":                true,
	"KMS.OptInRequired":                           true,
}

// classifyAPI classifies an error SQS answered with; apiErr is the first
// smithy.APIError in err's chain.
func classifyAPI(err error, apiErr smithy.APIError) breaker.Outcome {
	var (
		throttled    *types.RequestThrottled
		kmsThrottled *types.KmsThrottled
	)
	switch {
	case errors.As(err, &throttled), errors.As(err, &kmsThrottled):
		return breaker.Failure
	case isUnusableError(err), unusableCodes[apiErr.ErrorCode()]:
		return breaker.Unusable
	case failureCodes[apiErr.ErrorCode()], apiErr.ErrorFault() == smithy.FaultServer:
		return breaker.Failure
	}
	resp, ok := errors.AsType[*awshttp.ResponseError](err)
	switch {
	case ok && resp.HTTPStatusCode() >= 500:
		return breaker.Failure
	case ok && resp.HTTPStatusCode() == 403:
		return breaker.Unusable // forbidden, whatever the code: the credentials or the policy
	}
	// What is left is the request's own fault (InvalidMessageContents,
	// InvalidParameterValue, a batch too long, ...): the message was rejected.
	return breaker.Rejected
}

// isUnusableError reports the modelled errors that say the queue or the queue's KMS
// key is missing or unusable, not that SQS is unhealthy.
func isUnusableError(err error) bool {
	var (
		missing     *types.QueueDoesNotExist
		kmsDenied   *types.KmsAccessDenied
		kmsDisabled *types.KmsDisabled
		kmsNotFound *types.KmsNotFound
		kmsState    *types.KmsInvalidState
		kmsKeyUsage *types.KmsInvalidKeyUsage
		kmsNotOptIn *types.KmsOptInRequired
	)
	return errors.As(err, &missing) ||
		errors.As(err, &kmsDenied) || errors.As(err, &kmsDisabled) ||
		errors.As(err, &kmsNotFound) || errors.As(err, &kmsState) ||
		errors.As(err, &kmsKeyUsage) || errors.As(err, &kmsNotOptIn)
}

// isConnectionError reports errors of the path to SQS: refused or reset
// connections, connections closed mid-answer, timeouts the client set, and
// requests the SDK could not send.
func isConnectionError(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if netErr, ok := errors.AsType[net.Error](err); ok && netErr.Timeout() {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	_, ok := errors.AsType[*smithyhttp.RequestSendError](err)
	return ok
}
