package circuittest

import (
	"errors"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// The health contract: a circuit tells why it is open (the last failure's error text,
// redacted and escaped) and since when (the first opening of the outage, which probe
// cycles do not move).

// completeWith completes a fresh permit of c with a failure and its error.
func (e *env) failWith(c Circuit, err error) {
	e.t.Helper()
	if !e.acquire(c).CompleteWith(breaker.Failure, err) {
		e.t.Fatalf("CompleteWith(Failure, %v) of a fresh permit = false", err)
	}
}

// wantHealth checks the snapshot's health fields.
func (e *env) wantHealth(s breaker.Snapshot, errText string, since time.Time, failedProbes int) {
	e.t.Helper()
	if s.LastError != errText {
		e.t.Errorf("LastError %q; want %q", s.LastError, errText)
	}
	if !s.UnhealthySince.Equal(since) {
		e.t.Errorf("UnhealthySince %v; want %v", s.UnhealthySince, since)
	}
	if s.FailedProbes != failedProbes {
		e.t.Errorf("FailedProbes %d; want %d", s.FailedProbes, failedProbes)
	}
}

var healthContract = []check{
	{"LastErrorAndUnhealthySinceThroughProbeCycles", func(e *env) {
		c := e.circuit(e.policy())
		e.wantHealth(c.Snapshot(), "", time.Time{}, 0)
		leader := errors.New("kafka: LEADER_NOT_AVAILABLE from postgres://app:hunter2@db:5432/x\n[fake] force-close kafka:payments")
		want := `kafka: LEADER_NOT_AVAILABLE from postgres://[redacted]@db:5432/x\n[fake] force-close kafka:payments`
		e.call(c, breaker.Failure) // without an error: nothing to tell yet
		e.clock.Advance(time.Second)
		e.failWith(c, leader)
		e.clock.Advance(time.Second)
		e.failWith(c, leader)
		opened := e.clock.Now()
		e.reject(c)
		s := e.state(c, breaker.Open)
		e.wantHealth(s, want, opened, 0)
		if !s.LastErrorAt.Equal(opened) {
			e.t.Errorf("LastErrorAt %v; want %v", s.LastErrorAt, opened)
		}
		// Twelve failed probes: the outage still began at the first opening.
		probeErr := errors.New("dial tcp 10.0.0.7:9092: connection refused")
		for i := 1; i <= 12; i++ {
			e.clock.Advance(time.Hour) // past any break
			e.failWith(c, probeErr)
			s = e.state(c, breaker.Open)
			e.wantHealth(s, probeErr.Error(), opened, i)
		}
		if strings.Contains(s.LastError, "hunter2") {
			e.t.Fatalf("LastError keeps a password: %q", s.LastError)
		}
		e.clock.Advance(time.Hour)
		e.call(c, breaker.Success) // the probe closes the circuit
		s = e.state(c, breaker.Closed)
		e.wantHealth(s, probeErr.Error(), time.Time{}, 0)
	}},
	{"LastErrorBoundedAndOnlyForFailures", func(e *env) {
		c := e.circuit(e.policy())
		if !e.acquire(c).CompleteWith(breaker.Success, errors.New("not a failure")) {
			e.t.Fatal("CompleteWith(Success, err) of a fresh permit = false")
		}
		if s := c.Snapshot(); s.LastError != "" {
			e.t.Fatalf("a success's error became LastError %q", s.LastError)
		}
		for range e.policy().FailureThreshold {
			e.failWith(c, errors.New(strings.Repeat("x", 10_000)))
		}
		e.reject(c)
		if s := c.Snapshot(); len(s.LastError) > backend.MaxErrorText || len(s.LastError) < backend.MaxErrorText/2 {
			e.t.Fatalf("LastError of a 10,000-byte error is %d bytes; want at most %d", len(s.LastError), backend.MaxErrorText)
		}
	}},
	{"ForceOpenStartsAnOutageAndCloseEndsIt", func(e *env) {
		c := e.circuit(e.policy())
		e.must(c.ForceOpen(e.ctx(), e.clock.Now().Add(time.Minute)))
		e.wantHealth(e.state(c, breaker.Open), "", t0, 0)
		e.must(c.ForceClose(e.ctx(), e.clock.Now().Add(time.Minute)))
		e.wantHealth(e.state(c, breaker.Closed), "", time.Time{}, 0)
	}},
}

// sharedHealthContract holds for backends whose circuits share one state.
var sharedHealthContract = []check{
	{"ReplicasSeeWhyAndSinceWhen", func(e *env) {
		a, b := e.circuit(e.policy()), e.circuit(e.policy())
		e.call(b, breaker.Success) // b has read the record
		refused := errors.New("broker 3: NOT_ENOUGH_REPLICAS")
		for range e.policy().FailureThreshold {
			e.failWith(a, refused)
		}
		opened := e.clock.Now()
		e.reject(a)
		e.clock.Advance(e.b.MaxStaleness + time.Millisecond)
		e.reject(b)
		e.wantHealth(e.state(b, breaker.Open), refused.Error(), opened, 0)
	}},
}
