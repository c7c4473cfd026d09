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
