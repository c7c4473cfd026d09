// Package redisstate keeps circuits of scope SharedDependency in Redis: one circuit
// shared by every replica of a fleet through one hash key, for teams that run Redis
// rather than DynamoDB. It is a storage driver for breaker/sharedstate, which holds the
// state machine (the same one breaker/dynamo uses); this package only reads records
// and changes them with Lua scripts. Its import path ends in "redis", its name is
// redisstate, so that it does not hide go-redis's package redis.
//
// A replica makes its circuit with New (or, for a registry, Factory) from a go-redis
// client, an identity and a breaker.Policy with Scope SharedDependency. Replicas that
// use the same Redis, key prefix and identity share one circuit; they must run the
// same policy, which is checked through the fingerprint stored with the record.
//
// # Admission
//
// Each replica keeps a process-local snapshot of the record. A closed snapshot younger
// than MaxStaleness admits without any Redis command; once it is three quarters
// stale one caller reads the record again (one script) while the others keep using
// it. An open snapshot rejects without a command until its deadline. Half-open
// decisions, probe results, failures, and a success after failures run one script
// each. When Redis cannot be reached, a closed snapshot serves until it is stale; after
// that Acquire fails with an *UnavailableError (errors.Is breaker.ErrUnavailable), and
// calls within RetryDelay of a failed request are refused without trying
// again. There is no fall back to local protection.
//
// # Keys and scripts
//
// A circuit is one hash at KeyPrefix + "{" + identity + "}" (WithKeyPrefix; default
// "brokerguard:circuit:"). One key per circuit means every script touches one hash
// slot, so Redis Cluster works, and the hash tag keeps any key added for a circuit in
// the same slot. Fields:
//
//	record       the sharedstate.Record as JSON (everything except the two below)
//	version      the record's Version, compared by every conditional write
//	failures     the shared consecutive-failure count
//	state        copies that the counting script checks, and that people read:
//	generation     "closed", "open" or "half-open"; the generation; the policy
//	fingerprint    fingerprint; "none", "forced-open" or "forced-closed"
//	override
//	ops          tokens of the last writes, to recognise a write sent twice
//
// Every change is one script on that key, so it is atomic on the server and no lock
// is ever held across the call a circuit protects: Replace writes the whole record if
// its version is unchanged; AddFailure and ResetFailures change the count of a closed
// record of one generation without a read first (the sharedstate.Counter capability).
// go-redis sends a command again when its reply is lost (a timeout, a closed
// connection); each write carries a random token that the key remembers, so a write
// sent twice is applied once and reported as done.
//
// Every read and write extends the key's time to live to WithTTL (default 24 hours),
// and past any open deadline, hold or lease the record holds: a circuit nobody uses
// disappears, and one that is used never does. Deleting a key resets its circuit to
// closed in a new generation. A key whose fields cannot be read, or whose copies
// disagree with the record, gives a *RecordError and the circuit refuses calls.
//
// # Replication
//
// Scripts run on the master that owns the key. Redis replicates to its replicas
// asynchronously, so a failover can lose the last writes: an opening, a failure count
// or a probe lease the old master acknowledged. The circuit then carries on from the
// record the new master holds, and until the replicas' snapshots catch up it may admit
// more probes than HalfOpenMaxProbes, or count a late outcome of a generation that was
// lost and issued again. Where that matters, keep the circuits on a Redis without
// automatic failover.
package redisstate
