package backend_test

import (
	"errors"
	"runtime"
	"testing"
	"weak"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// completion is one call a backend's Completer received.
type completion struct {
	info backend.PermitInfo
	o    breaker.Outcome
	err  error
	with bool // through CompletePermitWith
}

// recordingBackend is a Completer that records what its permits report.
type recordingBackend struct{ got []completion }

func (c *recordingBackend) CompletePermit(info backend.PermitInfo, o breaker.Outcome) bool {
	c.got = append(c.got, completion{info: info, o: o})
	return o != breaker.Rejected
}

// recordingErrBackend is a recordingBackend that also takes the error of a failed call.
type recordingErrBackend struct{ recordingBackend }

func (c *recordingErrBackend) CompletePermitWith(info backend.PermitInfo, o breaker.Outcome, err error) bool {
	c.got = append(c.got, completion{info: info, o: o, err: err, with: true})
	return true
}

func (c *recordingBackend) want(t *testing.T, want ...completion) {
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
	info := backend.PermitInfo{Generation: 7, Probe: true, Lease: 42}
	plain := backend.PermitInfo{Generation: 3, Lease: 9}

	var eb recordingErrBackend
	p := backend.NewPermit(&eb, info)
	if !p.Probe() || p.Generation() != 7 || p.Bypass() {
		t.Fatalf("permit Probe %v Generation %d Bypass %v, want true 7 false", p.Probe(), p.Generation(), p.Bypass())
	}
	if !p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("first CompleteWith returned false")
	}
	if p.CompleteWith(breaker.Failure, boom) || p.Complete(breaker.Success) || p.CompleteMissed(boom) {
		t.Fatal("a second completion returned true")
	}
	eb.want(t, completion{info: info, o: breaker.Failure, err: boom, with: true})

	p = backend.NewPermit(&eb, plain)
	if p.Probe() {
		t.Fatal("a permit made without Probe is a probe")
	}
	p.CompleteWith(breaker.Failure, nil)
	eb.want(t, completion{info: plain, o: breaker.Failure})
	backend.NewPermit(&eb, plain).CompleteWith(breaker.Success, boom)
	eb.want(t, completion{info: plain, o: breaker.Success})

	var b recordingBackend
	p = backend.NewPermit(&b, info)
	if !p.CompleteWith(breaker.Failure, boom) || p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("CompleteWith on a plain Completer: want true once")
	}
	b.want(t, completion{info: info, o: breaker.Failure})

	p = backend.NewPermit(&b, plain)
	if !p.CompleteMissed(boom) || p.CompleteMissed(boom) || p.Complete(breaker.Success) {
		t.Fatal("CompleteMissed: want true once, then nothing")
	}
	b.want(t, completion{info: plain, o: breaker.Failure})
	if backend.NewPermit(&b, plain).Complete(breaker.Rejected) {
		t.Fatal("Complete returned true where the backend said false")
	}
	b.want(t, completion{info: plain, o: breaker.Rejected})
}

// keepingBackend is a backend Completer that keeps the outcomes it was given. (It holds
// a pointer, so that it is not a tiny allocation: one of those lives as long as its
// neighbours in a shared block, and a weak pointer would not show it collected.)
type keepingBackend struct{ got []breaker.Outcome }

func (c *keepingBackend) CompletePermit(_ backend.PermitInfo, o breaker.Outcome) bool {
	c.got = append(c.got, o)
	return true
}

// completeEveryWayAndCollect makes backend permits, then completes them in every way that
// reaches the backend's CompletePermit (Complete, CompleteMissed, CompleteWith without an
// error), and returns weak pointers to their backends, which nothing else holds once
// this returns. The permits are all made before any completes, so that each has its
// own token (a token lent again gets the next backend, which would hide the last).
func completeEveryWayAndCollect(t *testing.T) []weak.Pointer[keepingBackend] {
	complete := []func(breaker.Permit) bool{
		func(p breaker.Permit) bool { return p.Complete(breaker.Success) },
		func(p breaker.Permit) bool { return p.Complete(breaker.Failure) },
		func(p breaker.Permit) bool { return p.CompleteMissed(nil) },
		func(p breaker.Permit) bool { return p.CompleteWith(breaker.Success, nil) },
		func(p breaker.Permit) bool { return p.CompleteWith(breaker.Failure, nil) },
	}
	var (
		cs []*keepingBackend
		ps []breaker.Permit
		ws []weak.Pointer[keepingBackend]
	)
	for i := range 2 * len(complete) {
		c := &keepingBackend{}
		cs, ps = append(cs, c), append(ps, backend.NewPermit(c, backend.PermitInfo{Generation: 1, Lease: uint64(i)}))
		ws = append(ws, weak.Make(c))
	}
	for i, p := range ps {
		if !complete[i%len(complete)](p) || len(cs[i].got) != 1 {
			t.Fatalf("completion %d did not reach the backend once: %v", i, cs[i].got)
		}
	}
	return ws
}

// A completed backend permit gives its token back to the pool without the backend,
// whichever way it was completed: the pool does not keep a Completer (a store, a
// connection) alive after its last permit.
func TestCompletedBackendPermitDoesNotKeepTheBackendInThePool(t *testing.T) {
	ws := completeEveryWayAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("backend %d is still reachable after its permit completed: a pooled token keeps it", i)
		}
	}
}

// keepingErrBackend is a backend Completer that also takes the call's error.
type keepingErrBackend struct{ got []error }

func (c *keepingErrBackend) CompletePermit(backend.PermitInfo, breaker.Outcome) bool { return true }
func (c *keepingErrBackend) CompletePermitWith(_ backend.PermitInfo, _ breaker.Outcome, err error) bool {
	c.got = append(c.got, err)
	return true
}

// completeWithErrorAndCollect completes a backend permit with an error and returns a
// weak pointer to its backend, which nothing else holds once this returns.
func completeWithErrorAndCollect(t *testing.T) weak.Pointer[keepingErrBackend] {
	c := &keepingErrBackend{}
	p := backend.NewPermit(c, backend.PermitInfo{Generation: 1, Lease: 9})
	if !p.CompleteWith(breaker.Failure, errors.New("broker down")) || len(c.got) != 1 {
		t.Fatalf("CompleteWith did not reach the backend with its error: %v", c.got)
	}
	return weak.Make(c)
}

// A completed backend permit gives its token back to the pool without the backend:
// the pool does not keep a Completer (a store, a connection) alive after its last
// permit, also when the permit was completed with its error.
func TestCompleteWithDoesNotKeepTheBackendInThePool(t *testing.T) {
	w := completeWithErrorAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	if w.Value() != nil {
		t.Fatal("the backend is still reachable after its permit completed: a pooled token keeps it")
	}
}
