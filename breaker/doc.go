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
// a share of calls that rises to all of them over the ramp (see [Policy.RampShare]),
// and turns the others away with an [*OpenError] matching ErrRamping whose NotBefore
// spreads the callers out.
//
// Cost: on a closed circuit in consecutive mode, Acquire and Complete(Success) take
// no lock, read no clock and allocate nothing; a rejection by an open circuit reads
// the clock once and allocates nothing. Window mode, slow-call timing, MaxInFlight and
// overrides each add the work they need, and nothing more.
//
// The package imports only the standard library.
package breaker
