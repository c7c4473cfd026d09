package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/internal/eventq"
	"github.com/brokerguard/brokerguard/internal/window"
)

// Clock tells the time. The default reads time.Now, whose monotonic reading makes the
// circuit immune to wall-clock steps.
type Clock interface{ Now() time.Time }

// Option configures a Breaker.
type Option func(*Breaker)

// WithClock makes the circuit read time from c (tests use a fake clock).
func WithClock(c Clock) Option { return func(b *Breaker) { b.clock = c } }

// WithObserver adds a function called after every transition, outside any lock and in
// transition order. It may call the Breaker.
func WithObserver(f func(Transition)) Option {
	return func(b *Breaker) { b.events.Observe(f) }
}

// WithBypassHook is called once for every call a Shadow or FailOpen circuit admits
// although Enforce would have refused it, outside any lock. FailOpen deployments use it
// as their audit trail.
func WithBypassHook(f func(Bypass)) Option {
	return func(b *Breaker) { b.bypassHooks = append(b.bypassHooks, f) }
}

// Bypass describes a call admitted although the circuit would have refused it.
type Bypass struct {
	Identity   string
	Mode       Mode
	State      State     // the circuit's state when it admitted the call
	Generation uint64    // the generation that admitted it
	NotBefore  time.Time // what the refusal would have said; zero for ErrSaturated
	Err        error     // the refusal: an *OpenError or ErrSaturated
}

// withRandom sets the source of jitter, and of where a ramp's sequence of decisions
// starts: f returns a number in [0, 1). The default is math/rand/v2.Float64; New
// refuses nil. Tests use it (export_test.go) to make jitter and ramps repeatable.
func withRandom(f func() float64) Option { return func(b *Breaker) { b.random = f } }

// Transition reports a change of state. Every transition starts a new generation.
type Transition struct {
	Identity   string
	From, To   State
	Generation uint64 // the generation the transition started
	At         time.Time
	Reason     string // one of the Reason constants
}

// Reasons given in Transition.Reason.
const (
	ReasonFailureThreshold = "failure_threshold" // consecutive failures reached the threshold
	ReasonFailureWindow    = "failure_window"    // the window's failures (and ratio) reached the threshold
	ReasonBreakElapsed     = "break_elapsed"     // the open deadline passed; a probe is admitted
	ReasonProbeSucceeded   = "probe_succeeded"   // enough probes succeeded; the circuit closes
	ReasonProbeFailed      = "probe_failed"      // a probe failed; the circuit opens again
	ReasonForcedOpen       = "forced_open"       // ForceOpen
	ReasonForcedClosed     = "forced_closed"     // ForceClose
	ReasonOverrideExpired  = "override_expired"  // a ForceOpen or ForceClose deadline passed
	ReasonOverrideCleared  = "override_cleared"  // ClearOverride
	ReasonSlowCalls        = "slow_calls"        // slow calls reached their threshold (run or rate)
	ReasonRareTraffic      = "rare_traffic"      // window mode below MinimumCalls: consecutive failures reached the threshold
)

// Circuit is what a registry hands out for one dependency: a local Breaker, or a
// circuit whose state is shared with other processes.
type Circuit interface {
	Acquire(ctx context.Context) (Permit, error)
	Snapshot() Snapshot
}

// Breaker is a circuit kept in this process (scope LocalProcess). It is safe for
// concurrent use. Create it with New.
type Breaker struct {
	identity string
	cfg      atomic.Pointer[config] // the policy in force; Reconfigure replaces it (reconfigure.go)
	clock    Clock                  // nil: time.Since(epoch), which skips a wall-clock read
	epoch    time.Time
	random   func() float64

	cur         atomic.Pointer[phase] // the live generation
	inFlight    atomic.Int64          // admitted, uncompleted permits; counted only when MaxInFlight > 0
	bypassed    atomic.Uint64         // calls admitted that Enforce would have refused
	rampRefused atomic.Uint64         // calls a ramp turned away (or, not under Enforce, would have)

	bypassHooks []func(Bypass)

	// mu serializes transitions and guards the fields below it, the half-open fields
	// of the live phase, and window-mode recording.
	mu           sync.Mutex
	win          *window.Window // window mode evidence
	slowWin      *window.Window // window mode slow-call evidence (slow.go), with SlowCallDuration
	slow         slowState      // slow calls and their baseline (slow.go)
	runStart     int64          // window mode: when the current run of failures began (slow.go)
	failedProbes int            // consecutive failed probes since the circuit last closed
	// errorProbes counts those of them that failed with an error answer: only they
	// lengthen the break (missed probes are followed by a short one, failedPhase).
	errorProbes int
	// unhealthy says an outage is in progress (the circuit opened and has not closed
	// since), and unhealthySince when it began; see noteHealth.
	unhealthy      bool
	unhealthySince int64

	lastFailure atomic.Pointer[failureNote] // the last failure completed with its error

	events eventq.Queue[Transition]
}

// phase is one generation of the circuit. Its identity is its generation: a permit
// counts only while the phase that admitted it is the live one.
type phase struct {
	b        *Breaker
	gen      uint64
	state    State
	override Override
	// admitAll marks a closed phase whose admission needs no clock, no lock and no
	// in-flight accounting; plainSuccess one where a Success only resets the
	// consecutive count. Together they are the hot path. A ramping phase is plain but
	// sets admitAll only when its ramp is over; before that it is false, and the
	// phase is otherwise immutable.
	admitAll            atomic.Bool
	plain, plainSuccess bool
	deadline            int64      // Open: when a probe may be admitted; ForcedClosed: when the hold ends
	reject              *OpenError // Open: the one rejection handed to every caller of this generation
	failures            atomic.Int64
	frozen              window.Counts // evidence held when the circuit left closed

	// ramp paces a closed phase entered from half-open (Policy.RampDuration), from
	// rampStart until rampEnd; nil otherwise.
	ramp               *ramp
	rampStart, rampEnd int64

	probes    []probe // HalfOpen, guarded by b.mu
	successes int     // HalfOpen, guarded by b.mu
	// missed marks an Open phase whose break is a missed deadline's (missed.go), and
	// the HalfOpen phase after it: its refusals name the next Window, not the lease.
	missed bool
}

type probe struct {
	tok      *token
	seq      uint64
	admitted int64
	expires  int64
}

// New returns a closed circuit named identity, or an error naming the policy field
// that is wrong. New refuses scopes other than LocalProcess: shared scopes need a
// backend that can keep one state for several processes.
func New(identity string, p Policy, opts ...Option) (*Breaker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Scope != LocalProcess {
		return nil, &PolicyError{Field: "Scope", Reason: "is " + p.Scope.String() + ", which a local breaker cannot provide; use a backend for that scope"}
	}
	b := &Breaker{identity: identity, random: rand.Float64}
	b.cfg.Store(newConfig(p))
	for _, o := range opts {
		o(b)
	}
	if b.random == nil {
		// Jitter is drawn while the lock is held: a nil source would panic there.
		return nil, fmt.Errorf("breaker: circuit %q: a nil random source", identity)
	}
	if b.clock != nil {
		b.epoch = b.clock.Now()
	} else {
		b.epoch = time.Now()
	}
	if b.conf().windowed {
		b.win = window.New(int64(b.conf().policy.FailureWindow))
		if b.conf().policy.SlowCallDuration > 0 {
			b.slowWin = window.New(int64(b.conf().policy.FailureWindow))
		}
	}
	b.cur.Store(b.closedPhase(1, 0, NoOverride, 0))
	return b, nil
}

// Policy returns the circuit's policy with defaults written out.
func (b *Breaker) Policy() Policy { return b.conf().policy }

func (b *Breaker) now() int64 {
	if b.clock == nil {
		return int64(time.Since(b.epoch))
	}
	return max(int64(b.clock.Now().Sub(b.epoch)), 0)
}

func (b *Breaker) timeAt(n int64) time.Time { return b.epoch.Add(time.Duration(n)) }

func (b *Breaker) nanosAt(t time.Time) int64 { return max(int64(t.Sub(b.epoch)), 0) }

// Acquire asks to make one call. On success the caller must Complete the permit
// exactly once with the call's outcome. A rejection is an *OpenError (errors.Is
// ErrOpen) whose NotBefore says when to come back, or ErrSaturated; a context that has
// already ended returns its error. A rejection changes nothing in the circuit.
func (b *Breaker) Acquire(ctx context.Context) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	ph := b.cur.Load()
	if ph.admitAll.Load() {
		t := tokens.Get().(*token)
		return Permit{tok: t, seq: t.seq.Load(), ph: ph, gen: ph.gen}, nil
	}
	// The open rejection, inline: one monotonic clock read, no lock, no allocation.
	if ph.state == Open && b.conf().policy.Mode == Enforce && b.clock == nil && int64(time.Since(b.epoch)) < ph.deadline {
		return Permit{}, ph.reject
	}
	return b.acquireSlow(ph)
}

func (b *Breaker) acquireSlow(ph *phase) (Permit, error) {
	now := b.now()
	for {
		switch {
		case ph.state == Open && now < ph.deadline:
			return b.refuse(ph, now, ph.reject)
		case ph.state == Closed && (ph.override == NoOverride || now < ph.deadline):
			return b.acquireClosed(ph, now)
		}
		// The phase must change (a deadline passed) or a probe slot is wanted: both
		// need the lock.
		b.mu.Lock()
		if cur := b.cur.Load(); cur != ph {
			b.mu.Unlock()
			ph = cur
			continue
		}
		switch ph.state {
		case Closed: // a ForceClose ended
			ph = b.enter(ph, b.closedPhase(ph.gen+1, now, NoOverride, 0), now, ReasonOverrideExpired)
			b.mu.Unlock()
			b.events.Flush()
			continue
		case Open: // the break (or a ForceOpen) ended: the first caller becomes the probe
			reason := ReasonBreakElapsed
			if ph.override == ForcedOpen {
				reason = ReasonOverrideExpired
			}
			ph = b.enter(ph, b.halfOpenPhase(ph), now, reason)
		}
		p, err := b.acquireProbe(ph, now)
		b.mu.Unlock()
		b.events.Flush()
		if err != nil {
			return b.refuse(ph, now, err)
		}
		return p, nil
	}
}

// acquireClosed admits a call into the closed phase ph, unless its ramp or
// MaxInFlight turns it away.
func (b *Breaker) acquireClosed(ph *phase, now int64) (Permit, error) {
	bound := int64(b.conf().policy.MaxInFlight) // read once: a Reconfigure may change it meanwhile
	limit := bound
	r, since := ph.ramp, time.Duration(now-ph.rampStart)
	if r != nil && now >= ph.rampEnd {
		// The ramp is over: a plain phase goes back to the hot path for good.
		if ph.plain {
			ph.admitAll.Store(true)
		}
		r = nil
	}
	if r != nil {
		share, refusal := r.admit(since)
		if refusal != nil {
			b.rampRefused.Add(1)
			return b.refuse(ph, now, refusal)
		}
		if limit > 0 {
			// The in-flight bound rises with the share, from at least one call.
			limit = max(int64(share*float64(limit)), 1)
		}
	}
	p, err := b.admit(ph, now, 0, bound, limit)
	if err == errOverRamp { // only a ramp lowers the limit
		b.rampRefused.Add(1)
		err = r.refuse(since)
	}
	if err != nil {
		return b.refuse(ph, now, err)
	}
	return p, nil
}

// refuse returns the refusal err under Enforce; under Shadow and FailOpen it admits
// the call as a bypass instead (FailOpen still enforces MaxInFlight), counts it and
// tells the bypass hooks. A bypass takes no in-flight slot.
func (b *Breaker) refuse(ph *phase, now int64, err error) (Permit, error) {
	mode := b.conf().policy.Mode
	if mode == Enforce || mode == FailOpen && err == ErrSaturated {
		return Permit{}, err
	}
	b.bypassed.Add(1)
	bp := Bypass{Identity: b.identity, Mode: mode, State: ph.state, Generation: ph.gen, Err: err}
	if oe, ok := err.(*OpenError); ok {
		bp.NotBefore = oe.NotBefore
	}
	for _, f := range b.bypassHooks {
		f(bp)
	}
	return ph.permit(now, flagBypass), nil
}

// acquireProbe admits a probe into the half-open phase ph or says when to come back.
// It requires b.mu held.
func (b *Breaker) acquireProbe(ph *phase, now int64) (Permit, error) {
	ph.reclaimLeases(now)
	if len(ph.probes) >= b.conf().policy.HalfOpenMaxProbes {
		// Come back when a slot may free up: a probe's lease ends, or a probe fails and
		// lets the next one in (missed.go), whichever comes first; and not before the
		// retry delay, or after a missed deadline the probes' gap.
		earliest := int64(math.MaxInt64)
		for _, pr := range ph.probes {
			earliest = min(earliest, pr.expires, b.nextProbe(pr.admitted))
		}
		floor := int64(b.conf().policy.HalfOpenRetryDelay)
		if ph.missed {
			floor = b.probeGap()
		}
		notBefore := max(now+floor, earliest)
		return Permit{}, newOpenError(b.identity, b.conf().policy.Scope, b.timeAt(notBefore))
	}
	bound := int64(b.conf().policy.MaxInFlight)
	p, err := b.admit(ph, now, flagProbe, bound, bound)
	if err == nil {
		ph.probes = append(ph.probes, probe{tok: p.tok, seq: p.seq, admitted: now, expires: now + int64(b.conf().policy.ProbeLease)})
	}
	return p, err
}

// errOverRamp is admit's refusal of a call over a ramp's in-flight bound but within
// MaxInFlight; the caller turns it into the ramp's refusal.
var errOverRamp = errors.New("breaker: over the ramp's in-flight bound")

// admit hands out a permit of ph after taking an in-flight slot when the policy
// bounds them (bound, the MaxInFlight the caller read); limit, at most bound, is the
// bound now. The slot is taken with a
// compare-and-swap, never added and taken back, so that the count never shows a
// caller who is turned away (Snapshot.InFlight stays within MaxInFlight).
func (b *Breaker) admit(ph *phase, now int64, flags uint8, bound, limit int64) (Permit, error) {
	if bound > 0 {
		for {
			n := b.inFlight.Load()
			if n >= bound {
				return Permit{}, ErrSaturated
			}
			if n >= limit {
				return Permit{}, errOverRamp
			}
			if b.inFlight.CompareAndSwap(n, n+1) {
				break
			}
		}
		flags |= flagInFlight
	}
	return ph.permit(now, flags), nil
}

// reclaimLeases frees the slots of probes whose lease ran out. Requires b.mu held.
func (ph *phase) reclaimLeases(now int64) {
	live := ph.probes[:0]
	for _, pr := range ph.probes {
		if now < pr.expires {
			live = append(live, pr)
		}
	}
	clear(ph.probes[len(live):])
	ph.probes = live
}

// complete takes the outcome of a live permit's first completion (the plain closed
// success is handled inline by Permit.Complete).
func (b *Breaker) complete(ph *phase, tok *token, seq uint64, flags uint8, o Outcome, start int64) bool {
	if flags&flagInFlight != 0 {
		b.inFlight.Add(-1)
	}
	slow := o == Success && b.conf().policy.SlowCallDuration > 0 && b.judgeSlow(start, b.now())
	missed := flags&flagMissed != 0 && o == Failure
	if flags&flagProbe != 0 {
		return b.completeProbe(ph, tok, seq, o, missed, start)
	}
	if flags&flagBypass != 0 {
		return b.completeBypass(ph, o, missed, start)
	}
	if ph = b.live(ph); ph == nil || ph.override != NoOverride {
		return false
	}
	if o != Success && o != Failure || !b.conf().counting {
		return true
	}
	if b.conf().windowed {
		return b.recordWindow(ph, o == Failure, slow, missed)
	}
	if o == Success {
		if ph.failures.Load() != 0 {
			ph.failures.Store(0)
		}
		if b.conf().policy.SlowCallDuration > 0 {
			b.recordSlowRun(ph, slow)
		}
		return true
	}
	if ph.failures.Add(1) >= int64(b.conf().policy.FailureThreshold) {
		b.mu.Lock()
		// The live phase's own count decides: a policy change may have replaced ph,
		// with counts restarted or a new threshold (reconfigure.go).
		if ph = b.live(ph); ph != nil && ph.failures.Load() >= int64(b.conf().policy.FailureThreshold) {
			now := b.now()
			b.enter(ph, b.failedPhase(ph, now, 0, missed, now), now, ReasonFailureThreshold)
		}
		b.mu.Unlock()
		b.events.Flush()
	}
	return true
}

// testHookRecordWindow, nil outside tests, runs in recordWindow before it takes the
// lock: where another caller may change the phase after complete's check.
var testHookRecordWindow func()

func (b *Breaker) recordWindow(ph *phase, failure, slow, missed bool) bool {
	if testHookRecordWindow != nil {
		testHookRecordWindow()
	}
	b.mu.Lock()
	if ph = b.live(ph); ph == nil || !b.conf().windowed {
		b.mu.Unlock()
		return false
	}
	now := b.now()
	c := b.win.Record(now, failure)
	run := int64(0) // consecutive failures, for rare traffic (slow.go)
	if failure {
		run = ph.failures.Add(1)
	} else if ph.failures.Load() != 0 {
		ph.failures.Store(0)
	}
	p := b.conf().policy
	switch {
	case failure && c.Failures >= int64(p.FailureThreshold) && c.Calls >= int64(p.MinimumCalls) &&
		(p.FailureRatio == 0 || float64(c.Failures) >= p.FailureRatio*float64(c.Calls)):
		b.enter(ph, b.failedPhase(ph, now, 0, missed, now), now, ReasonFailureWindow)
	case failure && b.rareTraffic(now, c.Calls, run):
		b.enter(ph, b.failedPhase(ph, now, 0, missed, now), now, ReasonRareTraffic)
	case b.slowRateReached(now, slow):
		b.enter(ph, b.failedPhase(ph, now, 0, false, now), now, ReasonSlowCalls)
	}
	b.mu.Unlock()
	b.events.Flush()
	return true
}

func (b *Breaker) completeProbe(ph *phase, tok *token, seq uint64, o Outcome, missed bool, start int64) bool {
	b.mu.Lock()
	i := -1
	if ph = b.live(ph); ph != nil {
		for j, pr := range ph.probes {
			if pr.tok == tok && pr.seq == seq {
				i = j
				break
			}
		}
	}
	if i < 0 { // an older generation, or the lease was reclaimed
		b.mu.Unlock()
		return false
	}
	now := b.now()
	expired := now >= ph.probes[i].expires
	ph.probes = append(ph.probes[:i], ph.probes[i+1:]...)
	if expired {
		b.mu.Unlock()
		return false
	}
	b.probeOutcome(ph, now, o, missed, start)
	b.mu.Unlock()
	b.events.Flush()
	return true
}

// completeBypass takes the outcome of a bypassed call. Only FailOpen's bypasses in a
// half-open circuit count, as probe evidence: Shadow ignores what Enforce would not
// have seen, and an open circuit is serving its break.
func (b *Breaker) completeBypass(ph *phase, o Outcome, missed bool, start int64) bool {
	if b.conf().policy.Mode != FailOpen || ph.state != HalfOpen {
		return false
	}
	b.mu.Lock()
	cur := b.live(ph)
	live := cur != nil && cur.state == HalfOpen
	if live {
		b.probeOutcome(cur, b.now(), o, missed, start)
	}
	b.mu.Unlock()
	b.events.Flush()
	return live
}

// probeOutcome applies a probe's outcome to the half-open phase ph; missed says a
// Failure was a missed deadline (Permit.CompleteMissed), and start is when the probe
// was admitted. Requires b.mu held.
func (b *Breaker) probeOutcome(ph *phase, now int64, o Outcome, missed bool, start int64) {
	switch o {
	case Success:
		ph.successes++
		if ph.successes >= b.conf().policy.SuccessesToClose {
			b.failedProbes, b.errorProbes = 0, 0
			b.enter(ph, b.recoveredPhase(ph.gen+1, now), now, ReasonProbeSucceeded)
		}
	case Failure:
		b.failedProbes++
		if !missed {
			b.errorProbes++
		}
		b.enter(ph, b.failedPhase(ph, now, b.errorProbes, missed, start), now, ReasonProbeFailed)
	}
}

// failedPhase is the open phase a failure leads to: for one that opens the circuit
// from closed, open for breakAfter(0) from now; for a failed probe admitted at
// start, until breakAfter(errorProbes) after start, and at least a tenth of
// BreakDuration from now (missed.go). missed says the failure was a missed deadline.
// Requires b.mu held (the random source need not be safe for concurrent use).
func (b *Breaker) failedPhase(from *phase, now int64, errorProbes int, missed bool, start int64) *phase {
	brk := int64(b.conf().policy.breakAfter(errorProbes, b.random))
	deadline := now + brk
	if from.state == HalfOpen {
		deadline = max(start+brk, now+b.probeGap())
	}
	ph := b.openPhase(from, now, deadline, NoOverride)
	ph.missed = missed
	return ph
}

// enter makes to the live phase and queues the transition for the observers.
// Requires b.mu held; the caller flushes b.events after unlocking.
func (b *Breaker) enter(from, to *phase, now int64, reason string) *phase {
	b.cur.Store(to)
	b.noteHealth(from.state, to.state, now)
	b.events.Push(Transition{
		Identity: b.identity, From: from.state, To: to.state,
		Generation: to.gen, At: b.timeAt(now), Reason: reason,
	})
	return to
}

func (b *Breaker) closedPhase(gen uint64, now int64, o Override, until int64) *phase {
	if b.conf().windowed {
		b.win.Reset(now)
	}
	ph := &phase{
		b: b, gen: gen, state: Closed, override: o, deadline: until,
		plain:        o == NoOverride && b.conf().policy.MaxInFlight == 0 && b.conf().policy.SlowCallDuration == 0,
		plainSuccess: o == NoOverride && !b.conf().windowed && b.conf().policy.MaxInFlight == 0 && b.conf().policy.SlowCallDuration == 0,
	}
	ph.admitAll.Store(ph.plain)
	return ph
}

// recoveredPhase is the closed phase entered from half-open: it ramps when the
// policy says so. Overrides never ramp: ForceClose admits every call, and the circuit
// a ForceClose leaves has been taking full traffic.
func (b *Breaker) recoveredPhase(gen uint64, now int64) *phase {
	ph := b.closedPhase(gen, now, NoOverride, 0)
	if ph.ramp = newRamp(b.identity, b.conf().policy, b.timeAt(now), uint64(b.random()*0x1p64)); ph.ramp != nil {
		ph.rampStart, ph.rampEnd = now, now+int64(b.conf().policy.RampDuration)
		ph.admitAll.Store(false)
	}
	return ph
}

func (b *Breaker) openPhase(from *phase, now, deadline int64, o Override) *phase {
	return &phase{
		b: b, gen: from.gen + 1, state: Open, override: o, deadline: deadline,
		reject: newOpenError(b.identity, b.conf().policy.Scope, b.timeAt(deadline)),
		frozen: b.evidence(from, now),
	}
}

func (b *Breaker) halfOpenPhase(from *phase) *phase {
	return &phase{b: b, gen: from.gen + 1, state: HalfOpen, frozen: from.frozen, missed: from.missed}
}

// evidence returns the failure evidence held by ph. Requires b.mu held.
func (b *Breaker) evidence(ph *phase, now int64) window.Counts {
	switch {
	case ph.state != Closed:
		return ph.frozen
	case b.conf().windowed:
		return b.win.Totals(now)
	}
	return window.Counts{Failures: ph.failures.Load()}
}

// ForceOpen holds the circuit open until the given time: every call is rejected and
// outcomes change nothing. When the hold ends the next Acquire is a half-open probe.
func (b *Breaker) ForceOpen(until time.Time) {
	b.mu.Lock()
	ph, now := b.cur.Load(), b.now()
	b.enter(ph, b.openPhase(ph, now, b.nanosAt(until), ForcedOpen), now, ReasonForcedOpen)
	b.mu.Unlock()
	b.events.Flush()
}

// ForceClose holds the circuit closed until the given time: every call is admitted
// (MaxInFlight still applies) and outcomes change nothing. When the hold ends the
// circuit is closed with no failure evidence.
func (b *Breaker) ForceClose(until time.Time) {
	b.mu.Lock()
	ph, now := b.cur.Load(), b.now()
	b.enter(ph, b.closedPhase(ph.gen+1, now, ForcedClosed, b.nanosAt(until)), now, ReasonForcedClosed)
	b.mu.Unlock()
	b.events.Flush()
}

// ClearOverride ends a ForceOpen or ForceClose now, as if its deadline had passed: a
// cleared ForceOpen admits a probe next, a cleared ForceClose is closed with no
// failure evidence. Without an override it does nothing.
func (b *Breaker) ClearOverride() {
	b.mu.Lock()
	ph, now := b.cur.Load(), b.now()
	switch ph.override {
	case ForcedOpen:
		b.enter(ph, b.halfOpenPhase(ph), now, ReasonOverrideCleared)
	case ForcedClosed:
		b.enter(ph, b.closedPhase(ph.gen+1, now, NoOverride, 0), now, ReasonOverrideCleared)
	}
	b.mu.Unlock()
	b.events.Flush()
}

// State returns the circuit's state. An open circuit whose deadline has passed reports
// Open until the next Acquire moves it to half-open.
func (b *Breaker) State() State { return b.cur.Load().state }

// Snapshot is a point-in-time view of a circuit.
type Snapshot struct {
	Identity   string
	Scope      Scope
	State      State
	Generation uint64
	// Failures is the failure evidence: consecutive failures, or failures in the
	// window, while closed; the evidence that opened the circuit while it is not.
	// Calls, in window mode, the calls in the window.
	Failures, Calls int
	// InFlight counts admitted, uncompleted permits when the policy sets MaxInFlight
	// (counting them otherwise would cost the hot path a shared write); Probes counts
	// probes in flight while half-open.
	InFlight, Probes int
	// NotBefore is the open deadline while open; zero otherwise.
	NotBefore time.Time
	// Override is the operator's hold, if any, and OverrideUntil when it ends.
	Override      Override
	OverrideUntil time.Time
	// Mode is the policy's mode; Bypassed counts the calls it admitted that Enforce
	// would have refused (Shadow's would-rejects, FailOpen's bypasses) since creation.
	Mode     Mode
	Bypassed uint64
	// RampUntil is when the ramp after the last recovery ends, while it lasts (zero
	// otherwise), and RampShare the share of calls it admits now (1 without a ramp).
	// RampRefused counts the calls ramps turned away since creation (under Shadow or
	// FailOpen: would have turned away, and admitted as bypasses).
	RampUntil   time.Time
	RampShare   float64
	RampRefused uint64
	// Unusable, when not empty, says why the destination cannot take messages
	// although its broker answers (the text of the last error classified
	// Unusable), and UnusableSince since when; the circuit stays closed for it. A
	// circuit leaves both empty: the registry that guards the calls fills them in
	// (registry.Registry.Snapshots, Snapshot) and clears them at the next call
	// that reaches the destination.
	Unusable      string
	UnusableSince time.Time
	// DegradedSince is set on a shared circuit whose store refused to record its
	// evidence: since then this replica also decides on evidence of its own, and State
	// may be a local break (see sharedstate.KeepLocal). Zero otherwise.
	DegradedSince time.Time

	// What people on call ask first: why, and since when.
	//
	// LastError is the error text of the last failure completed with its error
	// (Permit.CompleteWith), redacted and at most 512 bytes (backend.ErrorText), and LastErrorAt when it was
	// completed; empty and zero until then, and kept after the circuit closes.
	// UnhealthySince is when the current outage began: the circuit's first opening
	// since it was last closed (a ForceOpen of a closed circuit included). Probe
	// cycles do not move it; it is zero while the circuit is closed. FailedProbes
	// counts the probes that failed in a row since the circuit last closed.
	LastError      string
	LastErrorAt    time.Time
	UnhealthySince time.Time
	FailedProbes   int
}

// Snapshot returns a consistent view of the circuit.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	ph, now := b.cur.Load(), b.now()
	ev := b.evidence(ph, now)
	s := Snapshot{
		Identity: b.identity, Scope: b.conf().policy.Scope, State: ph.state, Generation: ph.gen,
		Failures: int(ev.Failures), Calls: int(ev.Calls),
		InFlight: int(b.inFlight.Load()), Override: ph.override,
		Mode: b.conf().policy.Mode, Bypassed: b.bypassed.Load(),
		RampShare: 1, RampRefused: b.rampRefused.Load(),
	}
	if ph.ramp != nil && now < ph.rampEnd {
		s.RampUntil = b.timeAt(ph.rampEnd)
		s.RampShare = b.conf().policy.rampShare(time.Duration(now - ph.rampStart))
	}
	if ph.state == HalfOpen {
		ph.reclaimLeases(now)
		s.Probes = len(ph.probes)
	}
	if ph.state == Open {
		s.NotBefore = b.timeAt(ph.deadline)
	}
	if ph.override != NoOverride {
		s.OverrideUntil = b.timeAt(ph.deadline)
	}
	b.fillHealth(&s)
	return s
}
