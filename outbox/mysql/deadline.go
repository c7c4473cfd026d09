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
	defer func() {
		// On the caller's context if it lasts, else on one of the Store's timeout: the
		// settings must come back even when f failed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.timeout, time.Second))
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, restoreLockWaits); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // the pool drops it
		}
	}()
	return f(conn)
}
