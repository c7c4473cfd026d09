// Package dynamo provides circuits of scope SharedDependency: one circuit shared by
// every replica of a fleet through one item of a DynamoDB table in one region.
//
// A replica creates its circuit with New (or, for a registry, Factory) from a
// *dynamodb.Client, a table made by CreateTable, an explicit identity and a
// breaker.Policy with Scope SharedDependency. Replicas that use the same table and
// identity share one state machine; they must use the same policy, which is checked
// through the fingerprint stored in the item. The local breaker refuses
// SharedDependency, and this backend refuses every other scope.
//
// The state machine is breaker/sharedstate's (see its documentation for admission,
// counting under contention, probe leases and fingerprints); this package is its
// DynamoDB driver, and circuittest.Run checks the whole on dynalite.
//
// # Admission
//
// A healthy closed admission uses a process-local snapshot of the item no older than
// MaxStaleness and does no I/O; a healthy replica reads the item about once per
// 0.75 × MaxStaleness whatever its traffic. When the table cannot be reached, a
// closed snapshot keeps serving until it is stale; after that Acquire fails with an
// *UnavailableError (errors.Is breaker.ErrUnavailable). There is no fall back to local
// protection. A failed attempt to reach the table is not repeated within
// RetryDelay: calls that need the table in between are refused at once, and
// outcomes that would be written are dropped (Complete returns false).
//
// # Evidence and transitions
//
// Only consecutive counting is supported (Policy.FailureWindow must be 0). A Failure
// adds one to the shared count with one UpdateItem (ADD, conditional on the closed
// generation, the fingerprint, no override and a count below the threshold), so the
// threshold counts the whole fleet's failures without a read; the update that reaches
// it is followed by a conditional PutItem of OPEN, and no Success can reset the count
// in between. Every other change (open, half-open, probe lease, probe result, close,
// overrides) is a PutItem of the whole item conditional on its version; a write that
// loses reads the item and decides again. No multi-item transaction is used.
//
// ForceOpen, ForceClose and ClearOverride write an operator's hold (with its end) into
// the item; every replica honours it within MaxStaleness. sharedstate.WithObserver sees the
// transitions a replica writes and those it learns of from the item.
//
// MaxInFlight is counted per process, not across the fleet, and may differ between
// replicas. SlowCallDuration is supported. Deadlines are written from each replica's
// clock, so replicas need clocks that agree to well within BreakDuration and ProbeLease.
//
// # Item layout
//
// The table's partition key is the string attribute "id". One item per identity:
//
//	id             S   the circuit's identity (the key)
//	ver            N   version, advanced by every write; conditional writes compare it (starts
//	                   at the creation time in Unix nanoseconds, like gen)
//	fp             S   sharedstate.Fingerprint of the policy that wrote the item
//	policy         S   the fingerprinted policy fields in words, to name a mismatch (optional)
//	state          S   "closed", "open" or "half-open"
//	gen            N   generation, advanced by every transition (starts at the creation
//	                   time in Unix nanoseconds, so a re-created item never reuses one)
//	failures       N   closed: the shared consecutive-failure count; otherwise frozen
//	open_until     N   open: the deadline, Unix nanoseconds (0 otherwise)
//	failed_probes  N   consecutive failed probes since the circuit last closed
//	successes      N   half-open: probe successes in this generation
//	leases         L   half-open: probe leases, each a map of
//	                     lease    N  the lease id (random, non-zero, unique in the item)
//	                     owner    S  the replica that took it (WithOwner)
//	                     expires  N  Unix nanoseconds after which it may be taken over
//	override       S   "forced-open" or "forced-closed" while an operator holds it (else absent)
//	override_until N   when that hold ends, Unix nanoseconds
//	reason         S   why the current generation started (a breaker.Reason constant)
//	since          N   when it started, Unix nanoseconds
//
// Decoding is strict: a missing attribute, a wrong type, an unknown state or a value
// out of range gives an *ItemError naming the identity and the attribute, and the
// circuit refuses calls (fails closed) with an *UnavailableError until the item is
// repaired or deleted. Attributes not listed are ignored, so an operator may add, for
// example, a TTL attribute. Deleting the item resets the circuit to closed.
package dynamo
