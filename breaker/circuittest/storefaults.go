package circuittest

import (
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// The rules of a shared state that refuses writes or forgets records hold for every
// shared backend that can inject those faults (Backend.RefuseWrites, Backend.Forget).
func init() {
	sharedContract = append(sharedContract, storeFaultContract...)
}

var storeFaultContract = []check{
	// Failures the store refuses are kept by each replica, which opens for itself at
	// the threshold, probes for itself after the break, and says it is degraded.
	{"RefusedWritesKeepLocalEvidence", func(e *env) {
		if e.b.RefuseWrites == nil {
			e.t.Skip("the backend cannot make its state refuse writes (Backend.RefuseWrites)")
		}
		p := e.policy()
		replicas := []Circuit{e.circuit(p), e.circuit(p), e.circuit(p)}
		for _, c := range replicas {
			e.call(c, breaker.Success) // each has read the record
		}
		e.b.RefuseWrites(true)
		defer e.b.RefuseWrites(false)
		admitted := 0
		for _, c := range replicas {
			for range p.FailureThreshold + 2 {
				permit, err := c.Acquire(e.ctx())
				if err != nil {
					break
				}
				admitted++
				permit.Complete(breaker.Failure)
			}
		}
		if max := len(replicas) * p.FailureThreshold; admitted > max {
			e.t.Fatalf("%d calls admitted to a failing dependency while the state refused writes; want at most %d (replicas × threshold)", admitted, max)
		}
		for i, c := range replicas {
			oe := e.reject(c)
			s := c.Snapshot()
			if s.DegradedSince.IsZero() || s.State != breaker.Open || !s.NotBefore.Equal(oe.NotBefore) {
				e.t.Fatalf("replica %d after the threshold with writes refused: %+v; want open and degraded", i, s)
			}
		}
		// Reads go on: past the staleness bound the replicas still reject on their own
		// evidence, not with ErrUnavailable.
		e.clock.Advance(e.b.MaxStaleness)
		for _, c := range replicas {
			e.reject(c)
		}
		// After the break, one local probe per replica; its failure starts a longer break.
		e.clock.Advance(p.BreakDuration)
		c := replicas[0]
		probe := e.acquire(c)
		e.reject(c) // one probe at a time
		probe.Complete(breaker.Failure)
		if oe := e.reject(c); oe.NotBefore.Sub(e.clock.Now()) < p.BreakDuration {
			e.t.Fatalf("after a failed local probe the break ends at %v, %v from now; want at least BreakDuration", oe.NotBefore, oe.NotBefore.Sub(e.clock.Now()))
		}
		// The dependency recovers: a probe's success closes the replica again.
		e.clock.Advance(2 * p.BreakDuration)
		e.acquire(c).Complete(breaker.Success)
		e.call(c, breaker.Success)
		if s := c.Snapshot(); s.State != breaker.Closed {
			e.t.Fatalf("after a successful local probe: %+v; want closed", s)
		}
		// The store takes writes again: the degraded state ends once the evidence is
		// spent and a write would be tried again.
		e.b.RefuseWrites(false)
		e.clock.Advance(e.b.MaxStaleness + time.Minute)
		e.call(c, breaker.Success)
		if s := c.Snapshot(); !s.DegradedSince.IsZero() {
			e.t.Fatalf("with writes taken again and no local evidence: %+v; want not degraded", s)
		}
		// And shared counting works again: the threshold through one replica opens all.
		e.open(c)
		e.clock.Advance(e.b.MaxStaleness)
		e.reject(replicas[1])
	}},
	// A store that forgets an open circuit (a restart without persistence, an
	// evicted key) gets it back from the replicas that knew it open: no call is
	// admitted before the open deadline they knew, by them or by a new replica.
	{"ForgottenOpenCircuitIsWrittenBack", func(e *env) {
		if e.b.Forget == nil {
			e.t.Skip("the backend cannot make its state forget (Backend.Forget)")
		}
		p := e.policy()
		a, b := e.circuit(p), e.circuit(p)
		until := e.open(a)
		e.clock.Advance(e.b.MaxStaleness)
		e.reject(b)
		e.b.Forget()
		e.clock.Advance(e.b.MaxStaleness)
		for _, c := range []Circuit{a, b, e.circuit(p)} {
			if oe := e.reject(c); !oe.NotBefore.Equal(until) {
				e.t.Fatalf("after the store forgot: NotBefore %v; want the deadline the replicas knew, %v", oe.NotBefore, until)
			}
		}
		e.clock.Set(until)
		e.acquire(a).Complete(breaker.Success) // the probe
		e.call(a, breaker.Success)
	}},
	// A replica that knew nothing created a closed record after the store forgot; the
	// replicas that knew the circuit open write their knowledge over it.
	{"RecordCreatedAfterAmnesiaIsRepaired", func(e *env) {
		if e.b.Forget == nil {
			e.t.Skip("the backend cannot make its state forget (Backend.Forget)")
		}
		p := e.policy()
		a := e.circuit(p)
		until := e.open(a)
		e.b.Forget()
		newcomer := e.circuit(p)
		e.acquire(newcomer).Complete(breaker.Neutral) // it knew nothing: one call
		e.clock.Advance(e.b.MaxStaleness)
		if oe := e.reject(a); !oe.NotBefore.Equal(until) {
			e.t.Fatalf("NotBefore %v; want %v", oe.NotBefore, until)
		}
		e.clock.Advance(e.b.MaxStaleness)
		if oe := e.reject(newcomer); !oe.NotBefore.Equal(until) {
			e.t.Fatalf("the newcomer after the repair: NotBefore %v; want %v", oe.NotBefore, until)
		}
	}},
}
