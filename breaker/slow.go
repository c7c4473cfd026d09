package breaker

import "sync/atomic"

// Slow calls are a rate of their own (Policy.SlowCallDuration): a Success that took
// longer than SlowCallDuration is a slow call, not a failure. It never adds to the
// failure evidence or the failure ratio. Instead:
//
//   - consecutive mode: FailureThreshold slow calls in a row (a fast success resets
//     the run) open the circuit, reason ReasonSlowCalls;
//   - window mode: the circuit opens when the window holds at least MinimumCalls
//     calls, at least FailureThreshold of them slow, and slow/calls reaches
//     SlowCallRatio (0 means 1: every call slow).
//
// Slow calls are judged only once the circuit has a latency baseline: the moment its
// slowBaselineCalls-th success faster than SlowCallDuration completed. Calls admitted
// before that are never slow, so a cold start whose first publishes all take longer
// (connections being opened) refuses nothing, and a dependency that has never been
// fast is left to the deadline rule and admission control.
const slowBaselineCalls = 10

// slowState is a Breaker's slow-call evidence.
type slowState struct {
	fast    atomic.Int64 // successes within SlowCallDuration, until the baseline exists
	readyAt atomic.Int64 // when the baseline was established (nanoseconds since epoch + 1; 0: not yet)
	run     atomic.Int64 // consecutive slow calls (consecutive mode)
}

// judgeSlow reports whether a Success of a call admitted at start and completed at
// now is a slow call that counts, and learns the baseline from fast ones.
func (b *Breaker) judgeSlow(start, now int64) bool {
	s := &b.slow
	if now-start <= int64(b.conf().policy.SlowCallDuration) {
		if s.readyAt.Load() == 0 && s.fast.Add(1) >= slowBaselineCalls {
			s.readyAt.CompareAndSwap(0, now+1)
		}
		return false
	}
	ready := s.readyAt.Load()
	return ready != 0 && start >= ready-1
}

// recordSlowRun takes a closed, consecutive-mode Success (slow or not) into the run
// of slow calls and opens ph when the run reaches FailureThreshold.
func (b *Breaker) recordSlowRun(ph *phase, slow bool) {
	if !slow {
		if b.slow.run.Load() != 0 {
			b.slow.run.Store(0)
		}
		return
	}
	if b.slow.run.Add(1) < int64(b.conf().policy.FailureThreshold) {
		return
	}
	b.mu.Lock()
	if ph = b.live(ph); ph != nil {
		now := b.now()
		b.slow.run.Store(0)
		b.enter(ph, b.failedPhase(ph, now, 0, false, now), now, ReasonSlowCalls)
	}
	b.mu.Unlock()
	b.events.Flush()
}

// slowRateReached reports, in window mode, whether the window's slow calls open the
// circuit. Requires b.mu held.
func (b *Breaker) slowRateReached(now int64, slow bool) bool {
	if b.slowWin == nil {
		return false
	}
	c := b.slowWin.Record(now, slow)
	p := b.conf().policy
	ratio := p.SlowCallRatio
	if ratio == 0 {
		ratio = 1
	}
	return slow && c.Failures >= int64(p.FailureThreshold) && c.Calls >= int64(p.MinimumCalls) &&
		float64(c.Failures) >= ratio*float64(c.Calls)
}

// rareTraffic reports, in window mode, whether a failure at now opens a window that
// holds fewer than MinimumCalls calls because traffic is too rare to reach it (at one
// call per 10 s a 10 s window holds one): FailureThreshold consecutive failures, and
// either the first of them more than one FailureWindow ago, so that the window had
// its whole span to gather MinimumCalls and did not, or a pace of calls that cannot
// fill a window with MinimumCalls (at one call per 10 s a minute holds six, fewer than
// ten): the run's calls, spread over a whole window at the pace they came, fall short.
// It falls back to consecutive counting, as advised for rare traffic; busy traffic is
// judged by the window alone. consecutive is the run of failures including this one.
// Requires b.mu held.
func (b *Breaker) rareTraffic(now, calls, consecutive int64) bool {
	p := b.conf().policy
	if consecutive == 1 {
		b.runStart = now
	}
	if p.MinimumCalls == 0 || calls >= int64(p.MinimumCalls) || consecutive < int64(p.FailureThreshold) {
		return false
	}
	span := now - b.runStart
	if span >= int64(p.FailureWindow) {
		return true
	}
	// consecutive-1 gaps over span: the calls a window holds at that pace. In floating
	// point: a long run times a long window would overflow.
	return span > 0 && float64(consecutive-1)*float64(p.FailureWindow)/float64(span) < float64(p.MinimumCalls)
}
