package breaker

// Probing a broker that stopped answering. A failed probe reopens the circuit until a
// break after the probe was admitted, not after it ended, and for at least a tenth of
// BreakDuration from its end (probeGap):
//
//   - a broker answering with errors answers a probe at once: probes go out once per
//     break, and the break spares it the calls that would fail anyway;
//   - a hung broker holds a probe until its caller's deadline, which may be longer than
//     the break: the next caller after the gap is the next probe, so the broker
//     carries one call at a time while hung, and a probe is almost always in flight
//     when it answers again; the circuit closes as soon as it does. The gap lets the
//     missed probe's caller leave its Publish before the next probe's caller is
//     admitted, so that two calls are not seen in flight at once.
//
// A probe is never cut short of its caller's deadline, so a broker slow but answering
// within it closes the circuit. Probes that missed their deadlines (CompleteMissed)
// do not count toward the doubling of the break (MaxBreakDuration): only error
// answers do. While such a probe is in flight, refused callers are told to come back
// when the next probe could be admitted, not when the probe's lease ends
// (acquireProbe).
//
// The rule is local: the shared circuits (breaker/sharedstate) complete a missed
// permit as a Failure and keep their break.

// flagMissed marks, on completion only, a Failure that was a missed deadline.
const flagMissed uint8 = 1 << 7

// CompleteMissed completes the permit of a call that its deadline ended before the
// dependency answered, when that counts against the dependency (the registry's
// deadline rule): a Failure, with err recorded as CompleteWith records it (nil records
// nothing), that the circuit knows for a missed deadline rather than an error answer.
// A missed probe does not lengthen the break (missed.go). It returns what Complete
// returns. A permit made by NewPermit completes as CompleteWith(Failure, err) would.
func (p Permit) CompleteMissed(err error) bool { return p.completeFailure(err, flagMissed) }

// probeGap is the least time between a failed probe's end and the next probe: a
// tenth of BreakDuration, at least 1ns.
func (b *Breaker) probeGap() int64 { return max(int64(b.conf().policy.BreakDuration)/10, 1) }

// nextProbe is the earliest the next probe may be admitted should the probe admitted
// at admitted fail: a break after its admission, without jitter's spread (and a gap
// after the failure, which the caller adds). Requires b.mu held.
func (b *Breaker) nextProbe(admitted int64) int64 {
	return admitted + int64(b.conf().policy.breakAfter(b.errorProbes, func() float64 { return 0 }))
}
