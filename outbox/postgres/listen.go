package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/brokerguard/brokerguard/outbox"
)

// Connector opens the dedicated connection a Listener waits on and calls listen with
// it; it closes the connection (or discards it from its pool) when listen returns,
// since a connection that LISTENs must not serve anything else. The connection must
// reach PostgreSQL itself: a pooler in transaction mode (PgBouncer's
// pool_mode=transaction) does not keep a LISTEN, so behind one point the Connector at
// the server directly (ConnString), or run the Processor without a Listener: polling
// only. Session-mode pooling works.
type Connector func(ctx context.Context, listen func(*pgx.Conn) error) error

// ConnString opens a new connection from a pgx connection string each time.
func ConnString(dsn string) Connector {
	return func(ctx context.Context, listen func(*pgx.Conn) error) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return listen(conn)
	}
}

// PoolConn takes a connection out of pool for good (it no longer counts against the
// pool's size) and closes it when done.
func PoolConn(pool *pgxpool.Pool) Connector {
	return func(ctx context.Context, listen func(*pgx.Conn) error) error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conn := c.Hijack()
		defer conn.Close(context.WithoutCancel(ctx))
		return listen(conn)
	}
}

// SQLConn takes a connection from db, whose driver must be pgx's
// (github.com/jackc/pgx/v5/stdlib), and has db discard it when done rather than hand
// it, still listening, to someone else.
func SQLConn(db *sql.DB) Connector {
	return func(ctx context.Context, listen func(*pgx.Conn) error) error {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		var lerr error
		err = c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				lerr = fmt.Errorf("postgres: SQLConn needs the pgx driver (jackc/pgx/v5/stdlib), not %T", dc)
			} else {
				lerr = listen(sc.Conn())
			}
			return driver.ErrBadConn // the pool must not reuse a listening connection
		})
		if lerr != nil {
			return lerr
		}
		if !errors.Is(err, driver.ErrBadConn) {
			return err
		}
		return nil
	}
}

// Defaults of a Listener.
const (
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultMaxReconnectDelay = 10 * time.Second
)

// Listener is an outbox.Waker: it LISTENs on a dedicated connection for the NOTIFY
// its Store's Enqueue sends on commit. When the connection breaks it reconnects after
// a delay that doubles up to a ceiling, and wakes the Processor each time it listens
// again, since rows committed meanwhile sent no signal it saw; between the two the
// Processor's polling publishes them.
type Listener struct {
	connect  Connector
	channel  string
	minDelay time.Duration
	maxDelay time.Duration
	onError  func(error)
	onListen func(pid uint32)
}

var _ outbox.Waker = (*Listener)(nil)

// ListenerOption configures a Listener.
type ListenerOption func(*Listener)

// WithReconnectDelay sets the first and the largest wait before reconnecting after the
// connection broke (defaults 100ms and 10s).
func WithReconnectDelay(first, ceiling time.Duration) ListenerOption {
	return func(l *Listener) { l.minDelay, l.maxDelay = first, ceiling }
}

// WithListenErrors passes every error that broke or prevented the connection to f
// before the Listener tries again.
func WithListenErrors(f func(error)) ListenerOption {
	return func(l *Listener) { l.onError = f }
}

// WithOnListen calls f, with the server's process id of the connection, each time the
// Listener starts listening.
func WithOnListen(f func(pid uint32)) ListenerOption {
	return func(l *Listener) { l.onListen = f }
}

// Listener returns a Listener for the Store's table whose connections come from
// connect. Give it to the Processor with outbox.WithWaker.
func (s *Store) Listener(connect Connector, opts ...ListenerOption) (*Listener, error) {
	if connect == nil {
		return nil, errors.New("postgres: Listener needs a Connector")
	}
	l := &Listener{connect: connect, channel: s.table.Channel(),
		minDelay: DefaultReconnectDelay, maxDelay: DefaultMaxReconnectDelay}
	for _, o := range opts {
		o(l)
	}
	if l.minDelay <= 0 || l.maxDelay < l.minDelay {
		return nil, fmt.Errorf("postgres: WithReconnectDelay(%v, %v): want 0 < first <= max", l.minDelay, l.maxDelay)
	}
	return l, nil
}

// Listen implements outbox.Waker. It returns only when ctx ends.
func (l *Listener) Listen(ctx context.Context, wake func()) error {
	delay := l.minDelay
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := l.connect(ctx, func(conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
				return err
			}
			delay = l.minDelay
			if l.onListen != nil {
				l.onListen(conn.PgConn().PID())
			}
			wake() // rows may have been committed while nobody listened
			for {
				// Notifications already read are returned without a round trip, so a
				// burst is taken in one go; the Processor coalesces the wakes.
				if _, err := conn.WaitForNotification(ctx); err != nil {
					return err
				}
				wake()
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if l.onError != nil {
			l.onError(fmt.Errorf("postgres: listen on %q: %w", l.channel, err))
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		delay = min(2*delay, l.maxDelay)
	}
}
