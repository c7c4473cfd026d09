package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
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

// ConnString opens a new connection from a pgx connection string each time (a string
// that does not parse is the error of every attempt).
func ConnString(dsn string) Connector {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return func(context.Context, func(*pgx.Conn) error) error { return err }
	}
	return ConnConfig(cfg)
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

// ConnConfig opens a new connection from cfg each time; the Store's CommitWaker uses
// the configuration of the Store's pool (dialled apart from the pool, which keeps its
// size and never waits for a free connection).
func ConnConfig(cfg *pgx.ConnConfig) Connector {
	return func(ctx context.Context, listen func(*pgx.Conn) error) error {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return listen(conn)
	}
}

// Defaults of a Listener.
const (
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultMaxReconnectDelay = 10 * time.Second
	DefaultCheckInterval     = 30 * time.Second
)

// ErrNotReceiving is reported (WithListenErrors) when a Listener's connection took
// its LISTEN but did not receive the NOTIFY the Listener sent itself: the sign of a
// pooler in transaction mode (PgBouncer's pool_mode=transaction) between the Listener
// and PostgreSQL, which hands the LISTEN and the NOTIFY to different server
// connections. The Listener tries again after its reconnect delay; the Processor
// polls meanwhile.
var ErrNotReceiving = errors.New("postgres: the Listener's own NOTIFY did not arrive: is a pooler in transaction mode in between? Point the Listener at PostgreSQL itself, or use WithoutNotify")

// checkPrefix starts the payload of a Listener's NOTIFY to itself; Enqueue's
// notifications have an empty payload. Every Listener of the channel sees every
// check and ignores it.
const checkPrefix = "brokerguard-check:"

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
	timeout  time.Duration // each step: LISTEN, a check's round trip
	interval time.Duration // idle time after which the connection is checked
	checks   atomic.Uint64 // numbers the checks' payloads
	db       Execer        // sends the checks' notifications: the Store's DB
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
// before the Listener tries again (ErrNotReceiving among them), instead of logging it
// through log/slog's default logger at level Warn.
func WithListenErrors(f func(error)) ListenerOption {
	return func(l *Listener) { l.onError = f }
}

// WithReceiveCheck sets how long the connection may be idle before the Listener
// checks it (default 30s): it sends a NOTIFY to itself and expects it back within
// the Store's timeout (WithTimeout), or reconnects. The same check runs after every
// LISTEN. A connection that went silent (a lost host, a failover that moved the
// address) is thus noticed within interval + timeout, not when the kernel gives up
// on it.
func WithReceiveCheck(interval time.Duration) ListenerOption {
	return func(l *Listener) { l.interval = interval }
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
		minDelay: DefaultReconnectDelay, maxDelay: DefaultMaxReconnectDelay,
		timeout: s.timeout, interval: DefaultCheckInterval, onError: logListenError, db: s.db}
	for _, o := range opts {
		o(l)
	}
	if l.minDelay <= 0 || l.maxDelay < l.minDelay {
		return nil, fmt.Errorf("postgres: WithReconnectDelay(%v, %v): want 0 < first <= max", l.minDelay, l.maxDelay)
	}
	if l.interval <= 0 {
		return nil, fmt.Errorf("postgres: WithReceiveCheck(%v): must be positive", l.interval)
	}
	if l.onError == nil {
		l.onError = func(error) {}
	}
	if l.timeout <= 0 { // the Store has no bound of its own; the check still needs one
		l.timeout = DefaultTimeout
	}
	return l, nil
}

func logListenError(err error) {
	slog.Default().Warn("brokerguard outbox: listener error; it reconnects and the Processor polls meanwhile", "err", err)
}

// CommitWaker implements outbox.CommitWaker, so that a Processor on this Store wakes
// on commit without being given a Listener: it is a Listener on connections of its
// own made from the configuration of the pool given to New. It is nil when that was
// no *pgxpool.Pool (give the Processor a Listener with outbox.WithWaker) or when the
// Store was made WithoutNotify (behind a pooler in transaction mode).
func (s *Store) CommitWaker() outbox.Waker {
	if s.quiet || s.pool == nil {
		return nil
	}
	l, err := s.Listener(ConnConfig(s.pool.Config().ConnConfig))
	if err != nil { // cannot happen with the default options
		return nil
	}
	return l
}

// within runs f with the Listener's step timeout.
func (l *Listener) within(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return f(ctx)
}

// check sends a NOTIFY to the Listener's channel and waits until its connection
// receives it, waking for the notifications that arrive meanwhile.
func (l *Listener) check(ctx context.Context, conn *pgx.Conn, wake func()) error {
	payload := checkPrefix + strconv.FormatUint(uint64(conn.PgConn().PID()), 10) + ":" + strconv.FormatUint(l.checks.Add(1), 10)
	return l.within(ctx, func(cctx context.Context) error {
		// Sent from another connection (the Store's): behind a pooler in transaction
		// mode, the server connection that took the LISTEN is not linked to this one
		// when the notification arrives, so it never comes.
		if _, err := l.db.Exec(cctx, "SELECT pg_notify($1, $2)", l.channel, payload); err != nil {
			return fmt.Errorf("receive check: sending the NOTIFY: %w", err)
		}
		for {
			n, err := conn.WaitForNotification(cctx)
			switch {
			case err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
				return fmt.Errorf("%w (waited %v)", ErrNotReceiving, l.timeout)
			case err != nil:
				return err
			case n.Payload == payload:
				return nil
			case !strings.HasPrefix(n.Payload, checkPrefix):
				wake()
			}
		}
	})
}

// Listen implements outbox.Waker. It returns only when ctx ends.
func (l *Listener) Listen(ctx context.Context, wake func()) error {
	delay := l.minDelay
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := l.connect(ctx, func(conn *pgx.Conn) error {
			err := l.within(ctx, func(ctx context.Context) error {
				_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize())
				return err
			})
			if err != nil {
				return err
			}
			if err := l.check(ctx, conn, wake); err != nil {
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
				wctx, cancel := context.WithTimeout(ctx, l.interval)
				n, err := conn.WaitForNotification(wctx)
				idle := err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded)
				cancel()
				switch {
				case idle: // quiet for a while: is the connection still there?
					if err := l.check(ctx, conn, wake); err != nil {
						return err
					}
				case err != nil:
					return err
				case !strings.HasPrefix(n.Payload, checkPrefix):
					wake()
				}
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		l.onError(fmt.Errorf("postgres: listen on %q: %w", l.channel, err))
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		delay = min(2*delay, l.maxDelay)
	}
}
