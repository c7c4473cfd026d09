// Package storekit holds what the authors of an outbox.Store need beyond the contract
// in package outbox: the checks every store makes first in the dead-row and retention
// calls, the reading of a stored status, and the reason and summary of a dead row. The
// stores of this module (outbox/memory, outbox/postgres, outbox/mysql) use it; an
// application does not.
package storekit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// ErrUnknownStatus is matched (errors.Is) by the *UnknownStatusError a store returns
// when it reads a row whose status this version does not know.
var ErrUnknownStatus = errors.New("outbox: unknown row status")

// UnknownStatusError names a row whose status is none of the outbox.Status
// constants. A store returns it rather than skip the row.
type UnknownStatusError struct {
	ID     int64
	Status string
}

// Error names the row and the status.
func (e *UnknownStatusError) Error() string {
	return "outbox: row " + strconv.FormatInt(e.ID, 10) + " has unknown status " + strconv.Quote(e.Status)
}

// Is reports whether target is ErrUnknownStatus.
func (e *UnknownStatusError) Is(target error) bool { return target == ErrUnknownStatus }

// ParseStatus returns the status s names, or an *UnknownStatusError naming row id.
func ParseStatus(id int64, s string) (outbox.Status, error) {
	switch st := outbox.Status(s); st {
	case outbox.StatusPending, outbox.StatusPublished, outbox.StatusDead:
		return st, nil
	}
	return "", &UnknownStatusError{ID: id, Status: s}
}

// CheckDeadPage is what every store checks first in DeadRows and DeadSummaries: a
// destination in f that is valid when it is set, and a page limit within
// [0, outbox.MaxPageLimit].
func CheckDeadPage(f outbox.DeadFilter, p outbox.Page) error {
	if err := checkFilter(f); err != nil {
		return err
	}
	if p.Limit < 0 || p.Limit > outbox.MaxPageLimit {
		return fmt.Errorf("outbox: page limit %d is outside [0, %d]", p.Limit, outbox.MaxPageLimit)
	}
	return nil
}

// checkFilter reports a destination that is set but invalid.
func checkFilter(f outbox.DeadFilter) error {
	if f.Destination != (transport.Destination{}) {
		if err := f.Destination.Validate(); err != nil {
			return fmt.Errorf("outbox: dead-row filter: %w", err)
		}
	}
	return nil
}

// CheckRequeue is what every store checks first in Requeue: a filter that sets
// something (outbox.ErrEmptyFilter otherwise) and names a valid destination, if any.
func CheckRequeue(f outbox.DeadFilter) error {
	if f.IsZero() {
		return outbox.ErrEmptyFilter
	}
	return checkFilter(f)
}

// CheckDeleteLimit is what every outbox.Purger checks first in DeleteSettled: a limit
// that is not negative.
func CheckDeleteLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("outbox: delete settled rows: limit %d is negative", limit)
	}
	return nil
}

// MatchesReason reports whether lastError is f.Reason, or f.Reason followed by ": "
// and a detail; an empty Reason matches everything.
func MatchesReason(f outbox.DeadFilter, lastError string) bool {
	return f.Reason == "" || lastError == f.Reason || strings.HasPrefix(lastError, f.Reason+": ")
}

// DeadReason returns the reason of a dead row's LastError: the text before its first
// ": " (see the outbox Reason constants), all of it when there is none. An
// outbox.DeadFilter with that Reason picks the row (MatchesReason).
func DeadReason(lastError string) string {
	reason, _, _ := strings.Cut(lastError, ": ")
	return reason
}

// Summarize returns the summaries of recs, read with their payloads (for a store
// without outbox.DeadSummaries).
func Summarize(recs []outbox.Record) []outbox.DeadSummary {
	out := make([]outbox.DeadSummary, len(recs))
	for i, r := range recs {
		out[i] = outbox.DeadSummary{Record: r, ValueBytes: len(r.Message.Value)}
		out[i].Message.Value = nil
	}
	return out
}

// ValidateEntry reports what keeps e from being stored and read back byte for byte,
// or from being published: an invalid destination, a header key that is not valid
// UTF-8 or holds a NUL (keys are stored as text), or a message larger than max bytes
// (max <= 0: its broker's default limit, DefaultMaxEntryBytes). Every store's Enqueue
// calls it. A larger message is an *outbox.TooLargeError: better refused in the
// caller's transaction than stored, claimed and refused by the broker at every
// attempt until it is dead.
func ValidateEntry(e outbox.Entry, max int) error {
	if err := e.Destination.Validate(); err != nil {
		return err
	}
	for i, h := range e.Message.Headers {
		if !utf8.ValidString(h.Key) || strings.IndexByte(h.Key, 0) >= 0 {
			return fmt.Errorf("outbox: header %d key %q is not valid UTF-8 text without NUL", i, h.Key)
		}
	}
	if max <= 0 {
		max = DefaultMaxEntryBytes(e.Destination.Broker)
	}
	if n := MessageSize(e.Message); n > max {
		return &outbox.TooLargeError{Destination: e.Destination, Bytes: n, Max: max}
	}
	return nil
}

// MessageSize is the bytes m carries: its key, its value, and its headers' keys and
// values; what ValidateEntry and a claim's MaxBytes count.
func MessageSize(m transport.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// DefaultMaxEntryBytes is the largest message Enqueue accepts for a broker (by
// Destination.Broker) unless the store was given a limit: the broker's own default
// limit, so that what is enqueued can be published with the broker's defaults.
//
//	kafka  1 MiB    (the broker's message.max.bytes, the producer's max.request.size)
//	sqs    256 KiB  (the largest SQS message)
//	amqp   16 MiB   (RabbitMQ 4's max_message_size; 3.x allowed 128 MiB)
//	nats   1 MiB    (nats-server's max_payload)
//	other  1 MiB
func DefaultMaxEntryBytes(broker string) int {
	switch broker {
	case "sqs":
		return 256 << 10
	case "amqp":
		return 16 << 20
	}
	return 1 << 20
}

// PageSize returns p's limit, outbox.DefaultPageLimit when it is 0.
func PageSize(p outbox.Page) int {
	if p.Limit == 0 {
		return outbox.DefaultPageLimit
	}
	return p.Limit
}
