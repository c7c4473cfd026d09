// Package transport is the contract between brokerguard and broker adapters: where a
// message goes (Destination), what it carries (Message), who sends it (Publisher) and
// what a send's error says about the broker's health (Classifier).
//
// It imports only package breaker and the standard library.
package transport

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/breaker"
)

// Limits on a Destination. They bound the memory and telemetry cardinality a
// destination can cost, and are above every broker's own name limit (Kafka 249 bytes,
// RabbitMQ 255, SQS 80).
const (
	MaxBrokerLen = 32
	MaxNameLen   = 255
)

// Destination names where messages go: a broker kind and a topic, exchange or queue.
// Every destination has its own circuit.
type Destination struct {
	Broker string // "kafka", "amqp", "sqs", ...: lowercase letters, digits, '_' or '-'
	Name   string // the topic, exchange or queue
}

// String returns "broker:name", e.g. "kafka:orders", the form ParseDestination reads
// and registry overrides are keyed by.
func (d Destination) String() string { return d.Broker + ":" + d.Name }

// ErrInvalidDestination is matched (errors.Is) by every error Validate and
// ParseDestination return.
var ErrInvalidDestination = errors.New("transport: invalid destination")

// DestinationError says what is wrong with a destination.
type DestinationError struct {
	Input  string // the destination as given
	Reason string
}

// Error names the destination and the reason.
func (e *DestinationError) Error() string {
	return "transport: invalid destination " + strconv.Quote(e.Input) + ": " + e.Reason
}

// Is reports whether target is ErrInvalidDestination.
func (e *DestinationError) Is(target error) bool { return target == ErrInvalidDestination }

// Validate reports whether d can name a circuit: a broker of lowercase letters, digits,
// '_' or '-' starting with a letter, and a non-empty name of valid UTF-8 without control
// characters, each within its length limit.
func (d Destination) Validate() error {
	bad := func(reason string) error { return &DestinationError{Input: d.String(), Reason: reason} }
	switch {
	case d.Broker == "":
		return bad("broker is empty")
	case len(d.Broker) > MaxBrokerLen:
		return bad("broker is longer than " + strconv.Itoa(MaxBrokerLen) + " bytes")
	case d.Name == "":
		return bad("name is empty")
	case len(d.Name) > MaxNameLen:
		return bad("name is " + strconv.Itoa(len(d.Name)) + " bytes, more than " + strconv.Itoa(MaxNameLen))
	case !utf8.ValidString(d.Name):
		return bad("name is not valid UTF-8")
	}
	for i, c := range d.Broker {
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-')) {
			return bad("broker must start with a lowercase letter and hold only lowercase letters, digits, '_' and '-'")
		}
	}
	if strings.ContainsFunc(d.Name, unicode.IsControl) {
		return bad("name contains a control character")
	}
	return nil
}

// ParseDestination reads "broker:name" (the name may itself contain ':') and
// validates it.
func ParseDestination(s string) (Destination, error) {
	broker, name, ok := strings.Cut(s, ":")
	if !ok {
		return Destination{}, &DestinationError{Input: s, Reason: `want "broker:name"`}
	}
	d := Destination{Broker: broker, Name: name}
	if err := d.Validate(); err != nil {
		return Destination{}, &DestinationError{Input: s, Reason: err.(*DestinationError).Reason}
	}
	return d, nil
}

// Header is one message header. Order and duplicates are kept.
type Header struct {
	Key   string
	Value []byte
}

// Message is what a publisher sends. Key routes it where the broker has a notion of
// keys (Kafka partitioning, SQS FIFO group); adapters document what they do with it.
type Message struct {
	Key, Value []byte
	Headers    []Header
}

// Publisher sends messages to a destination. A nil error means every message was
// accepted by the broker. An error may be a *BatchError that says which messages were
// not; any other error means none can be assumed published.
type Publisher interface {
	Publish(ctx context.Context, d Destination, msgs ...Message) error
}

// ErrNotSent is matched (errors.Is) by the error of a publish whose context ended
// before any of its messages was sent, during the client's own set-up (a connection
// or channel being opened, a pooled one awaited). Adapters wrap the context's error
// with it, so errors.Is(err, context.DeadlineExceeded) still holds. Such a deadline
// judges the client's set-up rather than the broker's answers to publishes: a
// registry whose destination has admission control on does not count it against a
// broker that is answering other calls (registry.Outcome).
var ErrNotSent = errors.New("transport: ended before its messages were sent")

// ErrNoAnswer is matched (errors.Is) by the error of a publish that failed because
// the broker did not answer in time by the client's own clock — a read deadline or a
// heartbeat that timed out (an i/o timeout), closing the channel or connection — rather
// than by an answer of the broker's. Net errors that time out (os.ErrDeadlineExceeded)
// mean the same. A registry reports such a Failure to the circuit as a missed
// deadline, as it does the caller's own deadline
// (breaker.Permit.CompleteMissed): a hung broker's probes fail this way once the
// client has given up on its connection.
var ErrNoAnswer = errors.New("transport: the broker did not answer in time")

// Classifier maps a publish error to what it says about the broker's health. It is
// called only with non-nil errors.
type Classifier func(error) breaker.Outcome

// BatchError reports the messages of one Publish call that were not published; the
// ones it does not list were. Outcome is what the failures say about the broker's
// health, so a guard can classify without knowing the adapter.
type BatchError struct {
	Destination Destination
	Failed      []MessageError // by ascending index
}

// MessageError is the failure of one message: Index is its position in the msgs
// passed to Publish.
type MessageError struct {
	Index int
	Err   error
}

// Error summarizes the failures.
func (e *BatchError) Error() string {
	var b strings.Builder
	b.WriteString("transport: ")
	b.WriteString(strconv.Itoa(len(e.Failed)))
	b.WriteString(" message(s) to ")
	b.WriteString(e.Destination.String())
	b.WriteString(" not published")
	for i, f := range e.Failed {
		if i == 3 {
			b.WriteString("; ...")
			break
		}
		b.WriteString("; [")
		b.WriteString(strconv.Itoa(f.Index))
		b.WriteString("] ")
		b.WriteString(f.Err.Error())
	}
	return b.String()
}

// Unwrap returns the messages' errors, so errors.Is and errors.As look through them.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}
