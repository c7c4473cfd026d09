package natsguard

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Sentinels matched (errors.Is) by the errors this package returns.
var (
	// ErrNotNATS is matched by the error of a publish to a destination whose broker
	// is not "nats".
	ErrNotNATS = errors.New("natsguard: not a nats destination")
	// ErrClosed is returned by a Publisher after Close, and given to the promises of
	// the asynchronous messages Close gave up.
	ErrClosed = errors.New("natsguard: publisher closed")
	// ErrTooManyPending is matched by the refusal of a PublishAsync while the
	// publisher's bound of messages awaiting their acks (WithMaxPending) is reached.
	// It is this process's own saturation, never the server's verdict, and it matches
	// breaker.ErrSaturated.
	ErrTooManyPending error = alsoMatches{"natsguard: too many asynchronous messages await their acks", breaker.ErrSaturated}
	// ErrAckTimeout is matched by the error of a publish whose ack did not come within
	// the JetStream context's own timeout (its DefaultTimeout, 5s unless
	// jetstream.WithDefaultTimeout says otherwise) while the caller's context was
	// still live: the server did not answer in time. It matches
	// transport.ErrNoAnswer.
	ErrAckTimeout error = alsoMatches{"natsguard: no ack within the JetStream timeout", transport.ErrNoAnswer}
	// ErrSubjectNotInStream is matched by the error of a publish that no stream
	// answered (jetstream.ErrNoStreamResponse, which it also matches) although the
	// destination's stream exists: the message's subject is not one of the stream's.
	ErrSubjectNotInStream = errors.New("natsguard: the subject is not one of the stream's subjects")
	// ErrInvalidMessage is matched by every *InvalidMessageError.
	ErrInvalidMessage = errors.New("natsguard: invalid message")
	// ErrInvalidStream is matched by every *InvalidStreamError.
	ErrInvalidStream = errors.New("natsguard: invalid stream name")
)

// alsoMatches is a sentinel that errors.Is also matches to a more general one.
type alsoMatches struct {
	msg  string
	also error
}

func (e alsoMatches) Error() string        { return e.msg }
func (e alsoMatches) Is(target error) bool { return target == e.also }

// PublishError is a publish of one message to a stream that the server refused or
// did not answer. Err is nats.go's error, wrapped with ErrAckTimeout or
// ErrSubjectNotInStream when that is what it means.
type PublishError struct {
	Stream  string
	Subject string
	Err     error
}

// Error names the stream, the subject and the cause.
func (e *PublishError) Error() string {
	return "natsguard: publish to stream " + strconv.Quote(e.Stream) + " on subject " + strconv.Quote(e.Subject) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// InvalidMessageError is a message the publisher refused before sending anything,
// because it has no subject to publish to (its Key).
type InvalidMessageError struct {
	Index  int // the message's position in the msgs given to Publish
	Reason string
}

// Error names the message and the reason.
func (e *InvalidMessageError) Error() string {
	return "natsguard: message " + strconv.Itoa(e.Index) + ": " + e.Reason
}

// Is reports whether target is ErrInvalidMessage.
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// InvalidStreamError is a destination whose name cannot be a stream's: JetStream
// stream names have no '.', '*', '>', white space or path separators.
type InvalidStreamError struct{ Stream string }

// Error names the stream.
func (e *InvalidStreamError) Error() string {
	return "natsguard: " + strconv.Quote(e.Stream) + " cannot name a stream (no '.', '*', '>', white space, '/' or '\\')"
}

// Is reports whether target is ErrInvalidStream or transport.ErrInvalidDestination.
func (e *InvalidStreamError) Is(target error) bool {
	return target == ErrInvalidStream || target == transport.ErrInvalidDestination
}

// JetStream API error codes the table names (nats-server's JSErrCodes).
const (
	codeStoreFailed        = 10077 // JSStreamStoreFailedF: the store refused the message, with its reason
	codeMessageTooBig      = 10054 // JSStreamMessageExceedsMaximumErr
	codeWrongLastSequence  = 10071 // JSStreamWrongLastSequenceErrF
	codeWrongLastSeqR      = 10164 // the same on replicated streams (nats.go's JSErrCodeStreamWrongLastSequenceConstant)
	codeWrongLastMsgID     = 10070 // JSStreamWrongLastMsgIDErrF
	codeNotExpectedStream  = 10060 // JSStreamNotMatchErr: Nats-Expected-Stream names another stream
	codeStreamNotFound     = 10059 // JSStreamNotFoundErr
	codeJetStreamOff       = 10076 // JSNotEnabledErr
	codeJetStreamOffForAcc = 10039 // JSNotEnabledForAccountErr
)

// The reasons nats-server gives with codeStoreFailed when a limit with
// DiscardNew refuses a message: its store's ErrMaxMsgs, ErrMaxBytes and
// ErrMaxMsgsPerSubject. The code is the same for the three, and only the reason
// tells a full stream from a full subject.
const (
	reasonMaxMsgs           = "maximum messages exceeded"
	reasonMaxBytes          = "maximum bytes exceeded"
	reasonMaxMsgsPerSubject = "maximum messages per subject exceeded"
)

// Classify maps an error of nats.go's jetstream package, or of a Publisher, to what
// it says about the stream's health; the table is in the package documentation. It
// looks through wrapping and through a *transport.BatchError (its entries' worst:
// transport.Worst). A Publisher's circuits apply the registry's deadline rule
// (registry.Outcome) before Classify: the caller's cancellation is Neutral, and the
// caller's deadline a Failure only for a call that started with the policy's
// MinCallBudget, which is why Classify calls a bare context error Neutral.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	if u, ok := err.(interface{ Unwrap() []error }); ok { // *transport.BatchError, errors.Join
		return transport.WorstOf(u.Unwrap(), Classify)
	}
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrTooManyPending),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs), errors.Is(err, jetstream.ErrJetStreamPublisherClosed),
		errors.Is(err, nats.ErrConnectionDraining):
		return breaker.Neutral // this process's own doing or saturation
	case errors.Is(err, ErrAckTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return breaker.Failure // the server did not answer within the library's timeout
	case errors.Is(err, ErrInvalidMessage), errors.Is(err, ErrSubjectNotInStream),
		errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return breaker.Rejected // the message's own
	case errors.Is(err, ErrInvalidStream), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return breaker.Unusable // no stream takes the destination's messages, or it is forbidden
	}
	if ae := (*jetstream.APIError)(nil); errors.As(err, &ae) {
		return apiOutcome(ae)
	}
	for _, target := range []error{nats.ErrDisconnected, nats.ErrConnectionClosed, nats.ErrConnectionReconnecting,
		nats.ErrReconnectBufExceeded, nats.ErrNoServers, nats.ErrStaleConnection, nats.ErrTimeout,
		jetstream.ErrInvalidJSAck, io.EOF, io.ErrUnexpectedEOF, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, target) {
			return breaker.Failure // the connection is down, closed or broken
		}
	}
	if oe := (*net.OpError)(nil); errors.As(err, &oe) {
		return breaker.Failure
	}
	// What is left, the caller's bare context.Canceled and context.DeadlineExceeded
	// among it, says nothing about the stream.
	return breaker.Neutral
}

var _ transport.Classifier = Classify

// apiOutcome is the table of JetStream API errors, the server's answers.
func apiOutcome(ae *jetstream.APIError) breaker.Outcome {
	switch ae.ErrorCode {
	case codeStoreFailed:
		switch ae.Description {
		case reasonMaxMsgsPerSubject:
			return breaker.Rejected // this subject is full; the stream's other subjects take messages
		case reasonMaxMsgs, reasonMaxBytes:
			return breaker.Unusable // the stream is full (DiscardNew): no message goes in until it drains
		}
		return breaker.Failure // the store itself failed
	case codeMessageTooBig, codeWrongLastSequence, codeWrongLastSeqR, codeWrongLastMsgID, codeNotExpectedStream:
		return breaker.Rejected
	case codeStreamNotFound, codeJetStreamOff, codeJetStreamOffForAcc:
		return breaker.Unusable
	}
	switch {
	case ae.Code >= 500:
		return breaker.Failure // e.g. 10023 insufficient resources
	case ae.Code == 401 || ae.Code == 403:
		return breaker.Unusable
	case ae.Code >= 400:
		return breaker.Rejected // the request as this message made it
	}
	return breaker.Neutral
}

// serverAnswered reports whether err is the server's answer to a publish (an API
// error, or no stream for the subject), as opposed to a failure to get one.
func serverAnswered(err error) bool {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae)
}
