// Package registry gives every broker destination its own circuit and guards
// publishers with them.
//
// A Registry resolves a policy per destination (an exact override, else the
// defaults), creates the destination's circuit on first use and returns the same
// circuit for as long as it lives. The number of live circuits is capped, and idle
// closed circuits may be evicted. Guard wraps a transport.Publisher so that every
// publish acquires a permit first and completes it exactly once.
//
// It imports only packages breaker and transport and the standard library.
//
// # What a user needs
//
// Build one Registry per service, at start-up, with [New] and a policy that opens
// (breaker.DefaultPolicy; New refuses one that never opens unless it says Disabled),
// and share it. Options: [WithOverride] per destination, [WithMaxDestinations],
// [WithIdleEviction], [WithCircuitFactory] for shared circuits, [WithObserver] and
// [WithBypassHook]. Give it to the adapters' constructors, whose publishers are
// already guarded; [Registry.Guard] guards a publisher of your own, and recognises
// one that is already guarded ([Guarded]) instead of guarding it twice. A refused
// publish returns a [*RejectedError] (errors.Is(err, breaker.ErrOpen) sees through it)
// or an error matching [ErrNoMessages] or [ErrTooManyDestinations]. [Registry.Snapshots]
// and [Registry.Lookup] show the circuits; package observe wires telemetry and the
// admin handler to a registry in one call.
//
// # For adapter authors
//
// An adapter that takes permits itself, instead of being wrapped by Guard, uses
// [Registry.Call] (or [Registry.CallHeld] when its client holds messages before
// sending them, as kafka-go's BatchTimeout does), or, for publishers that complete
// permits later (asynchronous writers), [Registry.Acquire], [Registry.Start],
// [Outcome] and [Registry.Complete], which apply the registry's deadline rule. Its
// publisher implements [Guarded] so that Guard recognises it. [NoMessagesError],
// [Factory], [CallCounts] and [CircuitReport] are for adapters, backends and
// telemetry.
package registry
