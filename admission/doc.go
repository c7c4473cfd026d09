// Package admission decides whether a call to a destination that is up may start
// now, and learns from how it ended: admission control for broker publishers.
//
// A circuit breaker (package breaker) answers a different question: whether the
// destination is up at all. Admission control works while it is, and bounds what this
// process sends to what the destination can take:
//
//   - [Limiter] is an adaptive concurrency limit in messages, in the spirit of
//     Netflix's Gradient2 and Envoy's adaptive concurrency filter: it learns the
//     destination's healthy latency, contracts as latency rises or calls are dropped,
//     and explores upward again when latency falls. A call over the limit is refused
//     at once with a [*LimitError] whose NotBefore says when to come back; nothing
//     waits.
//   - Priorities ([Online], [Bulk]; [WithPriority] marks a context): bulk work such as
//     an outbox drain holds a budget of its own that yields first under pressure, and
//     the outbox sizes its batches by [Limiter.BulkHeadroom].
//   - [Throttle] is client-side adaptive throttling: it refuses calls in proportion to
//     what the destination stopped accepting over a short window ([ThrottlePolicy]),
//     so that a brownout keeps the goodput the destination can give ([Policy].Throttle,
//     on in [DefaultPolicy]).
//
// A call is made in two steps: [Limiter.Acquire] returns a [Slot], and the caller
// releases it once with the call's [Result]: Success (an answer, and its latency),
// Failure (an error answer), Dropped (no answer before a deadline or timeout) or
// Ignored (nothing learned: the caller gave up, the message was refused for a reason
// of its own, or the call started with too little time to be judged).
//
// Admission is kept per process and never shared: each replica bounds its own calls in
// flight by the latency it sees. A registry (package registry) makes one controller
// per destination from the destination's [Policy] ([DefaultPolicy] to start from),
// takes a slot after the circuit admitted a call (an open circuit costs nothing more,
// and a circuit's probes are never refused here), and releases it when the call ends.
//
// Every refusal matches [ErrRefused] (errors.Is): a [*LimitError] also matches
// [ErrOverLimit], a [*ThrottleError] [ErrThrottled].
//
// Cost: Acquire is lock-free and allocation-free (atomics and one clock read); a
// release reads the clock and, at most once per LimitPolicy.Window, takes a mutex to
// move the limit. A refusal allocates at most once per millisecond of NotBefore.
//
// The package imports only the standard library.
//
// # Example
//
//	lim := admission.NewLimiter(admission.DefaultPolicy().Limit, nil)
//	slot, err := lim.Acquire(len(msgs), admission.PriorityOf(ctx))
//	if err != nil {
//		return err // a *LimitError: come back after its NotBefore
//	}
//	err = publish(ctx, msgs)
//	slot.Release(admission.Success) // or Failure, Dropped, Ignored
package admission
