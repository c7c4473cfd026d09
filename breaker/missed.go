package breaker

// Missed deadlines (issue 26): a circuit opened because its dependency stopped
// answering in time, rather than answering with errors, looks for the recovery
// continuously.
//
// A break sized for error answers (seconds to minutes, doubling per failed probe)
// spares a failing dependency the calls that would fail anyway; against a hung one it
// only delays the moment the circuit sees the dependency answer again, by up to the
// whole break. A probe that misses its deadline costs one call in flight for one
// deadline, no more, so with the adaptive limit on (Policy.Limit), whose floor is one
// call in flight, a circuit opened by a missed deadline (Permit.CompleteMissed) stays
// open for one limit Window only, and one reopened by a probe that missed its own
// stays open until one Window after that probe was admitted, and at least a tenth of
// a Window: the next caller after it is the next probe, a tenth of a Window later
// (10ms in RecommendedLimit) when the probe waited a deadline longer than the Window.
// The tenth lets the missed probe's caller leave its Publish before the next probe's
// caller is admitted, so that two calls are not seen in flight at once. Every other
// caller is refused at once, as before (one probe at a time, HalfOpenMaxProbes), told
// to come back in one Window; so the dependency carries one call while hung, probes
// start at most one per Window, and a probe is almost always in flight when the
// dependency answers again: the circuit closes as soon as the dependency answers it.
// A probe is never cut short of its caller's deadline, so a dependency slow but
// answering within it closes the circuit.
// Openings and probe failures on error answers keep their break and its doubling,
// which counts only the probes that failed with an error answer.
//
// The rule is local: the shared circuits (breaker/sharedstate) complete a missed
// permit as a Failure and keep their break.

// flagMissed marks, on completion only, a Failure that was a missed deadline.
const flagMissed uint8 = 1 << 7

// CompleteMissed completes the permit of a call that its deadline ended before the
// dependency answered, when that counts against the dependency (registry.Outcome's
// deadline rule): a Failure, with err recorded as CompleteWith records it (nil
// records nothing), that the circuit knows for a missed deadline rather than an error
// answer. A circuit with an adaptive limit that this Failure opens stays open one
// limit Window instead of its break; one it reopens from half-open, until one Window
// after the probe was admitted and for at least a tenth of a Window (missed.go). It returns
// what Complete returns. A permit made by NewPermit completes as CompleteWith(Failure,
// err) would.
func (p Permit) CompleteMissed(err error) bool { return p.completeFailure(err, flagMissed) }

// missedBreak is one limit Window (at least 1ms): the break after a missed deadline
// that opens a circuit with an adaptive limit, the least time between the starts of
// two of its probes, and the wait its half-open refusals name.
func (b *Breaker) missedBreak() int64 { return int64(b.lim.p.Window) }
