package breaker_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// brkWindowed is a valid window-mode policy the bounds table starts from.
func brkWindowed() breaker.Policy {
	return breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: 10 * time.Second}
}

// day is the largest duration Validate accepts.
const day = 24 * time.Hour

// Validate accepts every field at its exact bound and refuses it one step beyond,
// naming the field.
func TestPolicyValidateAtEachBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*breaker.Policy)
		field string // "" when the policy is valid
	}{
		{"FailureThreshold 0 without BreakDuration", func(p *breaker.Policy) { *p = breaker.Policy{} }, ""},
		{"FailureThreshold -1", func(p *breaker.Policy) { p.FailureThreshold = -1 }, "FailureThreshold"},
		{"BreakDuration -1", func(p *breaker.Policy) { p.FailureThreshold, p.BreakDuration = 0, -1 }, "BreakDuration"},
		{"BreakDuration 0 with a threshold", func(p *breaker.Policy) { p.BreakDuration = 0 }, "BreakDuration"},
		{"BreakDuration 1ns", func(p *breaker.Policy) { p.BreakDuration = 1 }, ""},
		{"FailureWindow -1", func(p *breaker.Policy) { p.FailureWindow = -1 }, "FailureWindow"},
		{"FailureWindow at its minimum", func(p *breaker.Policy) { p.FailureWindow = time.Millisecond }, ""},
		{"FailureWindow below its minimum", func(p *breaker.Policy) { p.FailureWindow = time.Millisecond - 1 }, "FailureWindow"},
		{"MinimumCalls -1", func(p *breaker.Policy) { p.MinimumCalls = -1 }, "MinimumCalls"},
		{"MinimumCalls 1 in window mode", func(p *breaker.Policy) { p.MinimumCalls = 1 }, ""},
		{"MinimumCalls without a window", func(p *breaker.Policy) { p.FailureWindow, p.MinimumCalls = 0, 1 }, "MinimumCalls"},
		{"SlowCallDuration -1", func(p *breaker.Policy) { p.SlowCallDuration = -1 }, "SlowCallDuration"},
		{"HalfOpenMaxProbes -1", func(p *breaker.Policy) { p.HalfOpenMaxProbes = -1 }, "HalfOpenMaxProbes"},
		{"SuccessesToClose -1", func(p *breaker.Policy) { p.SuccessesToClose = -1 }, "SuccessesToClose"},
		{"ProbeLease -1", func(p *breaker.Policy) { p.ProbeLease = -1 }, "ProbeLease"},
		{"HalfOpenRetryDelay -1", func(p *breaker.Policy) { p.HalfOpenRetryDelay = -1 }, "HalfOpenRetryDelay"},
		{"MaxBreakDuration -1", func(p *breaker.Policy) { p.MaxBreakDuration = -1 }, "MaxBreakDuration"},
		{"MaxInFlight -1", func(p *breaker.Policy) { p.MaxInFlight = -1 }, "MaxInFlight"},
		{"every count at 0", func(p *breaker.Policy) {
			p.MinimumCalls, p.SlowCallDuration, p.HalfOpenMaxProbes, p.SuccessesToClose = 0, 0, 0, 0
			p.ProbeLease, p.HalfOpenRetryDelay, p.MaxBreakDuration, p.MaxInFlight = 0, 0, 0, 0
		}, ""},
		{"FailureRatio 0", func(p *breaker.Policy) { p.FailureRatio = 0 }, ""},
		{"FailureRatio 1", func(p *breaker.Policy) { p.FailureRatio = 1 }, ""},
		{"FailureRatio above 1", func(p *breaker.Policy) { p.FailureRatio = math.Nextafter(1, 2) }, "FailureRatio"},
		{"FailureRatio below 0", func(p *breaker.Policy) { p.FailureRatio = -math.SmallestNonzeroFloat64 }, "FailureRatio"},
		{"FailureRatio NaN", func(p *breaker.Policy) { p.FailureRatio = math.NaN() }, "FailureRatio"},
		{"FailureRatio without a window", func(p *breaker.Policy) { p.FailureWindow, p.FailureRatio = 0, 0.5 }, "FailureRatio"},
		{"SlowCallRatio 1", func(p *breaker.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, 1 }, ""},
		{"SlowCallRatio above 1", func(p *breaker.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, math.Nextafter(1, 2) }, "SlowCallRatio"},
		{"SlowCallRatio below 0", func(p *breaker.Policy) { p.SlowCallRatio = -math.SmallestNonzeroFloat64 }, "SlowCallRatio"},
		{"SlowCallRatio NaN", func(p *breaker.Policy) { p.SlowCallRatio = math.NaN() }, "SlowCallRatio"},
		{"SlowCallRatio without SlowCallDuration", func(p *breaker.Policy) { p.SlowCallRatio = 0.5 }, "SlowCallRatio"},
		{"SlowCallRatio without a window", func(p *breaker.Policy) {
			p.FailureWindow, p.SlowCallDuration, p.SlowCallRatio = 0, time.Second, 0.5
		}, "SlowCallRatio"},
		{"MaxBreakDuration equal to BreakDuration", func(p *breaker.Policy) { p.MaxBreakDuration = p.BreakDuration }, ""},
		{"MaxBreakDuration below BreakDuration", func(p *breaker.Policy) { p.MaxBreakDuration = p.BreakDuration - 1 }, "MaxBreakDuration"},
		{"Jitter 0.5", func(p *breaker.Policy) { p.Jitter = 0.5 }, ""},
		{"Jitter above 0.5", func(p *breaker.Policy) { p.Jitter = math.Nextafter(0.5, 1) }, "Jitter"},
		{"Jitter below 0", func(p *breaker.Policy) { p.Jitter = -math.SmallestNonzeroFloat64 }, "Jitter"},
		{"Jitter NaN", func(p *breaker.Policy) { p.Jitter = math.NaN() }, "Jitter"},
		{"Scope SingleHost", func(p *breaker.Policy) { p.Scope = breaker.SingleHost }, ""},
		{"Scope beyond SingleHost", func(p *breaker.Policy) { p.Scope = breaker.SingleHost + 1 }, "Scope"},
		{"Mode FailOpen", func(p *breaker.Policy) { p.Mode = breaker.FailOpen }, ""},
		{"Mode beyond FailOpen", func(p *breaker.Policy) { p.Mode = breaker.FailOpen + 1 }, "Mode"},
		{"Disabled alone", func(p *breaker.Policy) { *p = breaker.Policy{Disabled: true} }, ""},
		{"Disabled with a threshold", func(p *breaker.Policy) { p.Disabled = true }, "Disabled"},
		{"RampDuration -1", func(p *breaker.Policy) { p.RampDuration = -1 }, "RampDuration"},
		{"RampDuration at its minimum", func(p *breaker.Policy) { p.RampDuration = time.Millisecond }, ""},
		{"RampDuration below its minimum", func(p *breaker.Policy) { p.RampDuration = time.Millisecond - 1 }, "RampDuration"},
		{"RampFloor 1", func(p *breaker.Policy) { p.RampDuration, p.RampFloor = time.Second, 1 }, ""},
		{"RampFloor above 1", func(p *breaker.Policy) { p.RampDuration, p.RampFloor = time.Second, math.Nextafter(1, 2) }, "RampFloor"},
		{"RampFloor below 0", func(p *breaker.Policy) { p.RampDuration, p.RampFloor = time.Second, -math.SmallestNonzeroFloat64 }, "RampFloor"},
		{"RampFloor NaN", func(p *breaker.Policy) { p.RampDuration, p.RampFloor = time.Second, math.NaN() }, "RampFloor"},
		{"RampAggression tiny", func(p *breaker.Policy) { p.RampDuration, p.RampAggression = time.Second, math.SmallestNonzeroFloat64 }, ""},
		{"RampAggression below 0", func(p *breaker.Policy) { p.RampDuration, p.RampAggression = time.Second, -math.SmallestNonzeroFloat64 }, "RampAggression"},
		{"RampAggression infinite", func(p *breaker.Policy) { p.RampDuration, p.RampAggression = time.Second, math.Inf(1) }, "RampAggression"},
		{"RampAggression NaN", func(p *breaker.Policy) { p.RampDuration, p.RampAggression = time.Second, math.NaN() }, "RampAggression"},
		{"RampFloor without a ramp", func(p *breaker.Policy) { p.RampFloor = 0.5 }, "RampFloor"},
		{"every duration at 24h", func(p *breaker.Policy) {
			p.BreakDuration, p.FailureWindow, p.SlowCallDuration, p.ProbeLease = day, day, day, day
			p.HalfOpenRetryDelay, p.MaxBreakDuration, p.RampDuration = day, day, day
		}, ""},
		{"BreakDuration the largest Duration", func(p *breaker.Policy) { p.BreakDuration = math.MaxInt64 }, "BreakDuration"},
		{"BreakDuration above 24h", func(p *breaker.Policy) { p.BreakDuration = day + 1 }, "BreakDuration"},
		{"FailureWindow above 24h", func(p *breaker.Policy) { p.FailureWindow = day + 1 }, "FailureWindow"},
		{"SlowCallDuration above 24h", func(p *breaker.Policy) { p.SlowCallDuration = day + 1 }, "SlowCallDuration"},
		{"ProbeLease above 24h", func(p *breaker.Policy) { p.ProbeLease = day + 1 }, "ProbeLease"},
		{"HalfOpenRetryDelay above 24h", func(p *breaker.Policy) { p.HalfOpenRetryDelay = day + 1 }, "HalfOpenRetryDelay"},
		{"MaxBreakDuration the largest Duration", func(p *breaker.Policy) { p.MaxBreakDuration = math.MaxInt64 }, "MaxBreakDuration"},
		{"RampDuration above 24h", func(p *breaker.Policy) { p.RampDuration = day + 1 }, "RampDuration"},
		{"FailureRatio infinite", func(p *breaker.Policy) { p.FailureRatio = math.Inf(1) }, "FailureRatio"},
		{"Jitter infinite", func(p *breaker.Policy) { p.Jitter = math.Inf(-1) }, "Jitter"},
		{"RampAggression without a ramp", func(p *breaker.Policy) { p.RampAggression = 2 }, "RampAggression"},
	} {
		p := brkWindowed()
		c.edit(&p)
		err := p.Validate()
		var pe *breaker.PolicyError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", c.name, err)
		case c.field != "" && (!errors.As(err, &pe) || !errors.As(err, new(*breaker.PolicyError))):
			t.Errorf("%s: Validate = %v, want a *PolicyError for %s", c.name, err, c.field)
		case c.field != "" && pe.Field != c.field:
			t.Errorf("%s: Validate names %q (%v), want %q", c.name, pe.Field, err, c.field)
		}
	}
}

// Every behaviour-changing field the fingerprint writes only when it differs from its
// default (mode, ramp, slow-call ratio) tells two policies apart,
// field by field, and writing a default out changes nothing.
func TestFingerprintSeparatesTheOptionalFields(t *testing.T) {
	base := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: 10 * time.Second, SlowCallDuration: time.Second}
	ramp := func(d time.Duration, floor, aggr float64) func(*breaker.Policy) {
		return func(p *breaker.Policy) { p.RampDuration, p.RampFloor, p.RampAggression = d, floor, aggr }
	}
	variants := []struct {
		name string
		edit func(*breaker.Policy)
	}{
		{"base", func(*breaker.Policy) {}},
		{"shadow", func(p *breaker.Policy) { p.Mode = breaker.Shadow }},
		{"fail open", func(p *breaker.Policy) { p.Mode = breaker.FailOpen }},
		{"ramp 1s", ramp(time.Second, 0, 0)},
		{"ramp 2s", ramp(2*time.Second, 0, 0)},
		{"ramp floor", ramp(time.Second, 0.5, 0)},
		{"ramp aggression", ramp(time.Second, 0, 2)},
		{"ramp floor and aggression", ramp(time.Second, 0.5, 2)},
		{"slow ratio 0.5", func(p *breaker.Policy) { p.SlowCallRatio = 0.5 }},
		{"slow ratio 0.25", func(p *breaker.Policy) { p.SlowCallRatio = 0.25 }},
	}
	seen := map[string]string{}
	for _, v := range variants {
		p := base
		v.edit(&p)
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		fp := backend.Fingerprint(p)
		if other, ok := seen[fp]; ok {
			t.Errorf("%s and %s have one fingerprint", v.name, other)
		}
		seen[fp] = v.name
	}
	same := []struct {
		name string
		edit func(*breaker.Policy)
	}{
		{"Enforce written", func(p *breaker.Policy) { p.Mode = breaker.Enforce }},
		{"default ramp floor and aggression written", func(p *breaker.Policy) {
			p.RampDuration, p.RampFloor, p.RampAggression = time.Second, 0.1, 1
		}},
	}
	for _, v := range same {
		p, q := base, base
		v.edit(&p)
		if p.RampDuration > 0 {
			q.RampDuration = p.RampDuration
		}
		if backend.Fingerprint(p) != backend.Fingerprint(q) {
			t.Errorf("%s changed the fingerprint", v.name)
		}
	}
}

// The optional fields' encoding is as stable as the base's: a golden value for a
// policy that sets every one of them.
func TestFingerprintOfEveryOptionalFieldIsStable(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: time.Minute, SlowCallDuration: time.Second,
		Mode: breaker.Shadow, RampDuration: time.Minute, SlowCallRatio: 0.5}
	// sha256("brokerguard.policy.v1|5|1000000000|60000000000|0|0|1000000000|1|1|1000000000|1000000000|1000000000|0|0|0
	// |mode=1|ramp=60000000000,4591870180066957722,4607182418800017408
	// |slowratio=4602678819172646912")[:16]
	// without the line breaks, computed outside Go (float fields as their IEEE 754 bits).
	if got, want := backend.Fingerprint(p), "482a6509723fa5dc9f0b72760d508673"; got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
}

// The longest break Validate accepts, doubled to its maximum and spread by the largest
// jitter, still refuses calls: no deadline the circuit computes overflows.
func TestTheLongestBreaksRefuseCalls(t *testing.T) {
	for _, random := range []float64{0, 0.999999} {
		h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: day / 2, MaxBreakDuration: day, Jitter: 0.5},
			breaker.WithRandom(func() float64 { return random }))
		h.clock.Advance(day * 365 * 100) // a process up for a century
		h.call(breaker.Failure)
		for probe := range 3 {
			h.wantState(breaker.Open)
			if _, err := h.b.Acquire(t.Context()); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("random %v, after %d failed probes: Acquire = %v, want ErrOpen", random, probe, err)
			}
			h.clock.Advance(2 * day)
			h.call(breaker.Failure) // the probe fails: the break doubles up to a day
		}
	}
}
