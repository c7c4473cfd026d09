package sharedstate

import (
	"github.com/brokerguard/brokerguard/breaker"
)

// Amnesia repair. A store can forget: Redis restarted without persistence, a key
// evicted under memory pressure (volatile-ttl evicts circuit keys first, as they carry
// the only TTL), a DynamoDB item deleted, a backup restored. A replica that would then
// create a new closed record, or accept an older copy, would close a circuit that is
// open while the broker is still down. So a replica whose snapshot shows the circuit
// open or half-open, newer than what the store holds, writes its knowledge back.

// remembered returns the record to write back over found (nil: the store has no
// record) and true, when this replica's snapshot knows the circuit open or half-open
// and found is older than that knowledge: missing, a copy of an earlier generation, or
// a closed record created after the snapshot's transition, which has made no
// transition of its own (another replica created it after the store forgot). The
// snapshot counts only while it is younger than the policy's longest break, so that a
// replica idle for long does not bring back an outage long over. The generation is
// kept (or moved past found's), so that the probes in flight stay valid; the version
// moves past every version either record may have had.
func (c *Circuit) remembered(found *Record, m, now int64) (Record, bool) {
	cur := c.view.Load()
	if cur == nil || cur.rec.State == breaker.Closed || m-cur.at < 0 || m-cur.at > c.memory() {
		return Record{}, false
	}
	known := cur.rec
	if found != nil {
		older := found.Generation < known.Generation
		createdSince := found.State == breaker.Closed && found.Reason == "" && found.Since == 0 &&
			found.Override == breaker.NoOverride && found.Generation > known.Generation &&
			found.Generation > uint64(max(known.Since, 0))
		if !older && !createdSince {
			return Record{}, false
		}
	}
	next := known
	next.Leases = liveLeases(known.Leases, now)
	next.Version = max(uint64(max(now, 1)), known.Version+1)
	if found != nil {
		next.Version = max(next.Version, found.Version+1)
		next.Generation = max(known.Generation, found.Generation+1)
	}
	return next, true
}

// memory is how long a snapshot may be and still repair a forgetful store: the
// longest break the policy can make, plus a probe lease.
func (c *Circuit) memory() int64 {
	return int64(max(c.policy.MaxBreakDuration, c.policy.BreakDuration) + c.policy.ProbeLease)
}

// ReasonCleared is the Reason of a tombstone (see Tombstone).
const ReasonCleared = "cleared"

// tombstoneFingerprint is a tombstone's Fingerprint: no policy has it.
const tombstoneFingerprint = "cleared"

// Tombstone returns the record a backend writes to remove a circuit's state on
// purpose (filestate's Store.Clear), in place of deleting it: a deleted record is
// written back by any replica that knows the circuit open (amnesia repair), while a
// tombstone tells every replica to start afresh. The next replica to read it replaces
// it with a new closed record under its own policy, in a new generation. prevVersion
// is the Version of the record it replaces (0 when unknown, as for a corrupt record);
// now is the wall time in Unix nanoseconds.
func Tombstone(prevVersion uint64, now int64) Record {
	v := max(uint64(max(now, 1)), prevVersion+1)
	return Record{Version: v, Fingerprint: tombstoneFingerprint, State: breaker.Closed, Generation: v,
		Reason: ReasonCleared, Since: max(now, 1)}
}

// isTombstone reports whether r is a Tombstone.
func isTombstone(r Record) bool {
	return r.Fingerprint == tombstoneFingerprint && r.Reason == ReasonCleared && r.State == breaker.Closed
}
