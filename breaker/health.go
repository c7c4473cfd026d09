package breaker

import "github.com/brokerguard/brokerguard/internal/safetext"

// MaxErrorText bounds Snapshot.LastError, in bytes: enough for a broker's error and
// the address it came from, not for a payload an error happened to quote.
const MaxErrorText = 512

// ErrorText is what a circuit keeps of a failure's error for Snapshot.LastError: its
// text with credentials redacted (a URL's user information, password=..., tokens),
// control characters escaped and at most MaxErrorText bytes. Backends that keep the
// text elsewhere use it so that every circuit shows the same thing.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return safetext.ErrorText(err.Error(), MaxErrorText)
}

// ErrorCompleter is an optional capability of a Completer (found by type
// assertion): it is given the error of a failed call with its outcome, by
// Permit.CompleteWith, so that the circuit can show it in its snapshot.
type ErrorCompleter interface {
	Completer
	// CompletePermitWith is CompletePermit with the call's error (non-nil, and only
	// for a Failure).
	CompletePermitWith(p PermitInfo, o Outcome, err error) bool
}

// CompleteWith is Complete with the call's error: a Failure's error becomes the
// circuit's Snapshot.LastError (see ErrorText). Other outcomes, and a nil error, are
// completed exactly as Complete does, so healthy traffic pays nothing for it. Only
// the permit's first completion records anything.
func (p Permit) CompleteWith(o Outcome, err error) bool {
	if o != Failure || err == nil {
		return p.Complete(o)
	}
	return p.completeFailure(err, 0)
}

// completeFailure completes the permit as a Failure whose error, when not nil,
// becomes the circuit's LastError; mark adds completion flags (flagMissed).
func (p Permit) completeFailure(err error, mark uint8) bool {
	t := p.tok
	if t == nil || !t.seq.CompareAndSwap(p.seq, p.seq+1) {
		return false
	}
	ph := p.ph
	if ph == nil {
		if ec, ok := t.ext.(ErrorCompleter); ok && err != nil {
			info := PermitInfo{Generation: p.gen, Probe: p.flags&flagProbe != 0, Lease: t.lease}
			t.ext = nil
			tokens.Put(t)
			return ec.CompletePermitWith(info, Failure, err)
		}
		return completeExternal(t, p.gen, p.flags, Failure)
	}
	start := t.start
	tokens.Put(t)
	if err != nil {
		ph.b.lastFailure.Store(&failureNote{text: ErrorText(err), at: ph.b.now()})
	}
	return ph.b.complete(ph, p.tok, p.seq, p.flags|mark, Failure, start)
}

// failureNote is the last failure reported with its error.
type failureNote struct {
	text string
	at   int64 // b.now() reading
}

// noteHealth keeps UnhealthySince across a transition from a state to another:
// the first opening after the circuit was closed starts an outage, probe cycles
// and holds within it do not move it, and closing ends it. Requires b.mu held.
func (b *Breaker) noteHealth(from, to State, now int64) {
	switch {
	case to == Closed:
		b.unhealthy = false
	case from == Closed && !b.unhealthy:
		b.unhealthy, b.unhealthySince = true, now
	}
}

// fillHealth sets the health fields of s. Requires b.mu held.
func (b *Breaker) fillHealth(s *Snapshot) {
	if n := b.lastFailure.Load(); n != nil {
		s.LastError, s.LastErrorAt = n.text, b.timeAt(n.at)
	}
	if b.unhealthy {
		s.UnhealthySince = b.timeAt(b.unhealthySince)
	}
	s.FailedProbes = b.failedProbes
}
