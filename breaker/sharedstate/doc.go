// Package sharedstate is the state machine of circuits shared by several processes,
// written once over a small storage Driver that each backend implements
// (breaker/dynamo, breaker/filestate, a Redis driver). A backend is a Driver plus a
// constructor; circuittest.Run and circuittest.TestDriver prove it.
//
// A Driver stores one Record per circuit identity and offers two operations: read
// it, and replace it only if its Version has not changed (a conditional write). The
// engine owns everything else: snapshots and their age, thresholds, generations, probe
// leases, overrides, observers, policy fingerprints, back-off after a failed request,
// and what to do when a write's answer is lost.
//
// # Options
//
// The settings every backend's circuits share (clock, staleness, retry delay, I/O
// timeout, observers, error handler, store-failure mode, identity prefix) are this
// package's With... options, which each backend's constructor takes and reads with
// Apply; a backend adds only its own (DriverOption), such as Redis's key prefix.
//
// # Admission without I/O
//
// Each replica keeps an immutable snapshot of the record. While it shows a closed
// circuit and is younger than three quarters of MaxStaleness, Acquire admits with one
// monotonic clock read and no I/O; then one caller reads the record again while the
// others keep deciding on the snapshot, which is refused altogether once it is
// MaxStaleness old (also when the read that should have refreshed it took that long).
// An open snapshot rejects without I/O in the same way. So an OPEN, or an operator's
// ForceOpen, written by one replica holds on every replica within MaxStaleness.
//
// # Counting when many replicas fail at once
//
// Closed-state evidence is the one thing every replica writes under load, so it is
// kept cheap three ways. A Success writes only when the snapshot shows failures, and a
// burst of successes after a failure sends one reset per process, not one each. A
// driver that is a Counter (DynamoDB's conditional ADD, a Redis script) counts a
// failure in one request with no read and no lost update, however many replicas fail
// at once; only the failure that reaches the threshold is followed by a second write,
// of OPEN. A driver without a Counter counts with a conditional replace and opens in
// the same write; a lost race costs a read and a retry (a file store serializes them
// under its lock anyway).
//
// Counter updates are bounded by the threshold: once the count reaches it the record
// is "tripped" and neither a failure nor a success may change it, so a success from
// another replica cannot wipe out a reached threshold between the two writes. Whoever
// sees a tripped record first (the counting replica, or any Acquire) writes OPEN.
//
// # Probe leases
//
// After the open deadline, the caller that writes HALF-OPEN holds the first probe
// lease; at most HalfOpenMaxProbes unexpired leases exist across all replicas, and an
// expired lease may be taken over by anyone. A lease write whose answer is lost (the
// store timed out, or the caller's context ended) is resolved by reading the record:
// a lease that is there is handed out, or given back when the caller has gone, so no
// replica waits for a lease nobody holds.
//
// # Operators
//
// An Operator reads a circuit's record and holds it open or closed without knowing
// the policy, for tools run by people on call (brokerguard circuits). Its holds are
// the ones Circuit.ForceOpen, ForceClose and ClearOverride write, by the same code. A
// driver that is also a Lister names the identities it stores; listing reads the
// whole store and is never on a circuit's path.
//
// # Fingerprints
//
// The record stores the fingerprint of the policy fields that must agree across
// replicas, and those fields in words; a replica with another policy is refused with a
// *PolicyMismatchError naming the fields that differ. Per-process fields (MaxInFlight)
// are left out, so replicas may size their own bulkheads.
package sharedstate
