package circuittest

import (
	"context"
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// The ramp after recovery (Policy.RampDuration) is part of the contract of every
// backend, and shared backends ramp every replica on one schedule.
func init() {
	contract = append(contract, rampContract...)
	sharedContract = append(sharedContract, rampSharedContract...)
}

const suiteRamp = 10 * time.Second

func (e *env) rampPolicy() breaker.Policy {
	p := e.policy()
	p.RampDuration = suiteRamp
	return p
}

// recover opens c, waits out the break and closes it with one probe through c; the
// ramp starts at the returned time.
func (e *env) recover(c Circuit) time.Time {
	e.t.Helper()
	e.clock.Set(e.open(c))
	if p := e.acquire(c); !p.Probe() || !p.Complete(breaker.Success) {
		e.t.Fatal("the probe after the break did not close the circuit")
	}
	e.state(c, breaker.Closed)
	return e.clock.Now()
}

// offer makes n calls through c now, completing the admitted ones with Success, and
// checks that every refusal is a ramp's, telling the caller to come back within the
// next eighth of the ramp. It returns the calls admitted.
func (e *env) offer(c Circuit, n int) (admitted int) {
	e.t.Helper()
	now := e.clock.Now()
	for range n {
		p, err := c.Acquire(context.Background())
		if err == nil {
			admitted++
			p.Complete(breaker.Success)
			continue
		}
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || !oe.Ramping || !rampRefusal(err) || !errors.Is(err, breaker.ErrOpen) {
			e.t.Fatalf("Acquire while ramping = %v; want a ramp's *OpenError", err)
		}
		if !oe.NotBefore.After(now) || oe.NotBefore.After(now.Add(suiteRamp/8)) {
			e.t.Fatalf("a ramp refusal at %v says come back at %v; want within the next %v", now, oe.NotBefore, suiteRamp/8)
		}
	}
	return admitted
}

// wantShare checks that admitted of n calls is share of them, to within 1%.
func (e *env) wantShare(admitted, n int, share float64, when string) {
	e.t.Helper()
	if want := share * float64(n); float64(admitted) < want-float64(n)/100 || float64(admitted) > want+float64(n)/100 {
		e.t.Fatalf("%s: admitted %d of %d calls; want %.0f (share %.2f)", when, admitted, n, want, share)
	}
}

var rampContract = []check{
	{"RampAfterRecovery", func(e *env) {
		p := e.rampPolicy()
		c := e.circuit(p)
		closed := e.recover(c)
		s := c.Snapshot()
		if !s.RampUntil.Equal(closed.Add(suiteRamp)) || s.RampShare != 0.1 {
			e.t.Fatalf("snapshot at the close: RampUntil %v RampShare %v; want %v and 0.1", s.RampUntil, s.RampShare, closed.Add(suiteRamp))
		}
		e.wantShare(e.offer(c, 1000), 1000, 0.1, "at the close")
		e.clock.Set(closed.Add(suiteRamp / 2))
		admitted := e.offer(c, 1000)
		e.wantShare(admitted, 1000, 0.5, "half way")
		if got := c.Snapshot().RampRefused; got < 1300 || got > 1500 {
			e.t.Fatalf("RampRefused %d after about 1400 refusals", got)
		}
		e.clock.Set(closed.Add(suiteRamp))
		e.wantShare(e.offer(c, 100), 100, 1, "after the ramp")
		if s := c.Snapshot(); !s.RampUntil.IsZero() || s.RampShare != 1 {
			e.t.Fatalf("snapshot after the ramp: RampUntil %v RampShare %v", s.RampUntil, s.RampShare)
		}
	}},
	{"RampFailuresCountAndReopeningEndsIt", func(e *env) {
		c := e.circuit(e.rampPolicy())
		closed := e.recover(c)
		e.clock.Set(closed.Add(suiteRamp / 2))
		for failures := 0; failures < e.policy().FailureThreshold; {
			if p, err := c.Acquire(context.Background()); err == nil {
				p.Complete(breaker.Failure)
				failures++
			}
		}
		e.reject(c)
		if s := e.state(c, breaker.Open); !s.RampUntil.IsZero() {
			e.t.Fatalf("an open circuit reports a ramp until %v", s.RampUntil)
		}
		e.clock.Set(e.reject(c).NotBefore)
		e.acquire(c).Complete(breaker.Success)
		e.wantShare(e.offer(c, 1000), 1000, 0.1, "after the second recovery")
	}},
	{"RampRaisesTheInFlightBound", func(e *env) {
		p := e.rampPolicy()
		p.MaxInFlight = 20
		c := e.circuit(p)
		closed := e.recover(c)
		for _, step := range []struct {
			at   time.Duration
			want int
		}{{0, 2}, {suiteRamp / 2, 10}, {suiteRamp, 20}} {
			e.clock.Set(closed.Add(step.at))
			var held []breaker.Permit
			for range 200 {
				if pm, err := c.Acquire(e.ctx()); err == nil {
					held = append(held, pm)
				} else if !rampRefusal(err) && !errors.Is(err, breaker.ErrSaturated) {
					e.t.Fatalf("Acquire while ramping with MaxInFlight = %v", err)
				}
			}
			if len(held) != step.want {
				e.t.Fatalf("%v into the ramp: %d calls in flight; want %d", step.at, len(held), step.want)
			}
			for _, pm := range held {
				pm.Complete(breaker.Success)
			}
		}
	}},
	{"ForceCloseDoesNotRamp", func(e *env) {
		c := e.circuit(e.rampPolicy())
		e.recover(c)
		e.must(c.ForceClose(e.ctx(), e.clock.Now().Add(time.Second)))
		e.wantShare(e.offer(c, 100), 100, 1, "under ForceClose")
		e.clock.Advance(time.Second)
		e.wantShare(e.offer(c, 100), 100, 1, "after ForceClose expired")
	}},
}

var rampSharedContract = []check{
	{"ReplicasRampTogether", func(e *env) {
		p := e.rampPolicy()
		a, b := e.circuit(p), e.circuit(p)
		e.call(b, breaker.Success) // b reads the state once
		closed := e.recover(a)
		e.clock.Advance(e.b.MaxStaleness) // b sees the close
		at := e.clock.Now().Sub(closed)
		e.wantShare(e.offer(b, 1000), 1000, backend.RampShare(p, at), "on the other replica")
		if ua, ub := a.Snapshot().RampUntil, b.Snapshot().RampUntil; !ua.Equal(closed.Add(suiteRamp)) || !ub.Equal(ua) {
			e.t.Fatalf("replicas ramp until %v and %v; want both %v", ua, ub, closed.Add(suiteRamp))
		}
	}},
}

// rampRefusal reports whether err is a ramping circuit's refusal.
func rampRefusal(err error) bool {
	oe, ok := errors.AsType[*breaker.OpenError](err)
	return ok && oe.Ramping
}
