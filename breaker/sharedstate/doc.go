// Package sharedstate is the state machine of circuits shared by several processes,
// written once over a small storage Driver that each backend implements
// (breaker/dynamo, breaker/filestate, a Redis driver).
//
// A Driver stores one Record per circuit identity and offers two operations: read
// it, and replace it only if its Version has not changed (a conditional write). An
// optional Counter adds one failure, or resets the count, in a single conditional
// request without a read. The engine owns everything else: snapshots and their age,
// thresholds, generations, probe leases, overrides, observers, policy fingerprints,
// back-off after a failed request, and what to do when a write's answer is lost.
//
// Work in development: the engine (Circuit) follows in this package.
package sharedstate
