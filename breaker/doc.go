// Package breaker is a circuit breaker for one dependency scope, built for the hot
// path of a publisher.
//
// A circuit is closed, open or half-open. Closed, it admits calls and collects
// failure evidence: consecutive failures, or failures inside a trailing window (with
// a minimum number of calls and a failure ratio). At the threshold it opens and
// rejects calls with an [*OpenError] that says when to come back (NotBefore). When
// the break ends, the first caller becomes a probe; its success closes the circuit,
// its failure opens it again for a break that may grow and is spread by jitter.
//
// A call is made in two steps: Acquire returns a [Permit], and the caller completes
// it with the outcome (Success, Failure or Neutral). The permit belongs to the
// generation that admitted it: outcomes that arrive after the circuit moved on, after
// a probe's lease ran out, or a second time, change nothing and Complete reports
// false. That is how late results of slow calls are kept from deciding the state of a
// circuit that has already changed.
//
// Recovery can be paced: with Policy.RampDuration, a circuit closed by a probe admits
// a share of calls that rises to all of them over the ramp (Snapshot.RampShare),
// and turns the others away with an [*OpenError] with Ramping set whose NotBefore
// spreads the callers out.
//
// Cost: on a closed circuit in consecutive mode, Acquire and Complete(Success) take
// no lock, read no clock and allocate nothing; a rejection by an open circuit reads
// the clock once and allocates nothing. Window mode, slow-call timing, MaxInFlight and
// overrides each add the work they need, and nothing more.
//
// The package imports only the standard library.
//
// # What a user needs
//
// Most services never call this package directly: they build a registry
// (registry.New) from a [Policy] and publish through an adapter. What they read here:
//
//   - [DefaultPolicy], the starting point, and [Policy], its fields; [DisabledPolicy]
//     for a circuit turned off on purpose. [Policy.Validate] and [*PolicyError] name a
//     wrong field.
//   - [*OpenError] (matched by [ErrOpen], with its NotBefore), [ErrSaturated] and
//     [ErrUnavailable]: what a refused call returns.
//   - [Snapshot], [State], [Transition], [Mode] and [Override]: what a circuit reports,
//     and how an operator holds it ([Breaker.ForceOpen], [Breaker.ForceClose]).
//   - [New], [Breaker.Acquire], [Permit.Complete] and [Outcome], to guard a call of
//     your own in two steps, without a registry.
//
// # For authors of circuits and shared backends
//
// The rest is for code that implements a circuit rather than uses one: the [Circuit]
// interface the registry takes from a factory; [Clock] and [WithClock] for tests; and
// the transition reasons (ReasonFailureThreshold, ...). What only a backend needs (permits of its own, the rejection and ramp of a circuit, the rules
// that make every backend open, ramp and compare policies alike) is in package
// breaker/backend. Package breaker/circuittest checks an implementation against the
// local breaker's behaviour.
package breaker
