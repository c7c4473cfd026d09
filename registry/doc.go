// Package registry gives every broker destination its own circuit and admission
// control, and guards publishers with them.
//
// A Registry resolves a [Policy] per destination (an exact override, else the
// defaults): the destination's circuit (package breaker: whether the destination is
// up), its admission control in this process (package admission: how much to send it
// while it is up) and the deadline rule (MinCallBudget: which deadlines count against
// it). It creates the destination's circuit and admission control on first use and
// returns the same ones for as long as they live. The number of live destinations is
// capped, and idle ones may be evicted. Guard wraps a transport.Publisher so that every
// publish takes the circuit's permit, then an admission slot, and completes both
// exactly once.
//
// It imports only packages breaker, admission and transport and the standard library.
//
// # What a user needs
//
// Build one Registry per service, at start-up, with [New] and [DefaultPolicy] (New
// refuses a circuit that never opens unless it says Disabled), and share it. Options: [WithOverride] per destination, [WithMaxDestinations],
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
// permits later (asynchronous writers), [Registry.Acquire] (a [Permit]),
// [Registry.Start], [Outcome] and [Registry.Complete], which apply the registry's
// deadline rule. [Registry.Admission] hands out a destination's admission control
// (the outbox paces its bulk work by it). Its
// publisher implements [Guarded] so that Guard recognises it. [NoMessagesError],
// [Factory], [CallCounts] and [CircuitReport] are for adapters, backends and
// telemetry.
package registry
