// Package filestate keeps circuits in files, so that the cooperating processes of one
// host (prefork workers, command-line jobs, sidecars) share one circuit per dependency
// without a server. Its circuits have scope breaker.SingleHost, which the local and
// DynamoDB backends refuse, and it refuses every other scope.
//
// A Store is a root directory, private to one user (mode 0700; Open refuses a root that
// group or others can reach rather than changing it). Each circuit has two files named
// by the hex SHA-256 of its identity, so identities never reach the filesystem:
//
//	<sha256>.json   the state record: strict, versioned JSON
//	<sha256>.lock   the lock file: an exclusive flock serializes every read-modify-write
//
// A new record is written to a private temporary file (mode 0600), synced, renamed over
// the old one, and the directory synced; readers therefore always see a whole record
// and need no lock. The kernel drops a dead process's flock, so a crash leaves nothing
// locked. Records stay until Clear removes them, so that permits of an older
// generation can never update a circuit that has since recovered.
//
// The state machine is breaker/sharedstate's, the same as for DynamoDB and Redis;
// this package is its file driver. The circuit follows the contract of the local
// breaker (circuittest.Run checks it): permits
// carry the generation that admitted them, a half-open probe holds a lease that another
// process takes over once it expires (a killed prober blocks nothing for longer), and
// late outcomes of an older generation or an expired lease change nothing. The policy's
// fingerprint is stored; a process offering a different policy is refused with a
// *sharedstate.PolicyMismatchError naming the fields that differ (MaxInFlight, which
// is per process, may differ). A record that cannot be read, is corrupt or is not
// private fails Acquire with an error matching breaker.ErrUnavailable before any call
// is admitted; Store.Clear removes it deliberately.
//
// Cost: a process keeps a snapshot of each circuit. While that snapshot is younger than
// three quarters of the staleness bound (sharedstate.WithMaxStaleness, default 250ms), a closed
// circuit admits calls and an open one rejects them with no file access; then one
// caller reads the file again. A Success on a circuit with no failures writes nothing.
// Failures, transitions and probe outcomes are written under the lock, which a caller
// waits for no longer than its context and sharedstate.WithIOTimeout allow. A write also removes
// the temporary files a writer killed mid-write left behind. Another process's
// failures reach this one within the staleness bound, measured on the monotonic clock.
//
// Operators hold a circuit for every process with ForceOpen and ForceClose (with an
// expiry) and end the hold with ClearOverride; sharedstate.WithObserver sees every transition.
//
// Limits: failures are counted consecutively (window mode is refused); MaxInFlight
// bounds the calls of each process, not of the host; times are wall-clock readings shared through the files, so a step of the host's clock
// shortens or lengthens a break or lease in progress. Files on a network filesystem
// are not supported: flock and rename are only as good as the filesystem's.
package filestate
