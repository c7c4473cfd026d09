package breaker

import (
	"github.com/brokerguard/brokerguard/breaker/internal/link"
	"github.com/brokerguard/brokerguard/internal/safetext"
)

// maxErrorText bounds Snapshot.LastError, in bytes (backend.MaxErrorText).
const maxErrorText = 512

// errorText is what a circuit keeps of a failure's error for Snapshot.LastError
// (backend.ErrorText).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return safetext.ErrorText(err.Error(), maxErrorText)
}

// errorCompleter is backend.ErrorCompleter: a completer given the error of a failed
// call with its outcome, by Permit.CompleteWith.
type errorCompleter interface {
	completer
	CompletePermitWith(p link.PermitInfo, o Outcome, err error) bool
}

// CompleteWith is Complete with the call's error: a Failure's error becomes the
// circuit's Snapshot.LastError (redacted, at most 512 bytes). Other outcomes, and a nil error, are
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
		if ec, ok := t.ext.(errorCompleter); ok && err != nil {
			info := link.PermitInfo{Generation: p.gen, Probe: p.flags&flagProbe != 0, Lease: t.lease}
			t.ext = nil
			tokens.Put(t)
			return ec.CompletePermitWith(info, Failure, err)
		}
		return completeExternal(t, p.gen, p.flags, Failure)
	}
	start := t.start
	tokens.Put(t)
	if err != nil {
		ph.b.lastFailure.Store(&failureNote{text: errorText(err), at: ph.b.now()})
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
