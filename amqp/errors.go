package amqp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Sentinels matched (errors.Is) by the errors this package returns.
var (
	// ErrNacked is matched by a *ConfirmError for a message the broker nacked.
	ErrNacked = errors.New("amqp: broker nacked the message")
	// ErrConfirmTimeout is matched by a *ConfirmError for a message whose confirm did
	// not arrive within the publisher's confirm timeout.
	ErrConfirmTimeout = errors.New("amqp: publisher confirm timed out")
	// ErrChannelTimeout is returned when opening a confirm-mode channel took longer
	// than the confirm timeout: the broker is not answering.
	ErrChannelTimeout = errors.New("amqp: opening a confirm-mode channel timed out")
	// ErrExchangeNotFound is matched by a *ChannelError whose channel the broker closed
	// with 404 NOT_FOUND: the exchange does not exist.
	ErrExchangeNotFound = errors.New("amqp: exchange not found")
	// ErrUnroutable is matched by a *ReturnedError: a mandatory message that no queue
	// took.
	ErrUnroutable = errors.New("amqp: message returned unroutable")
	// ErrManagerClosed is returned by a Manager, and the publishers using it, after
	// Close.
	ErrManagerClosed = errors.New("amqp: connection manager closed")
	// ErrPublisherClosed is returned by Publish after the Publisher's Close.
	ErrPublisherClosed = errors.New("amqp: publisher closed")
	// ErrBlocked is matched by a *BlockedError.
	ErrBlocked = errors.New("amqp: connection blocked by the broker")
	// ErrWrongBroker is returned (wrapped, naming the destination) by Publish for a
	// destination whose broker is not "amqp".
	ErrWrongBroker = errors.New(`amqp: destination broker is not "amqp"`)
	// ErrClientSide is matched by errors of this process's own making, never the
	// broker's verdict: amqp091's channel ids exhausted (amqp091.ErrChannelMax) or a
	// channel this process closed. Classify calls them Neutral.
	ErrClientSide = errors.New("amqp: client-side channel error, not the broker's verdict")
	// ErrLoginRefused is matched by a *DialError whose dial the broker refused at
	// connection.open: wrong credentials (403 ACCESS_REFUSED) or a vhost that does
	// not exist or that the user may not use (530 NOT_ALLOWED), also while the
	// connection circuit refuses dials because of it. Classify calls it Unusable.
	ErrLoginRefused = errors.New("amqp: the broker refused the login (credentials or vhost)")
)

// clientSide wraps err, an error the client made itself, so that it matches
// ErrClientSide.
func clientSide(err error) error { return fmt.Errorf("%w: %w", ErrClientSide, err) }

// quote names an exchange in a message; the default exchange's name is empty.
func quote(exchange string) string {
	if exchange == "" {
		return `"" (the default exchange)`
	}
	return strconv.Quote(exchange)
}

// ConfirmError is a message the broker did not confirm: it nacked it, or no confirm
// came within the confirm timeout. Either way the message may or may not have been
// routed; publishing it again may duplicate it.
type ConfirmError struct {
	Exchange string        // as RabbitMQ names it; "" is the default exchange
	Timeout  time.Duration // the timeout that passed; zero for a nack
}

// Error names the exchange and says what happened.
func (e *ConfirmError) Error() string {
	if e.Timeout > 0 {
		return "amqp: exchange " + quote(e.Exchange) + ": no publisher confirm within " + e.Timeout.String()
	}
	return "amqp: exchange " + quote(e.Exchange) + ": broker nacked the message"
}

// Is matches ErrConfirmTimeout for a timeout and ErrNacked for a nack.
func (e *ConfirmError) Is(target error) bool {
	if e.Timeout > 0 {
		return target == ErrConfirmTimeout
	}
	return target == ErrNacked
}

// ChannelError is a publish ended by the broker closing the channel (or the whole
// connection) under it. With publisher confirms the SDK reports such a message as
// nacked with no error; the reason arrives only on the channel's close notification,
// and this error carries it. A missing exchange is the common case: 404 NOT_FOUND,
// matched by ErrExchangeNotFound.
type ChannelError struct {
	Exchange string
	Err      *amqp091.Error // the broker's reason, with its reply code
}

// Error names the exchange and gives the broker's reason.
func (e *ChannelError) Error() string {
	if e.Err.Code == amqp091.NotFound {
		return "amqp: exchange " + quote(e.Exchange) + " does not exist: " + e.Err.Error()
	}
	return "amqp: publish to exchange " + quote(e.Exchange) + ": broker closed the channel: " + e.Err.Error()
}

// Is matches ErrExchangeNotFound when the reply code is 404, and
// transport.ErrNoAnswer when the client closed the channel because the broker did not
// answer in time (noAnswer).
func (e *ChannelError) Is(target error) bool {
	return target == ErrExchangeNotFound && e.Err.Code == amqp091.NotFound ||
		target == transport.ErrNoAnswer && noAnswer(e.Err)
}

// noAnswer reports whether err is amqp091's report of a connection it closed because
// a read timed out (the heartbeat's deadline): 501 with the net error's text as its
// reason, the only trace amqp091 keeps of it.
func noAnswer(err error) bool {
	ae, ok := errors.AsType[*amqp091.Error](err)
	return ok && ae.Code == amqp091.FrameError && strings.HasSuffix(ae.Reason, "i/o timeout")
}

// Unwrap returns the broker's *amqp091.Error.
func (e *ChannelError) Unwrap() error { return e.Err }

// ReturnedError is a mandatory message the broker returned because no queue took it.
// The broker is healthy; the topology is not what the publisher expects.
type ReturnedError struct {
	Exchange   string
	RoutingKey string
	Code       uint16 // reply code, usually 312 NO_ROUTE
	Text       string // reply text, e.g. "NO_ROUTE"
}

// Error names the exchange, routing key and reason.
func (e *ReturnedError) Error() string {
	return "amqp: exchange " + quote(e.Exchange) + " returned the message with routing key " +
		strconv.Quote(e.RoutingKey) + ": " + strconv.Itoa(int(e.Code)) + " " + e.Text
}

// Is matches ErrUnroutable.
func (e *ReturnedError) Is(target error) bool { return target == ErrUnroutable }

// BlockedError is a publish refused, or ended early, because the broker blocks the
// connection (connection.blocked: RabbitMQ's memory or disk alarm). A blocked broker
// stops reading what publishers send until the alarm clears, so the publisher fails
// at once rather than waiting; a message that was sent before the block may or may not
// have been routed.
type BlockedError struct {
	Addr   string    // host:port
	Reason string    // the broker's reason, e.g. "low on memory"
	Since  time.Time // when the manager learned of the block
}

// Error names the broker and its reason.
func (e *BlockedError) Error() string {
	return "amqp: broker at " + e.Addr + " blocks the connection (" + e.Reason + ") since " +
		e.Since.Format(time.RFC3339) + "; publishes fail until it unblocks"
}

// Is matches ErrBlocked.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// ErrClosedInFlight is matched by the error of a publish whose confirm was still
// outstanding when the caller closed the Manager: the broker may or may not have
// routed the message, and the close, not the broker, ended the wait.
var ErrClosedInFlight = fmt.Errorf("%w while the publish waited for its confirm; the message may or may not have been routed", ErrManagerClosed)

// DialError is a connection the manager could not open: the dial failed, or the
// connection circuit rejected it (errors.Is(err, breaker.ErrOpen)) because dials
// have been failing. It matches ErrLoginRefused when the broker refused the login
// (403, 530 at connection.open), also while the circuit refuses dials for that.
type DialError struct {
	Addr string // host:port
	Err  error
	// Last is, when the connection circuit refused the dial, the error of the last
	// dial that was made (nil when none failed).
	Last error
}

// Error names the broker address and the cause, and the last dial's error when the
// circuit refused this one.
func (e *DialError) Error() string {
	msg := "amqp: connect to " + e.Addr + ": " + e.Err.Error()
	if refusedLogin(e.Err) || refusedLogin(e.Last) {
		msg += " (the broker refused the login: check the user's password, the vhost and its permissions; dials back off while it lasts)"
	}
	if e.Last != nil {
		msg += "; last dial: " + e.Last.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *DialError) Unwrap() error { return e.Err }

// Is matches ErrLoginRefused when the dial, or the last dial before the circuit
// refused this one, was refused at login, and transport.ErrNoAnswer when the dial,
// or the last dial before the circuit refused this one, gave up on a broker that did
// not answer in time (noAnswer, or a net timeout).
func (e *DialError) Is(target error) bool {
	return target == ErrLoginRefused && (refusedLogin(e.Err) || refusedLogin(e.Last)) ||
		target == transport.ErrNoAnswer && (noAnswer(e.Err) || e.Last != nil &&
			(noAnswer(e.Last) || errors.Is(e.Last, os.ErrDeadlineExceeded)))
}

// refusedLogin reports whether err is the broker's refusal of a connection.open:
// 403 ACCESS_REFUSED (credentials, SASL) or 530 NOT_ALLOWED (the vhost).
func refusedLogin(err error) bool {
	ae, ok := errors.AsType[*amqp091.Error](err)
	return ok && (ae.Code == amqp091.AccessRefused || ae.Code == amqp091.NotAllowed)
}

// Classify maps an error of this package, or of amqp091-go, to what it says about the
// broker's health. See the package documentation for the table. A registry guarding
// the publisher applies its deadline rule (registry.Outcome) first: the caller's
// cancellation is Neutral, and the caller's deadline a Failure only for a call that
// started with the policy's MinCallBudget.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	switch {
	case errors.Is(err, ErrUnroutable):
		return breaker.Rejected // no queue is bound for this message's routing key
	case errors.Is(err, ErrClientSide), errors.Is(err, amqp091.ErrChannelMax):
		return breaker.Neutral // our own making, never the broker's verdict
	case errors.Is(err, ErrLoginRefused):
		return breaker.Unusable // no publish through this manager can succeed
	}
	if ce := (*ConfirmError)(nil); errors.As(err, &ce) || errors.Is(err, ErrChannelTimeout) || errors.Is(err, ErrBlocked) {
		return breaker.Failure
	}
	if ae := (*amqp091.Error)(nil); errors.As(err, &ae) {
		return classifyCode(ae.Code)
	}
	if de := (*DialError)(nil); errors.As(err, &de) &&
		(errors.Is(de.Err, breaker.ErrOpen) || errors.Is(de.Err, breaker.ErrSaturated)) {
		return breaker.Failure // the connection circuit knows the broker is down
	}
	if oe := (*net.OpError)(nil); errors.As(err, &oe) {
		return breaker.Failure // includes dial timeouts, which also match context.DeadlineExceeded
	}
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed} {
		if errors.Is(err, target) {
			return breaker.Failure
		}
	}
	// What is left, the caller's context.Canceled and context.DeadlineExceeded among
	// it, says nothing about the broker.
	return breaker.Neutral
}

// classifyCode maps an AMQP reply code.
func classifyCode(code int) breaker.Outcome {
	switch code {
	case amqp091.ConnectionForced, // 320: an operator or a shutting-down broker closed the connection
		amqp091.FrameError,      // 501
		amqp091.ChannelError,    // 504: includes amqp091.ErrClosed, a dead channel or connection
		amqp091.UnexpectedFrame, // 505
		amqp091.ResourceError,   // 506: the broker is out of a resource
		amqp091.InternalError:   // 541
		return breaker.Failure
	case amqp091.AccessRefused, // 403: the user may not write the exchange
		amqp091.NotFound,       // 404: the exchange does not exist
		amqp091.InvalidPath,    // 402: the vhost path is wrong
		amqp091.ResourceLocked, // 405: another connection holds it exclusively
		amqp091.NotAllowed,     // 530: the vhost is missing or forbidden
		amqp091.NotImplemented: // 540: the broker does not do what we ask
		return breaker.Unusable
	case amqp091.ContentTooLarge, // 311
		amqp091.NoRoute,            // 312
		amqp091.PreconditionFailed: // 406: e.g. a message over the broker's max_message_size
		return breaker.Rejected
	}
	// The rest (SyntaxError 502, CommandInvalid 503, ...): the client's request is
	// wrong, not the broker.
	return breaker.Neutral
}
