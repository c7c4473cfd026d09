package sharedstate

import (
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/internal/safetext"
)

// The fields that tell people on call why a shared circuit is open and since when:
// Record.LastError, LastErrorAt and UnhealthySince, and how the engine keeps them.

var _ backend.ErrorCompleter = (*Circuit)(nil)

// failureNote is the last failure this replica completed with its error.
type failureNote struct {
	text string
	at   int64 // wall, Unix nanoseconds
}

// CompletePermitWith is CompletePermit for a failure whose error is known
// (Permit.CompleteWith): the error's text, as backend.ErrorText keeps it, is written
// into the record with the transition it causes (the opening, a failed probe), so
// that every replica and the operator's tools show it. It costs no request of its own.
func (c *Circuit) CompletePermitWith(info backend.PermitInfo, o breaker.Outcome, err error) bool {
	if o == breaker.Failure && err != nil {
		c.lastFailure.Store(&failureNote{text: backend.ErrorText(err), at: c.wall()})
	}
	return c.CompletePermit(info, o)
}

// noteOpening writes this replica's last failure into next when next opens the
// circuit because of failures (not an override) and the failure happened in the
// generation prev, which next ends. Otherwise the record keeps the text it has.
func (c *Circuit) noteOpening(prev Record, next *Record) {
	if next.State != breaker.Open || next.Override != breaker.NoOverride || next.Generation == prev.Generation {
		return
	}
	if n := c.lastFailure.Load(); n != nil && n.at >= prev.Since {
		next.LastError, next.LastErrorAt = n.text, n.at
	}
}

// startOutage sets UnhealthySince when r, about to open at now, was closed: the first
// opening starts the outage, later probe cycles keep its start.
func startOutage(r *Record, now int64) {
	if r.State == breaker.Closed || r.UnhealthySince == 0 {
		r.UnhealthySince = now
	}
}

// healthOf sets the health fields of s from the record r. The text is escaped again:
// it comes from a store that others can write.
func healthOf(s *breaker.Snapshot, r Record) {
	s.FailedProbes = int(r.FailedProbes)
	if r.LastError != "" {
		s.LastError = safetext.Truncate(safetext.Escape(r.LastError), backend.MaxErrorText)
		s.LastErrorAt = unixOrZero(r.LastErrorAt)
	}
	if r.State != breaker.Closed {
		s.UnhealthySince = unixOrZero(r.UnhealthySince)
	}
}

// fillLastFailure shows this replica's own last failure when it is newer than the
// record's (a failure counted while the circuit stayed closed).
func (c *Circuit) fillLastFailure(s *breaker.Snapshot) {
	if n := c.lastFailure.Load(); n != nil && (s.LastErrorAt.IsZero() || n.at > s.LastErrorAt.UnixNano()) {
		s.LastError, s.LastErrorAt = n.text, time.Unix(0, n.at)
	}
}

func unixOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// checkHold refuses a hold whose end the record cannot keep (see backend.CheckHold);
// the engine sets no bound of its own on how long a hold lasts: the caller (the
// admin handler, an Operator) does.
func (c *Circuit) checkHold(until time.Time) error {
	return backend.CheckHold(time.Unix(0, c.wall()), until, 0)
}
