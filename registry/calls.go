package registry

import (
	"errors"
	"sync/atomic"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// WithCallCounts makes the registry count every guarded call per destination, by
// result (see CallCounts), for telemetry to read through Report. Counting costs an
// atomic addition per call on a counter its destination's callers share, so it is
// off unless asked for.
func WithCallCounts() Option {
	return func(r *Registry) error {
		r.countCalls = true
		return nil
	}
}

// CallCounts are the calls made through a live circuit since it was created, by
// result. The results say what the circuit made of each call, so that the counts
// agree with it:
//
//   - Published: the call returned no error, or the circuit took it as a Success (a
//     batch of which some messages were published);
//   - Failed: the circuit took the call's outcome as a Failure;
//   - Rejected: the circuit refused the call, which was not made;
//   - Neutral: every other call: outcomes classified Neutral, outcomes the circuit
//     ignored (under ForceClose, Shadow's would-rejects, FailOpen's bypasses of an
//     open circuit, late completions of an older generation), and calls whose
//     context had ended before a permit was taken.
//
// The Probe fields count, by the same results, the calls admitted as half-open
// probes (also counted above).
type CallCounts struct {
	Published, Failed, Rejected, Neutral uint64
	ProbesPublished, ProbesFailed        uint64
	ProbesNeutral                        uint64
}

// Total is the number of calls counted.
func (c CallCounts) Total() uint64 { return c.Published + c.Failed + c.Rejected + c.Neutral }

// CircuitReport is what telemetry reads of one live circuit.
type CircuitReport struct {
	Destination transport.Destination
	Snapshot    breaker.Snapshot
	// Limit is the view of the destination's adaptive limit in this process; zero
	// when its admission control is off.
	Limit admission.LimitStats
	// Throttle is the view of the destination's adaptive throttle in this process:
	// the probability it refuses with, the window's counts and its refusals; zero
	// when the throttle is off.
	Throttle admission.ThrottleStats
	// Calls are zero unless the registry counts calls (WithCallCounts).
	Calls CallCounts
	// IsolatedPartitions lists the destination's partitions isolated now (see
	// Partitions); nil when none is.
	IsolatedPartitions []IsolatedPartition
}

// Report returns a report of every live circuit, in no particular order.
func (r *Registry) Report() []CircuitReport {
	entries := r.entries()
	out := make([]CircuitReport, len(entries))
	for i, e := range entries {
		out[i] = CircuitReport{Destination: e.dest, Snapshot: e.snapshot(), IsolatedPartitions: e.isolatedPartitions()}
		if e.adm != nil {
			out[i].Limit = e.adm.Stats()
		}
		out[i].Throttle = e.thr.Stats()
		if c := e.calls; c != nil {
			out[i].Calls = CallCounts{
				Published: c[published].Load(), Failed: c[failed].Load(),
				Rejected: c[rejected].Load(), Neutral: c[neutral].Load(),
				ProbesPublished: c[probePublished].Load(), ProbesFailed: c[probeFailed].Load(),
				ProbesNeutral: c[probeNeutral].Load(),
			}
		}
	}
	return out
}

// CountsCalls reports whether the registry was built WithCallCounts.
func (r *Registry) CountsCalls() bool { return r.countCalls }

// The counters of callCounts.
const (
	published = iota
	failed
	rejected
	neutral
	probePublished // probePublished+i counts the probes of result i (published, failed, neutral)
	probeFailed
	probeNeutral
	numCallCounters
)

// callCounts are an entry's counters; an entry has none unless WithCallCounts.
type callCounts [numCallCounters]atomic.Uint64

// refused counts a call that Acquire refused with err (what refusal returned) and
// returns err.
func (e *entry) refused(err error) error {
	if e.calls != nil {
		if _, ok := errors.AsType[*RejectedError](err); ok {
			e.calls[rejected].Add(1)
		} else {
			e.calls[neutral].Add(1)
		}
	}
	return err
}

// complete completes p with o (and, for a failure, the call's error, which the
// circuit shows in its snapshot), gives admission control what o says, and counts
// the call by what the circuit made of it.
func (e *entry) complete(p Permit, o breaker.Outcome, err error) bool {
	res := resultOf(o)
	return e.end(p, e.judged(p, o), res, res, err, false)
}

// end is Permit.end, counting the call by what the circuit made of it. With a
// throttle, an error answer is the throttle's alone: it says how much of what is sent
// the destination accepts, not how much it can have in flight, and a brownout's fast
// failures would otherwise contract the limit toward its minimum (a drop-driven
// contraction) and refuse the share the destination still accepts. The limit keeps
// learning from latency and from missed deadlines.
func (e *entry) end(p Permit, o breaker.Outcome, res, thr admission.Result, err error, missed bool) bool {
	switch {
	case o == breaker.Success:
		if e.failing.Load() { // write only when the flag changes
			e.failing.Store(false)
		}
	case o == breaker.Failure || res == admission.Dropped:
		e.failing.Store(true)
	}
	if res == admission.Failure && e.thr != nil {
		res = admission.Ignored
	}
	if testHookEnd != nil {
		testHookEnd(o, res, thr, missed)
	}
	return e.count(p, o, p.end(o, res, thr, err, missed))
}

// count counts a call completed with o by what the circuit made of it (counted:
// what the completion returned), and returns counted.
func (e *entry) count(p Permit, o breaker.Outcome, counted bool) bool {
	if e.calls == nil {
		return counted
	}
	result := neutral
	switch {
	case o == breaker.Success:
		result = published
	case o == breaker.Failure && counted:
		result = failed
	}
	e.calls[result].Add(1)
	if p.Probe() {
		e.calls[probeCounter[result]].Add(1)
	}
	return counted
}

// probeCounter maps a call's result to the counter of probes with that result.
var probeCounter = [...]int{published: probePublished, failed: probeFailed, neutral: probeNeutral}

// Complete completes a permit that Acquire gave for a call to d with the outcome o:
// it gives the admission slot back (Success as an answer, Failure as an error
// answer, any other outcome as nothing learned), completes the circuit's permit as
// breaker.Permit.Complete does, and counts the call (WithCallCounts). Only the
// permit's first completion does anything. It returns whether the circuit took the
// outcome into account (breaker.Permit.Complete's answer).
func (r *Registry) Complete(d transport.Destination, p Permit, o breaker.Outcome) bool {
	return r.CompleteWith(d, p, o, nil)
}

// CompleteWith is Complete with the call's error: a Failure's error becomes the
// circuit's Snapshot.LastError (see breaker.Permit.CompleteWith).
func (r *Registry) CompleteWith(d transport.Destination, p Permit, o breaker.Outcome, err error) bool {
	if e, ok := r.lookup(d); ok {
		return e.complete(p, o, err)
	}
	res := resultOf(o)
	return p.end(o, res, res, err, false)
}

// testHookEnd, when set by a test, is told what each guarded call's end gives the
// circuit (o, and whether as a missed deadline), the limit (res) and the throttle
// (thr). Nil in production.
var testHookEnd func(o breaker.Outcome, res, thr admission.Result, missed bool)

// testHookLookupMissed, when set by a test, runs in lookup after the read map missed
// and before mu is taken: there another caller can promote the entry out of fresh.
// Nil in production.
var testHookLookupMissed func()

// lookup returns d's live entry without creating it.
func (r *Registry) lookup(d transport.Destination) (*entry, bool) {
	if e, ok := (*r.circuits.Load())[d]; ok {
		return e, true
	}
	if testHookLookupMissed != nil {
		testHookLookupMissed()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.fresh[d]
	if !ok { // it may have been promoted since the read above
		e, ok = (*r.circuits.Load())[d]
	}
	return e, ok
}
