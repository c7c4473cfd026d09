package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
)

// relayTable is the name of the table of relays that hold a session.
const relayTable = "brokerguard_outbox_relay"

// relayLockClass is the first key of the session-level advisory lock a relay's own
// connection holds while its session lasts; the second is the relay's lock_key.
const relayLockClass = 7362891

// sessionCheck is how often a session's connection is checked; one that broke is
// opened again (with a new lock), so that the relay's later claims are covered again.
const sessionCheck = 5 * time.Second

// sessionKeepalive has the server probe a session's connection when it goes quiet,
// so that the lock of a relay whose host vanished without closing its connections
// (no FIN, no RST) is dropped within about eight seconds, not the system's two hours.
const sessionKeepalive = `SELECT set_config('tcp_keepalives_idle', '5', false),
	set_config('tcp_keepalives_interval', '1', false), set_config('tcp_keepalives_count', '3', false)`

var _ outbox.Sessions = (*Store)(nil)

// Session implements outbox.Sessions on a connection of its own, taken out of the
// Store's pool for as long as the session lasts: it holds a session-level advisory
// lock and records the relay (prefix, lock) in the relay table. Every claim first
// tries the locks of the recorded relays; one it can take belongs to a relay whose
// connection is gone (its process was killed, its host lost, the server restarted),
// so the claim deletes that relay's record and frees the rows its claims lease, in
// the claim's own transaction. Ending the session frees its rows and record at once.
//
// A Store without a pool (New given another DB) or with WithoutNotify (behind a
// pooler in transaction mode, where a session's lock would stay with a server
// connection other clients share) opens no session: Session returns a no-op end, and
// claims keep their rows until their leases end.
func (s *Store) Session(ctx context.Context, prefix string) (end func(), err error) {
	if !strings.HasSuffix(prefix, "/") || strings.ContainsRune(prefix, 0) {
		return nil, fmt.Errorf("postgres: session prefix %q must end in '/' and hold no NUL", prefix)
	}
	if s.pool == nil || s.quiet {
		return func() {}, nil
	}
	opened := make(chan error, 1)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.holdSession(sctx, PoolConn(s.pool), prefix, opened)
	}()
	select {
	case err = <-opened:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("postgres: session: %w", err)
	}
	return func() { cancel(); <-done }, nil
}

// holdSession keeps prefix's session open until ctx ends, opening it again when its
// connection breaks. The first opening's result goes to opened.
func (s *Store) holdSession(ctx context.Context, connect Connector, prefix string, opened chan<- error) {
	first := true
	for ctx.Err() == nil {
		err := connect(ctx, func(conn *pgx.Conn) error {
			key, err := s.openSession(ctx, conn, prefix)
			if first {
				first = false
				opened <- err
			}
			if err != nil {
				return err
			}
			return s.keepSession(ctx, conn, prefix, key)
		})
		if first { // could not even connect
			opened <- err
			return
		}
		t := time.NewTimer(sessionCheck)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// openSession takes a lock no other session holds on conn and records the relay.
func (s *Store) openSession(ctx context.Context, conn *pgx.Conn, prefix string) (int32, error) {
	bctx, cancel := s.bounded(ctx)
	defer cancel()
	if _, err := conn.Exec(bctx, sessionKeepalive); err != nil {
		return 0, err
	}
	for {
		key := rand.Int32()
		var got bool
		if err := conn.QueryRow(bctx, `SELECT pg_try_advisory_lock(`+strconv.Itoa(relayLockClass)+`, $1)`, key).Scan(&got); err != nil {
			return 0, err
		}
		if !got {
			continue // another session's key
		}
		_, err := conn.Exec(bctx, s.sql(`INSERT INTO `+relayTable+` (prefix, lock_key, since) VALUES ($1, $2, now())
			ON CONFLICT (prefix) DO UPDATE SET lock_key = EXCLUDED.lock_key, since = EXCLUDED.since`), prefix, key)
		return key, err
	}
}

// keepSession checks conn every sessionCheck until ctx ends, then ends the session:
// it frees the rows of the prefix's claims and the relay's record, and drops the
// lock. It returns the error of a check that failed (the connection is gone).
func (s *Store) keepSession(ctx context.Context, conn *pgx.Conn, prefix string, key int32) error {
	t := time.NewTicker(sessionCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ectx, cancel := s.bounded(context.WithoutCancel(ctx))
			defer cancel()
			// The record and the rows first, committed, then the lock: while the lock
			// is held no claim takes the relay for gone, so no claim waits on the rows
			// and the record this statement locks while they wait on its own (a
			// statement whose unlock ran before its writes committed let a claim
			// delete the record first: a deadlock, seen when relays stopped).
			if _, err := conn.Exec(ectx, s.sql(endSessionSQL), prefix, key); err != nil {
				return err
			}
			_, err := conn.Exec(ectx, `SELECT pg_advisory_unlock(`+strconv.Itoa(relayLockClass)+`, $1)`, key)
			return err
		case <-t.C:
			cctx, cancel := s.bounded(ctx)
			err := conn.Ping(cctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// endSessionSQL ends the session of prefix $1 with lock $2: its record and the rows
// its claims lease; its lock is dropped after it commits.
var endSessionSQL = `WITH relay AS (
	DELETE FROM ` + relayTable + ` WHERE prefix = $1 AND lock_key = $2
)
UPDATE ` + Table + ` o SET lease_owner = NULL, lease_until = NULL
WHERE ` + tokensOf("$1::text") + ` AND o.status = 'pending'`

// tokensOf is true for a row o leased by a claim whose token starts with prefix
// (which ends in '/'): a range of the leased index, in byte order.
func tokensOf(prefix string) string {
	return `(o.lease_owner COLLATE "C") >= (` + prefix + ` COLLATE "C")
	AND (o.lease_owner COLLATE "C") < ((left(` + prefix + `, -1) || '0') COLLATE "C")`
}

// freeGoneSQL runs before each claim, under the claims' lock: it deletes the records
// of relays whose lock it can take (their connection is gone) and frees the rows their
// claims lease. A live relay's lock is held by its session's connection, so a slow
// batch of a live relay is never taken before its lease ends.
var freeGoneSQL = `WITH gone AS (
	DELETE FROM ` + relayTable + ` r WHERE pg_try_advisory_xact_lock(` + strconv.Itoa(relayLockClass) + `, r.lock_key)
	RETURNING r.prefix
)
UPDATE ` + Table + ` o SET lease_owner = NULL, lease_until = NULL FROM gone
WHERE ` + tokensOf("gone.prefix") + ` AND o.status = 'pending'`

// bounded returns ctx with the Store's timeout, if it has one.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}
