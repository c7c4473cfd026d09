package breaker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

func TestPolicyValidation(t *testing.T) {
	ok := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	with := func(f func(*breaker.Policy)) breaker.Policy { p := ok; f(&p); return p }
	for _, tc := range []struct {
		name  string
		p     breaker.Policy
		field string
		msg   string
	}{
		{"negative threshold", with(func(p *breaker.Policy) { p.FailureThreshold = -1 }), "FailureThreshold", "must not be negative (got -1)"},
		{"threshold without break", with(func(p *breaker.Policy) { p.BreakDuration = 0 }), "BreakDuration", "must be positive when FailureThreshold is set"},
		{"negative break", with(func(p *breaker.Policy) { p.BreakDuration = -time.Second }), "BreakDuration", "must not be negative (got -1s)"},
		{"negative window", with(func(p *breaker.Policy) { p.FailureWindow = -1 }), "FailureWindow", "must not be negative (got -1ns)"},
		{"tiny window", with(func(p *breaker.Policy) { p.FailureWindow = time.Microsecond }), "FailureWindow", "must be at least 1ms (got 1µs)"},
		{"negative minimum calls", with(func(p *breaker.Policy) { p.MinimumCalls = -3 }), "MinimumCalls", "must not be negative (got -3)"},
		{"minimum calls without window", with(func(p *breaker.Policy) { p.MinimumCalls = 3 }), "MinimumCalls", "applies only in window mode; set FailureWindow"},
		{"ratio above one", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = 1.5 }), "FailureRatio", "must be within [0, 1] (got 1.5)"},
		{"negative ratio", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = -0.1 }), "FailureRatio", "must be within [0, 1] (got -0.1)"},
		{"NaN ratio", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = math.NaN() }), "FailureRatio", "must be within [0, 1] (got NaN)"},
		{"ratio without window", with(func(p *breaker.Policy) { p.FailureRatio = 0.5 }), "FailureRatio", "applies only in window mode; set FailureWindow"},
		{"negative slow call", with(func(p *breaker.Policy) { p.SlowCallDuration = -1 }), "SlowCallDuration", "must not be negative (got -1ns)"},
		{"negative probes", with(func(p *breaker.Policy) { p.HalfOpenMaxProbes = -1 }), "HalfOpenMaxProbes", "must not be negative (got -1)"},
		{"negative successes", with(func(p *breaker.Policy) { p.SuccessesToClose = -2 }), "SuccessesToClose", "must not be negative (got -2)"},
		{"negative lease", with(func(p *breaker.Policy) { p.ProbeLease = -1 }), "ProbeLease", "must not be negative (got -1ns)"},
		{"negative retry delay", with(func(p *breaker.Policy) { p.HalfOpenRetryDelay = -1 }), "HalfOpenRetryDelay", "must not be negative (got -1ns)"},
		{"max break below break", with(func(p *breaker.Policy) { p.MaxBreakDuration = time.Millisecond }), "MaxBreakDuration", "must not be below BreakDuration (1ms < 1s)"},
		{"negative max break", with(func(p *breaker.Policy) { p.MaxBreakDuration = -1 }), "MaxBreakDuration", "must not be negative (got -1ns)"},
		{"jitter too large", with(func(p *breaker.Policy) { p.Jitter = 0.6 }), "Jitter", "must be within [0, 0.5] (got 0.6)"},
		{"negative jitter", with(func(p *breaker.Policy) { p.Jitter = -0.1 }), "Jitter", "must be within [0, 0.5] (got -0.1)"},
		{"NaN jitter", with(func(p *breaker.Policy) { p.Jitter = math.NaN() }), "Jitter", "must be within [0, 0.5] (got NaN)"},
		{"negative max in flight", with(func(p *breaker.Policy) { p.MaxInFlight = -1 }), "MaxInFlight", "must not be negative (got -1)"},
		{"unknown scope", with(func(p *breaker.Policy) { p.Scope = 9 }), "Scope", "is not a known scope (got 9)"},
		{"unknown mode", with(func(p *breaker.Policy) { p.Mode = 7 }), "Mode", "is not a known mode (got 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || !errors.As(err, new(*breaker.PolicyError)) {
				t.Fatalf("Validate: %v, want a *PolicyError", err)
			}
			if pe.Field != tc.field || pe.Reason != tc.msg {
				t.Fatalf("got %s %q, want %s %q", pe.Field, pe.Reason, tc.field, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), "breaker: invalid policy: "+tc.field+" ") {
				t.Fatalf("message %q does not name the field first", err)
			}
			if _, err := breaker.New("x", tc.p); !errors.As(err, new(*breaker.PolicyError)) {
				t.Fatalf("New accepted the policy: %v", err)
			}
		})
	}
}

func TestValidPolicies(t *testing.T) {
	for _, p := range []breaker.Policy{
		{},
		{MaxInFlight: 10},
		{FailureThreshold: 1, BreakDuration: 1},
		{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 10, FailureRatio: 0.5},
		{FailureThreshold: 5, BreakDuration: time.Second, MaxBreakDuration: time.Second, Jitter: 0.5},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// Rule 13: the local breaker refuses shared scopes.
func TestLocalBreakerRefusesSharedScopes(t *testing.T) {
	for _, s := range []breaker.Scope{breaker.SharedDependency, breaker.SingleHost} {
		_, err := breaker.New("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: s})
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) || pe.Field != "Scope" || !strings.Contains(err.Error(), s.String()) {
			t.Fatalf("scope %v: %v", s, err)
		}
	}
}

func TestFingerprintIsStableAndCoversEveryField(t *testing.T) {
	base := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	// A golden value: a changed encoding would split fleets that share circuits.
	// sha256("brokerguard.policy.v1|5|1000000000|0|0|0|0|1|1|1000000000|1000000000|1000000000|0|0|0")[:16],
	// computed outside Go.
	if got, want := backend.Fingerprint(base), "d2035294a1132abcac6a452884fcc8f6"; got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
	// Spelled-out defaults fingerprint like the zero values they replace.
	spelled := base
	spelled.HalfOpenMaxProbes, spelled.SuccessesToClose, spelled.ProbeLease, spelled.HalfOpenRetryDelay, spelled.MaxBreakDuration = 1, 1, time.Second, time.Second, time.Second
	if backend.Fingerprint(spelled) != backend.Fingerprint(base) {
		t.Fatal("normalized defaults change the fingerprint")
	}
	seen := map[string]string{backend.Fingerprint(base): "base"}
	for name, f := range map[string]func(*breaker.Policy){
		"FailureThreshold":   func(p *breaker.Policy) { p.FailureThreshold = 6 },
		"BreakDuration":      func(p *breaker.Policy) { p.BreakDuration = 2 * time.Second },
		"FailureWindow":      func(p *breaker.Policy) { p.FailureWindow = time.Minute },
		"MinimumCalls":       func(p *breaker.Policy) { p.FailureWindow = time.Minute; p.MinimumCalls = 3 },
		"FailureRatio":       func(p *breaker.Policy) { p.FailureWindow = time.Minute; p.FailureRatio = 0.5 },
		"SlowCallDuration":   func(p *breaker.Policy) { p.SlowCallDuration = time.Second },
		"HalfOpenMaxProbes":  func(p *breaker.Policy) { p.HalfOpenMaxProbes = 2 },
		"SuccessesToClose":   func(p *breaker.Policy) { p.SuccessesToClose = 2 },
		"ProbeLease":         func(p *breaker.Policy) { p.ProbeLease = time.Minute },
		"HalfOpenRetryDelay": func(p *breaker.Policy) { p.HalfOpenRetryDelay = time.Minute },
		"MaxBreakDuration":   func(p *breaker.Policy) { p.MaxBreakDuration = time.Minute },
		"Jitter":             func(p *breaker.Policy) { p.Jitter = 0.1 },
		"MaxInFlight":        func(p *breaker.Policy) { p.MaxInFlight = 1 },
		"Scope":              func(p *breaker.Policy) { p.Scope = breaker.SharedDependency },
		"Mode":               func(p *breaker.Policy) { p.Mode = breaker.Shadow },
		"Mode=FailOpen":      func(p *breaker.Policy) { p.Mode = breaker.FailOpen },
	} {
		p := base
		f(&p)
		fp := backend.Fingerprint(p)
		if other, dup := seen[fp]; dup {
			t.Errorf("changing %s gives the fingerprint of %s", name, other)
		}
		seen[fp] = name
	}
}

func FuzzPolicyValidate(f *testing.F) {
	f.Add(5, int64(time.Second), int64(0), 0, 0.0, int64(0), 0, 0, int64(0), int64(0), int64(0), 0.0, 0, uint8(0))
	f.Add(5, int64(time.Second), int64(time.Minute), 10, 0.5, int64(time.Second), 2, 3, int64(time.Second), int64(time.Second), int64(time.Hour), 0.3, 100, uint8(1))
	f.Fuzz(func(t *testing.T, threshold int, brk, win int64, minCalls int, ratio float64, slow int64, probes, successes int, lease, retry, maxBrk int64, jitter float64, maxInFlight int, scope uint8) {
		p := breaker.Policy{
			FailureThreshold: threshold, BreakDuration: time.Duration(brk), FailureWindow: time.Duration(win),
			MinimumCalls: minCalls, FailureRatio: ratio, SlowCallDuration: time.Duration(slow),
			HalfOpenMaxProbes: probes, SuccessesToClose: successes, ProbeLease: time.Duration(lease),
			HalfOpenRetryDelay: time.Duration(retry), MaxBreakDuration: time.Duration(maxBrk), Jitter: jitter,
			MaxInFlight: maxInFlight, Scope: breaker.Scope(scope),
		}
		err := p.Validate()
		if err != nil {
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || pe.Field == "" || pe.Reason == "" {
				t.Fatalf("Validate returned %v, not a *PolicyError naming a field", err)
			}
			return
		}
		// A policy that validates must build and behave: no panic, sane first state.
		if p.Scope != breaker.LocalProcess {
			return
		}
		b, err := breaker.New("fuzz", p)
		if err != nil {
			t.Fatalf("valid policy refused by New: %v", err)
		}
		for range 3 {
			if pm, err := b.Acquire(t.Context()); err == nil {
				pm.Complete(breaker.Failure)
			}
		}
		if n := backend.Normalize(p); n.HalfOpenMaxProbes < 1 || n.SuccessesToClose < 1 || n.MaxBreakDuration < n.BreakDuration {
			t.Fatalf("Normalized left a default unset: %+v", n)
		}
	})
}

// A nil jitter source would panic on the first trip, inside the circuit's lock: New
// refuses it rather than leave a circuit that blocks every caller after a recovered panic.
func TestNewRefusesANilRandom(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Jitter: 0.2}
	_, err := breaker.New("kafka:orders", p, breaker.WithRandom(nil))
	if err == nil || !strings.Contains(err.Error(), "nil random source") {
		t.Fatalf("New with WithRandom(nil) = %v; want an error naming the nil random source", err)
	}
}

// validWindowPolicy is a valid window-mode policy the bounds table starts from.
func validWindowPolicy() breaker.Policy {
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
		p := validWindowPolicy()
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

// BreakAfter is BreakDuration doubled per failed probe, capped at MaxBreakDuration:
// a doubling that stays within the maximum is taken as it is, also when it lands one
// nanosecond short of an odd maximum (whose half rounds down to the break before it).
func TestBreakAfterDoublesExactlyBelowAnOddMaximum(t *testing.T) {
	noRandom := func() float64 { panic("random read without Jitter") }
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 2*time.Second + 1}
	for probes, want := range []time.Duration{time.Second, 2 * time.Second, 2*time.Second + 1, 2*time.Second + 1} {
		if got := backend.BreakAfter(p, probes, noRandom); got != want {
			t.Errorf("BreakAfter(%d) with a maximum of %v = %v, want %v", probes, p.MaxBreakDuration, got, want)
		}
	}
}

// Normalized writes out each "0 means" default and keeps every value that was set.
func TestNormalizedWritesOutEachDefault(t *testing.T) {
	zero := breaker.Policy{FailureThreshold: 1, BreakDuration: 3 * time.Second, RampDuration: time.Minute}
	got := backend.Normalize(zero)
	want := zero
	want.HalfOpenMaxProbes, want.SuccessesToClose, want.ProbeLease = 1, 1, 3*time.Second
	want.HalfOpenRetryDelay, want.MaxBreakDuration = time.Second, 3*time.Second
	want.RampFloor, want.RampAggression = 0.1, 1
	if got != want {
		t.Fatalf("Normalized of defaults:\n got %+v\nwant %+v", got, want)
	}

	set := breaker.Policy{FailureThreshold: 1, BreakDuration: 3 * time.Second, HalfOpenMaxProbes: 4, SuccessesToClose: 2,
		ProbeLease: 5 * time.Second, HalfOpenRetryDelay: 7 * time.Millisecond, MaxBreakDuration: time.Minute,
		RampDuration: time.Minute, RampFloor: 0.3, RampAggression: 2}
	if got := backend.Normalize(set); got != set {
		t.Fatalf("Normalized changed set values:\n got %+v\nwant %+v", got, set)
	}
	if got := backend.Normalize(breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}); got.RampFloor != 0 || got.RampAggression != 0 {
		t.Fatalf("Normalized without a ramp wrote ramp defaults: floor %v aggression %v", got.RampFloor, got.RampAggression)
	}
}

// BreakAfter doubles BreakDuration per failed probe up to MaxBreakDuration, then
// spreads it by Jitter, drawing a random number only when Jitter is set.
func TestBreakAfterDoublesUpToTheMaximumThenJitters(t *testing.T) {
	noRandom := func() float64 { t.Fatal("random called without Jitter"); return 0 }
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 8 * time.Second}
	for probes, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second} {
		if got := backend.BreakAfter(p, probes, noRandom); got != want {
			t.Errorf("BreakAfter(%d) = %v, want %v", probes, got, want)
		}
	}
	capped := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 3 * time.Second}
	if got := backend.BreakAfter(capped, 2, noRandom); got != 3*time.Second {
		t.Errorf("BreakAfter(2) capped at 3s = %v", got)
	}
	if got := backend.BreakAfter(breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, 5, noRandom); got != time.Second {
		t.Errorf("BreakAfter(5) without MaxBreakDuration = %v, want 1s", got)
	}
	if got := backend.BreakAfter(breaker.Policy{}, 0, noRandom); got != 1 {
		t.Errorf("BreakAfter of a zero BreakDuration = %v, want 1ns", got)
	}
	j := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 8 * time.Second, Jitter: 0.5}
	for _, c := range []struct {
		probes int
		r      float64
		want   time.Duration
	}{
		{0, 0.75, 1250 * time.Millisecond},
		{0, 0, 500 * time.Millisecond},
		{0, 0.5, time.Second},
		{1, 0.25, 1500 * time.Millisecond},
	} {
		if got := backend.BreakAfter(j, c.probes, func() float64 { return c.r }); got != c.want {
			t.Errorf("BreakAfter(%d) with random %v = %v, want %v", c.probes, c.r, got, c.want)
		}
	}
}

// Without a ramp RampShare is 1 for any time since the close, also a time before it
// (a backend whose clock is behind the one that closed the circuit), as it is from a
// ramp's end on, however long after it.
func TestRampShareWithoutARampIsOne(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}
	for _, since := range []time.Duration{-time.Second, 0, time.Hour} {
		if got := backend.RampShare(p, since); got != 1 {
			t.Fatalf("RampShare(%v) without a ramp = %v, want 1", since, got)
		}
	}
	p.RampDuration = time.Minute
	for _, since := range []time.Duration{time.Minute, 2 * time.Minute, time.Hour} {
		if got := backend.RampShare(p, since); got != 1 {
			t.Fatalf("RampShare(%v) of a one-minute ramp = %v, want 1", since, got)
		}
	}
}
