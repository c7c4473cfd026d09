package breaker_test

import (
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
)

// brkCompletion is one call a backend's Completer received.
type brkCompletion struct {
	info breaker.PermitInfo
	o    breaker.Outcome
	err  error
	with bool // through CompletePermitWith
}

// brkBackend is a Completer that records what its permits report.
type brkBackend struct{ got []brkCompletion }

func (c *brkBackend) CompletePermit(info breaker.PermitInfo, o breaker.Outcome) bool {
	c.got = append(c.got, brkCompletion{info: info, o: o})
	return o != breaker.Rejected
}

// brkErrBackend is a brkBackend that also takes the error of a failed call.
type brkErrBackend struct{ brkBackend }

func (c *brkErrBackend) CompletePermitWith(info breaker.PermitInfo, o breaker.Outcome, err error) bool {
	c.got = append(c.got, brkCompletion{info: info, o: o, err: err, with: true})
	return true
}

func (c *brkBackend) want(t *testing.T, want ...brkCompletion) {
	t.Helper()
	if len(c.got) != len(want) {
		t.Fatalf("backend got %+v, want %+v", c.got, want)
	}
	for i := range want {
		g, w := c.got[i], want[i]
		if g.info != w.info || g.o != w.o || g.with != w.with || !errors.Is(g.err, w.err) || (g.err == nil) != (w.err == nil) {
			t.Fatalf("completion %d: got %+v, want %+v", i, g, w)
		}
	}
	c.got = nil
}

// A backend's permit reports its first completion, with the info it was made with,
// through the right method: the error of a Failure reaches an ErrorCompleter, every
// other completion (other outcomes, a nil error, a plain Completer, Drop as Neutral)
// reaches CompletePermit, and later completions reach nothing.
func TestBackendPermitsReportTheirFirstCompletion(t *testing.T) {
	boom := errors.New("broker said no")
	info := breaker.PermitInfo{Generation: 7, Probe: true, Lease: 42}
	plain := breaker.PermitInfo{Generation: 3, Lease: 9}

	var eb brkErrBackend
	p := breaker.NewPermit(&eb, info)
	if !p.Probe() || p.Generation() != 7 || p.Bypass() {
		t.Fatalf("permit Probe %v Generation %d Bypass %v, want true 7 false", p.Probe(), p.Generation(), p.Bypass())
	}
	if !p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("first CompleteWith returned false")
	}
	if p.CompleteWith(breaker.Failure, boom) || p.Complete(breaker.Success) || p.CompleteMissed(boom) {
		t.Fatal("a second completion returned true")
	}
	eb.want(t, brkCompletion{info: info, o: breaker.Failure, err: boom, with: true})

	p = breaker.NewPermit(&eb, plain)
	if p.Probe() {
		t.Fatal("a permit made without Probe is a probe")
	}
	p.CompleteWith(breaker.Failure, nil)
	eb.want(t, brkCompletion{info: plain, o: breaker.Failure})
	breaker.NewPermit(&eb, plain).CompleteWith(breaker.Success, boom)
	eb.want(t, brkCompletion{info: plain, o: breaker.Success})

	var b brkBackend
	p = breaker.NewPermit(&b, info)
	if !p.CompleteWith(breaker.Failure, boom) || p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("CompleteWith on a plain Completer: want true once")
	}
	b.want(t, brkCompletion{info: info, o: breaker.Failure})

	p = breaker.NewPermit(&b, plain)
	if !p.CompleteMissed(boom) || p.CompleteMissed(boom) || p.Complete(breaker.Success) {
		t.Fatal("CompleteMissed: want true once, then nothing")
	}
	b.want(t, brkCompletion{info: plain, o: breaker.Failure})
	if breaker.NewPermit(&b, plain).Complete(breaker.Rejected) {
		t.Fatal("Complete returned true where the backend said false")
	}
	b.want(t, brkCompletion{info: plain, o: breaker.Rejected})
}

// Only Success and Failure are evidence about the dependency.
func TestOnlySuccessAndFailureCount(t *testing.T) {
	for o, want := range map[breaker.Outcome]bool{
		breaker.Success: true, breaker.Failure: true,
		breaker.Neutral: false, breaker.Rejected: false, breaker.Unusable: false,
	} {
		if o.Counts() != want {
			t.Errorf("%v.Counts() = %v, want %v", o, o.Counts(), want)
		}
	}
}
