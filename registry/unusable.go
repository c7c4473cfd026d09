package registry

import (
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/transport"
)

// unusableNote is why and since when a destination is unusable.
type unusableNote struct {
	reason string
	since  time.Time
}

// note records what a call that reached d's broker said about the destination: an
// Unusable outcome marks it unusable with err's text (keeping the first time it was
// seen); a Success or a Rejected message (the broker took the destination) clears
// the mark. Other outcomes say nothing about the destination. A Success reads one
// atomic pointer when nothing is marked.
func (e *entry) note(o breaker.Outcome, err error, r *Registry) {
	switch o {
	case breaker.Success, breaker.Rejected:
		if e.unusable.Load() != nil {
			e.unusable.Store(nil)
		}
	case breaker.Unusable:
		reason := unusableReason(err)
		since := r.now()
		if cur := e.unusable.Load(); cur != nil {
			if cur.reason == reason {
				return
			}
			since = cur.since
		}
		e.unusable.Store(&unusableNote{reason: reason, since: since})
	}
}

// unusableReason is err's text as the circuit keeps a failure's (backend.ErrorText):
// bounded, credentials redacted, control characters escaped.
func unusableReason(err error) string {
	if err == nil {
		return "unusable"
	}
	return backend.ErrorText(err)
}

// snapshot is e's circuit's snapshot with the destination's unusable mark.
func (e *entry) snapshot() breaker.Snapshot {
	s := e.circuit.Snapshot()
	if n := e.unusable.Load(); n != nil {
		s.Unusable, s.UnusableSince = n.reason, n.since
	}
	return s
}

// Snapshot returns the snapshot of d's live circuit, with Unusable and
// UnusableSince filled in when the last calls to d said the destination cannot take
// messages (see breaker.Unusable), and false when d has no live circuit.
func (r *Registry) Snapshot(d transport.Destination) (breaker.Snapshot, bool) {
	e, ok := r.lookup(d)
	if !ok {
		return breaker.Snapshot{}, false
	}
	return e.snapshot(), true
}

// NoteOutcome records, for a publisher that completes its permits itself (Acquire and
// Complete), what the call to d that returned err with outcome o says about the
// destination, as Call does: an Unusable outcome marks d unusable (Snapshot.Unusable)
// with err's text, a Success or Rejected clears the mark.
func (r *Registry) NoteOutcome(d transport.Destination, o breaker.Outcome, err error) {
	if e, ok := r.lookup(d); ok {
		e.note(o, err, r)
	}
}
