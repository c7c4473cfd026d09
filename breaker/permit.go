package breaker

import (
	"sync"
	"sync/atomic"

	"github.com/brokerguard/brokerguard/breaker/internal/link"
)

const (
	flagProbe    uint8 = 1 << iota // admitted by a half-open circuit
	flagInFlight                   // holds one of MaxInFlight's slots
	flagBypass                     // admitted although the circuit would have refused it
)

// token makes a permit's first completion detectable without allocating: permits
// borrow a token from a pool and carry the sequence number they were issued with. The
// first Complete advances the sequence and returns the token; any later Complete of
// that permit, or of a copy, finds a different sequence.
type token struct {
	seq   atomic.Uint64 // advanced by each permit's first completion
	start int64         // when the permit was admitted, when the policy times calls
	ext   completer     // the backend of a permit made by newPermit
	lease uint64        // the backend's reference for that permit
}

var tokens = sync.Pool{New: func() any { return new(token) }}

// lendToken takes a token for a new permit. The sequence moves only on completion,
// so lending costs no atomic write: the permit keeps the current value, and the
// first Complete is the one that moves it on.
func lendToken() (*token, uint64) {
	t := tokens.Get().(*token)
	return t, t.seq.Load()
}

// Permit is the right to make one call, handed out by Acquire. Complete it exactly
// once with the call's outcome. The zero Permit is valid and completes as stale.
type Permit struct {
	tok   *token
	seq   uint64
	ph    *phase // nil for a permit made by newPermit
	gen   uint64
	flags uint8
}

// permit lends a token to a new permit of ph. now is only read when the policy times
// calls.
func (ph *phase) permit(now int64, flags uint8) Permit {
	t, seq := lendToken()
	t.start = now
	return Permit{tok: t, seq: seq, ph: ph, gen: ph.gen, flags: flags}
}

// Complete reports the call's outcome. It returns true when the permit was live — its
// first completion, in the generation that admitted it, within its probe lease, and
// with no override in force — so that the outcome was taken into account (a Neutral
// outcome is taken into account by changing nothing). A stale permit changes no state
// but still gives back its MaxInFlight slot, once.
func (p Permit) Complete(o Outcome) bool {
	t := p.tok
	if t == nil || !t.seq.CompareAndSwap(p.seq, p.seq+1) {
		return false
	}
	ph := p.ph
	if ph == nil {
		return completeExternal(t, p.gen, p.flags, o)
	}
	start := t.start
	tokens.Put(t)
	if o == Success && ph.plainSuccess && ph.b.cur.Load() == ph {
		// The hot path: a success on a plain closed circuit resets the consecutive
		// count, writing only when there is something to reset so that healthy
		// traffic does not bounce the cache line between cores.
		if ph.failures.Load() != 0 {
			ph.failures.Store(0)
		}
		return true
	}
	return ph.b.complete(ph, p.tok, p.seq, p.flags, o, start)
}

func completeExternal(t *token, gen uint64, flags uint8, o Outcome) bool {
	ext, info := t.ext, link.PermitInfo{Generation: gen, Probe: flags&flagProbe != 0, Lease: t.lease}
	t.ext = nil
	tokens.Put(t)
	return ext.CompletePermit(info, o)
}

// Probe reports whether the permit is a half-open probe.
func (p Permit) Probe() bool { return p.flags&flagProbe != 0 }

// Bypass reports whether the permit was admitted by a Shadow or FailOpen circuit
// that would have refused it under Enforce.
func (p Permit) Bypass() bool { return p.flags&flagBypass != 0 }

// Generation returns the generation that admitted the permit (0 for the zero Permit).
func (p Permit) Generation() uint64 { return p.gen }

// completer is backend.Completer: it receives the outcome of a permit made by
// newPermit.
type completer interface {
	CompletePermit(p link.PermitInfo, o Outcome) bool
}

// newPermit makes a permit for a backend's circuit (backend.NewPermit): c implements
// backend.Completer. Its first Complete calls c.CompletePermit with info; later
// completions return false without calling it.
func newPermit(c any, info link.PermitInfo) Permit {
	t, seq := lendToken()
	t.ext, t.lease = c.(completer), info.Lease
	p := Permit{tok: t, seq: seq, gen: info.Generation}
	if info.Probe {
		p.flags = flagProbe
	}
	return p
}
