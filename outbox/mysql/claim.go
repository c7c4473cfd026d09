package mysql

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/storekit"
)

// claimLockSQL takes the claims' lock: an exclusive lock on the one row of the lock
// table, made if missing, held until the claim commits. Claims of one table then run
// one at a time, each after the one before committed, so that each sees the leases
// of the last: without it, claims made at the same instant pick the same rows, the
// first locks them and the others skip them, and a later row of a key can be
// claimed while an earlier one is being leased by a claim not yet committed. A claim
// takes milliseconds and publishing does not hold the lock.
const claimLockSQL = `INSERT INTO ` + Table + `_lock (name) VALUES ('claim') ON DUPLICATE KEY UPDATE name = name`

// claimable is true for a pending row o of destination ? that may be claimed at
// the next four ?s (all the claim's now): due, not leased, and no earlier pending row
// of its destination and key waiting for its backoff (attempts > 0) or leased. The
// per-key test reads the key index: the earlier pending rows of the key's hash, their
// keys compared in full.
const claimable = `o.status = 'pending' AND o.destination = ? AND o.visible_after <= ?
	AND (o.lease_until IS NULL OR o.lease_until <= ?)
	AND (o.key_hash IS NULL OR NOT EXISTS (
		SELECT 1 FROM ` + Table + ` e FORCE INDEX (brokerguard_key)
		WHERE e.status = 'pending' AND e.destination = o.destination AND e.key_hash = o.key_hash AND e.id < o.id
			AND e.msg_key = o.msg_key AND (e.attempts > 0 OR e.lease_owner IS NOT NULL)
			AND (e.visible_after > ? OR e.lease_until > ?)))`

// candidates is one destination's first claimable rows (up to ?, the last
// argument), read in id order along the pending index.
const candidates = `(SELECT o.id FROM ` + Table + ` o FORCE INDEX (brokerguard_pending) WHERE ` + claimable + ` ORDER BY o.id LIMIT ?)`

// destsPerQuery bounds the destinations one candidates query reads.
const destsPerQuery = 100

// Claim implements outbox.Store, in one READ COMMITTED transaction on a connection
// whose lock waits are bounded by the Store's timeout. At REPEATABLE READ the locking
// read of the rows taken, by primary key, also locks the gap after the last of them,
// which is where the applications' new rows go: their inserts waited for the claim to
// commit (TestAnOpenClaimDoesNotHoldUpInserts). READ COMMITTED takes no gap locks.
// The steps:
//
//  1. take the claims' lock (claimLockSQL);
//  2. read the holds; lock those that ended (FOR UPDATE SKIP LOCKED) and, for each,
//     pick its first r.ProbeLimit claimable rows as its probe, or drop the hold when
//     the destination has no pending row left;
//  3. list the destinations with pending rows (a loose scan of the pending index),
//     and pick the first claimable rows of each that is not held, lowest ids first,
//     up to the limit with the probes;
//  4. lock the rows picked, by primary key, FOR UPDATE SKIP LOCKED, testing status
//     and lease again on their latest versions, and lease them (UPDATE ... WHERE id
//     IN), and move the probed holds to the lease's end under this claim's token.
//
// Rows come back by ascending id. Per-key order across claims holds because claims
// take turns (step 1).
func (s *Store) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	if r.Limit <= 0 {
		return nil, nil
	}
	var recs []outbox.Record
	err := s.tx(ctx, func(ctx context.Context, q querier) (err error) {
		recs, err = s.claim(ctx, q, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: claim: %w", err)
	}
	return recs, nil
}

func (s *Store) claim(ctx context.Context, q querier, r outbox.ClaimRequest) ([]outbox.Record, error) {
	now, leaseEnd := dbTime(r.Now), dbTime(r.Now.Add(r.Lease))
	if _, err := q.ExecContext(ctx, s.sql(claimLockSQL)); err != nil {
		return nil, err
	}
	held, ended, err := s.holds(ctx, q, now)
	if err != nil {
		return nil, err
	}
	var probes []int64
	probing := map[int64]string{} // probe row -> its destination
	if len(ended) > 0 {
		if ended, err = s.lockEnded(ctx, q, ended, now); err != nil {
			return nil, err
		}
		for _, d := range ended {
			ids, err := s.candidates(ctx, q, []string{d}, now, max(r.ProbeLimit, 1))
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				probing[id] = d
			}
			probes = append(probes, ids...)
		}
		slices.Sort(probes)
		probes = probes[:min(len(probes), r.Limit)]
		if err := s.dropEmptyHolds(ctx, q, ended, now); err != nil {
			return nil, err
		}
	}
	var due []int64
	if want := r.Limit - len(probes); want > 0 {
		dests, err := s.pendingDestinations(ctx, q)
		if err != nil {
			return nil, err
		}
		dests = slices.DeleteFunc(dests, func(d string) bool { _, ok := held[d]; return ok })
		if due, err = s.candidates(ctx, q, dests, now, want); err != nil {
			return nil, err
		}
	}
	picked := slices.Concat(probes, due)
	if len(picked) == 0 {
		return nil, nil
	}
	recs, err := s.lockRows(ctx, q, picked, now)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	recs = withinBytes(recs, probing, r.MaxBytes)
	ids := make([]int64, len(recs))
	probed := map[string]bool{}
	for i := range recs {
		ids[i] = recs[i].ID
		recs[i].LeaseOwner, recs[i].LeaseUntil = r.Token, microseconds(r.Now.Add(r.Lease))
		if d, ok := probing[recs[i].ID]; ok {
			recs[i].Probe = true
			probed[d] = true
		}
	}
	args := append([]any{r.Token, leaseEnd}, int64Args(ids)...)
	if _, err := q.ExecContext(ctx, s.sql(`UPDATE `+Table+` SET lease_owner = ?, lease_until = ? WHERE id IN (`+placeholders(len(ids))+`)`), args...); err != nil {
		return nil, err
	}
	if len(probed) > 0 {
		args := []any{leaseEnd, r.Token}
		for d := range probed {
			args = append(args, d)
		}
		if _, err := q.ExecContext(ctx, s.sql(`UPDATE `+Table+`_hold SET held_until = ?, probe_token = ? WHERE destination IN (`+placeholders(len(probed))+`)`), args...); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// withinBytes keeps, of the rows locked, the probes and the longest prefix by id of
// the others whose sizes (storekit.MessageSize) total at most maxBytes, at least one;
// the rows dropped stay unleased and their locks end with the claim's transaction.
func withinBytes(recs []outbox.Record, probing map[int64]string, maxBytes int) []outbox.Record {
	if maxBytes <= 0 {
		return recs
	}
	total, taken := 0, 0
	return slices.DeleteFunc(recs, func(rec outbox.Record) bool {
		if _, probe := probing[rec.ID]; probe {
			return false
		}
		total += storekit.MessageSize(rec.Message)
		taken++
		return total > maxBytes && taken > 1
	})
}

// holds returns every held destination, and those whose hold ended at now.
func (s *Store) holds(ctx context.Context, q querier, now string) (held map[string]bool, ended []string, err error) {
	rows, err := q.QueryContext(ctx, s.sql(`SELECT destination, held_until <= ? FROM `+Table+`_hold`), now)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	held = map[string]bool{}
	for rows.Next() {
		var (
			d    string
			over bool
		)
		if err := rows.Scan(&d, &over); err != nil {
			return nil, nil, err
		}
		held[d] = true
		if over {
			ended = append(ended, d)
		}
	}
	return held, ended, rows.Err()
}

// lockEnded locks the holds of dests that still ended at now, skipping those
// another statement holds (a Hold being written), and returns them.
func (s *Store) lockEnded(ctx context.Context, q querier, dests []string, now string) ([]string, error) {
	args := append(stringArgs(dests), now)
	return s.strings(ctx, q, s.sql(`SELECT destination FROM `+Table+`_hold WHERE destination IN (`+placeholders(len(dests))+`)
		AND held_until <= ? ORDER BY destination FOR UPDATE SKIP LOCKED`), args...)
}

// dropEmptyHolds deletes the ended holds of dests whose destination has no pending
// row left: rows enqueued later are claimed normally, not one probe at a time.
func (s *Store) dropEmptyHolds(ctx context.Context, q querier, dests []string, now string) error {
	if len(dests) == 0 {
		return nil
	}
	pending, err := s.strings(ctx, q, s.sql(`SELECT DISTINCT destination FROM `+Table+`
		WHERE status = 'pending' AND destination IN (`+placeholders(len(dests))+`)`), stringArgs(dests)...)
	if err != nil {
		return err
	}
	empty := slices.DeleteFunc(slices.Clone(dests), func(d string) bool { return slices.Contains(pending, d) })
	if len(empty) == 0 {
		return nil
	}
	_, err = q.ExecContext(ctx, s.sql(`DELETE FROM `+Table+`_hold WHERE destination IN (`+placeholders(len(empty))+`) AND held_until <= ?`),
		append(stringArgs(empty), now)...)
	return err
}

// pendingDestinations lists the destinations that have pending rows, one index dive
// each: grouped by the pending index's first two columns, both engines read it with a
// loose index scan ("Using index for group-by"), where SELECT DISTINCT read every
// pending entry (5 ms against 0.4 ms over 20,000 pending rows of one destination).
func (s *Store) pendingDestinations(ctx context.Context, q querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, s.sql(`SELECT destination, MIN(id) FROM `+Table+` WHERE status = 'pending' GROUP BY status, destination`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			d     string
			first int64
		)
		if err := rows.Scan(&d, &first); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// candidates returns the lowest ids, up to limit, of the claimable rows of dests at
// now, reading at most limit rows of each destination.
func (s *Store) candidates(ctx context.Context, q querier, dests []string, now string, limit int) ([]int64, error) {
	var out []int64
	for lo := 0; lo < len(dests); lo += destsPerQuery {
		part := dests[lo:min(lo+destsPerQuery, len(dests))]
		stmt := `SELECT id FROM (` + strings.Repeat(candidates+` UNION ALL `, len(part)-1) + candidates + `) c ORDER BY id LIMIT ?`
		args := make([]any, 0, 6*len(part)+1)
		for _, d := range part {
			args = append(args, d, now, now, now, now, limit)
		}
		args = append(args, limit)
		rows, err := q.QueryContext(ctx, s.sql(stmt), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, id)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out[:min(len(out), limit)], nil
}

// lockRows locks the rows ids that are still pending and not leased at now, skipping
// the rows another statement holds, and reads them.
func (s *Store) lockRows(ctx context.Context, q querier, ids []int64, now string) ([]outbox.Record, error) {
	args := append(int64Args(ids), now)
	rows, err := q.QueryContext(ctx, s.sql(`SELECT `+columns+` FROM `+Table+` WHERE id IN (`+placeholders(len(ids))+`)
		AND status = 'pending' AND (lease_until IS NULL OR lease_until <= ?) ORDER BY id FOR UPDATE SKIP LOCKED`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []outbox.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b outbox.Record) int { return cmp.Compare(a.ID, b.ID) })
	return recs, nil
}

// strings runs a query of one text column.
func (s *Store) strings(ctx context.Context, q querier, stmt string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func stringArgs(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
