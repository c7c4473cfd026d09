package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"
)

// bound returns ctx with the Store's timeout, unless it ends sooner already.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// lockWaitSeconds is the Store's timeout in whole seconds, rounded up (the unit of
// the servers' lock wait settings); 0 when the Store has no timeout.
func (s *Store) lockWaitSeconds() int64 {
	if s.timeout <= 0 {
		return 0
	}
	return int64((s.timeout + time.Second - 1) / time.Second)
}

// Session settings a claim bounds for its own statements and restores afterwards:
// the wait for a row lock (innodb_lock_wait_timeout) and for a table's metadata lock
// (lock_wait_timeout, which an ALTER TABLE holds).
const (
	boundLockWaits = `SET @brokerguard_row_wait = @@SESSION.innodb_lock_wait_timeout,
	@brokerguard_mdl_wait = @@SESSION.lock_wait_timeout,
	SESSION innodb_lock_wait_timeout = ?, SESSION lock_wait_timeout = ?`
	restoreLockWaits = `SET SESSION innodb_lock_wait_timeout = @brokerguard_row_wait,
	SESSION lock_wait_timeout = @brokerguard_mdl_wait`
)

// readCommitted sets the isolation level of the session's next transaction (or
// autocommitted statement) only.
const readCommitted = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

// querier is what the statements of a call run on: *sql.Conn, or *sql.Tx in tests.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// tx runs f in a READ COMMITTED transaction on a connection of the Store's pool
// whose lock waits are bounded (withConn), the whole call bounded by the Store's
// timeout. The transaction is begun and ended with statements on the connection
// rather than with database/sql's Tx, whose Commit takes no context: on a connection
// that went silent it waited for good, where a statement's context closes the
// connection when it ends.
func (s *Store) tx(ctx context.Context, f func(ctx context.Context, q querier) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.withConn(ctx, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, readCommitted); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return err
		}
		if err := f(ctx, conn); err != nil {
			s.end(ctx, conn, "ROLLBACK")
			return err
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			discard(conn) // the transaction's end is unknown: nobody else may use it
			return err
		}
		return nil
	})
}

// end runs stmt on conn, on ctx if it lasts, else on a context of the Store's
// timeout, so that a connection is not handed back with its transaction or settings
// changed; a connection on which stmt failed is discarded.
func (s *Store) end(ctx context.Context, conn *sql.Conn, stmt string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.timeout, time.Second))
	defer cancel()
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		discard(conn)
	}
}

// discard makes the pool close conn rather than hand it out again.
func discard(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

// withConn runs f on a connection of the Store's pool whose lock waits are bounded by
// the Store's timeout (when it has one), and restores the connection's settings
// afterwards. A connection whose settings could not be restored is closed rather
// than handed back to the pool with them.
func (s *Store) withConn(ctx context.Context, f func(*sql.Conn) error) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	secs := s.lockWaitSeconds()
	if secs == 0 {
		return f(conn)
	}
	if _, err := conn.ExecContext(ctx, boundLockWaits, secs, secs); err != nil {
		return fmt.Errorf("bound lock waits: %w", err)
	}
	defer s.end(ctx, conn, restoreLockWaits) // even when f failed
	return f(conn)
}
