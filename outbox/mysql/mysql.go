// Package mysql is an outbox.Store on MySQL 8.0.1+ and MariaDB 10.6+, through
// database/sql and github.com/go-sql-driver/mysql.
//
// Rows live in the table brokerguard_outbox, held destinations in
// brokerguard_outbox_hold, and the row that takes claims one at a time in
// brokerguard_outbox_lock, created by Migrate from the embedded Schema (or by the
// caller's own migration tool from the same SQL). Applications enqueue inside their
// own transaction and commit through the Store, which wakes the relays of the
// process:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	// ... the business change ...
//	store.Enqueue(ctx, tx, outbox.Entry{Destination: d, Message: m})
//	store.Commit(tx) // the row exists exactly when the change does; relays wake
//
// MySQL has no NOTIFY: Commit (or Wake, after the caller's own commit) signals the
// Processors of this process through the Store's CommitWaker, and Processors in other
// processes find the rows at their poll interval (outbox.WithPollInterval).
//
// A claim runs at READ COMMITTED, whatever the session's level: at REPEATABLE READ,
// InnoDB's gap locks on the rows a claim reads held up the applications' inserts of
// new rows until the claim committed. It takes the claims' lock row, picks the due
// rows of each destination that is not held in id order through an index (so a held
// backlog costs a claim nothing), locks them by primary key with FOR UPDATE SKIP
// LOCKED and leases them with UPDATE ... WHERE id IN (...): MariaDB has neither
// UPDATE ... RETURNING nor a LIMIT in an IN subquery. Every time decision uses the
// time the Processor passes in, never the server's clock; times are stored as UTC
// DATETIME(6), whatever the connection's time zone and parseTime settings.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// Schema is the SQL that creates the outbox tables, statements separated by ";"
// at the end of a line. Each statement can be run more than once.
//
//go:embed schema.sql
var Schema string

// Table is the default name of the outbox table; the hold and lock tables are named
// after it with the suffixes "_hold" and "_lock".
const Table = "brokerguard_outbox"

// DefaultTimeout bounds each call of a Store but Enqueue, unless WithTimeout says
// otherwise: a third of outbox.DefaultLease, as the Processor's own store timeout.
const DefaultTimeout = 10 * time.Second

// ErrNotFound is returned by Get for an id with no row.
var ErrNotFound = errors.New("mysql: outbox row not found")

// Option configures a Store (and Migrate).
type Option func(*config)

type config struct {
	clock      breaker.Clock
	table      string
	timeout    time.Duration
	timeoutSet bool
}

// WithClock makes Enqueue, Backlog and Fail (the time a row becomes dead) read time
// from c (default time.Now). Give it the Processor's clock.
func WithClock(c breaker.Clock) Option { return func(o *config) { o.clock = c } }

// WithTable makes the Store (and Migrate) use the table name instead of Table, in
// the connection's database; the hold and lock tables take its name with their
// suffixes. The name must be lower-case letters, digits and underscores, not starting
// with a digit, at most 59 bytes (MySQL's 64 less the suffixes).
func WithTable(name string) Option { return func(o *config) { o.table = name } }

// WithTimeout bounds every call of the Store but Enqueue (which runs in the caller's
// transaction, on the caller's context) to d, unless the caller's context ends
// sooner; a claim also bounds its lock waits on the server to d, rounded up to whole
// seconds (innodb_lock_wait_timeout and lock_wait_timeout, restored afterwards), as
// the driver ends a call whose context ended by closing the connection, which the
// server notices only when it next writes to it. Zero or less: no bound of the
// Store's own (the callers' contexts and the server's settings only). Default
// DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *config) { o.timeout, o.timeoutSet = d, true }
}

// identifier is what WithTable accepts; nothing else reaches the SQL, which also
// quotes the names.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func newConfig(opts []Option) (config, error) {
	c := config{table: Table, timeout: DefaultTimeout}
	if err := option.ApplyAll("mysql: New", &c, opts); err != nil {
		return c, err
	}
	if !c.timeoutSet {
		c.timeout = DefaultTimeout
	}
	switch {
	case !identifier.MatchString(c.table):
		return c, fmt.Errorf("mysql: table name %q: use lower-case letters, digits and underscores, not starting with a digit", c.table)
	case len(c.table) > 59:
		return c, fmt.Errorf("mysql: table name %q is longer than 59 bytes", c.table)
	}
	return c, nil
}

// Store is an outbox.Store on a MySQL or MariaDB table. It is safe for concurrent
// use.
type Store struct {
	db      *sql.DB
	clock   breaker.Clock
	timeout time.Duration
	names   *strings.Replacer // the default tables' names in the SQL -> this Store's
	wake    wakers

	incMu sync.Mutex // guards inc
	inc   int64      // @@auto_increment_increment, once read (0: not yet)
}

var (
	_ outbox.Store         = (*Store)(nil)
	_ outbox.Purger        = (*Store)(nil)
	_ outbox.DeadLetters   = (*Store)(nil)
	_ outbox.DeadSummaries = (*Store)(nil)
	_ outbox.OnCall        = (*Store)(nil)
	_ outbox.CommitWaker   = (*Store)(nil)
)

// New returns a Store on db, whose driver must be github.com/go-sql-driver/mysql
// (or speak as it does). The tables must exist (see Migrate). The DSN's
// interpolateParams=true saves a round trip per statement; parseTime and loc may be
// anything.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: New(nil)")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, clock: c.clock, timeout: c.timeout, names: renamer(c.table)}, nil
}

// renamer rewrites SQL written for the default tables for the tables of name.
func renamer(name string) *strings.Replacer {
	q := func(s string) string { return "`" + s + "`" }
	return strings.NewReplacer(Table+"_hold", q(name+"_hold"), Table+"_lock", q(name+"_lock"), Table, q(name))
}

// sql returns stmt, written for the default tables, for the Store's.
func (s *Store) sql(stmt string) string { return s.names.Replace(stmt) }

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// Executor is where Enqueue inserts: *sql.Tx (the caller's transaction, the usual
// case), *sql.Conn and *sql.DB all are.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// header is the JSON form of a transport.Header; encoding/json writes Value in
// base64. It is the PostgreSQL store's form too.
type header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// enqueueChunk bounds the rows of one INSERT: 7 placeholders a row stay far below the
// protocol's 65,535.
const enqueueChunk = 1000

const enqueueSQL = `INSERT INTO ` + Table + ` (destination, msg_key, key_hash, payload, headers, created_at, visible_after) VALUES `

// Enqueue inserts pending rows, visible at once, with ex (the caller's transaction)
// and returns their ids in entry order. The rows exist only if the transaction
// commits; commit with Commit, or call Wake after the commit, so that the relays of
// this process claim them at once. On a *sql.DB, whose statements commit as they
// run, Enqueue wakes them itself. Every entry must be valid
// (storekit.ValidateEntry); otherwise nothing is inserted.
//
// The ids are read from the auto-increment counter: the first of each INSERT, then
// one @@auto_increment_increment apart (InnoDB gives the rows of one multi-row
// INSERT consecutive values in every innodb_autoinc_lock_mode). The increment is
// read once per Store, through its own pool.
func (s *Store) Enqueue(ctx context.Context, ex Executor, entries ...outbox.Entry) ([]int64, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 7*min(len(entries), enqueueChunk))
	for i, e := range entries {
		if err := storekit.ValidateEntry(e, 0); err != nil {
			return nil, fmt.Errorf("mysql: enqueue entry %d: %w", i, err)
		}
	}
	inc := int64(1)
	if len(entries) > 1 {
		var err error
		if inc, err = s.increment(ctx); err != nil {
			return nil, fmt.Errorf("mysql: enqueue: %w", err)
		}
	}
	at := dbTime(s.now())
	ids := make([]int64, 0, len(entries))
	for lo := 0; lo < len(entries); lo += enqueueChunk {
		chunk := entries[lo:min(lo+enqueueChunk, len(entries))]
		args = args[:0]
		for _, e := range chunk {
			var key, hash, headers any
			if e.Message.Key != nil {
				key, hash = e.Message.Key, keyHash(e.Message.Key)
			}
			if len(e.Message.Headers) > 0 {
				hs := make([]header, len(e.Message.Headers))
				for j, h := range e.Message.Headers {
					hs[j] = header(h)
				}
				b, err := json.Marshal(hs)
				if err != nil {
					return nil, fmt.Errorf("mysql: enqueue: headers: %w", err)
				}
				headers = b
			}
			payload := e.Message.Value
			if payload == nil {
				payload = []byte{} // NULL is for keys only
			}
			args = append(args, e.Destination.String(), key, hash, payload, headers, at, at)
		}
		res, err := ex.ExecContext(ctx, s.sql(enqueueSQL)+repeatList("(?, ?, ?, ?, ?, ?, ?)", len(chunk)), args...)
		if err != nil {
			return nil, fmt.Errorf("mysql: enqueue: %w", err)
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, fmt.Errorf("mysql: enqueue: %w", err)
		}
		for i := range chunk {
			ids = append(ids, first+int64(i)*inc)
		}
	}
	if _, ok := ex.(*sql.DB); ok {
		s.Wake()
	}
	return ids, nil
}

// increment returns @@auto_increment_increment, read once.
func (s *Store) increment(ctx context.Context) (int64, error) {
	s.incMu.Lock()
	defer s.incMu.Unlock()
	if s.inc == 0 {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		if err := s.db.QueryRowContext(ctx, `SELECT @@auto_increment_increment`).Scan(&s.inc); err != nil {
			s.inc = 0
			return 0, fmt.Errorf("read @@auto_increment_increment: %w", err)
		}
		s.inc = max(s.inc, 1)
	}
	return s.inc, nil
}

// keyHash is what the per-key index holds of a key: the first 8 bytes of its
// SHA-256. Rows whose hashes are equal are compared by key too, so a collision costs
// an index entry more to read, never a wrong order.
func keyHash(key []byte) int64 {
	h := sha256.Sum256(key)
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// repeatList returns n copies of item separated by commas.
func repeatList(item string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(item) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item)
	}
	return b.String()
}

// placeholders returns "?, ?, ..." for n values.
func placeholders(n int) string { return repeatList("?", n) }

// int64Args returns ids as query arguments.
func int64Args(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// columns is what scanRecord reads, in its order.
const columns = `id, destination, msg_key, payload, headers, created_at, visible_after, attempts,
	deferrals, first_deferred_at, status, last_error, lease_owner, lease_until, settled_at`

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanRecord reads the columns, then extra.
func scanRecord(row scanner, extra ...any) (outbox.Record, error) {
	var (
		r                                outbox.Record
		dest, status                     string
		headers, lastErr, owner          []byte
		created, visible                 timeCol
		firstDeferred, leaseEnd, settled timeCol
		attempts, deferrals              int
	)
	if err := row.Scan(append([]any{&r.ID, &dest, &r.Message.Key, &r.Message.Value, &headers, &created, &visible,
		&attempts, &deferrals, &firstDeferred, &status, &lastErr, &owner, &leaseEnd, &settled}, extra...)...); err != nil {
		return r, err
	}
	r.Attempts, r.Deferrals = attempts, deferrals
	r.CreatedAt, r.VisibleAfter = created.t, visible.t
	r.FirstDeferredAt, r.LeaseUntil, r.SettledAt = firstDeferred.t, leaseEnd.t, settled.t
	r.LastError, r.LeaseOwner = string(lastErr), string(owner)
	// The Processor validates the destination, so a bad one makes the row dead rather
	// than the claim fail.
	broker, name, _ := strings.Cut(dest, ":")
	r.Destination = transport.Destination{Broker: broker, Name: name}
	st, err := storekit.ParseStatus(r.ID, status)
	if err != nil {
		return r, err
	}
	r.Status = st
	if r.Message.Value == nil {
		r.Message.Value = []byte{}
	}
	if headers != nil {
		// Rows written by another program may not hold what Enqueue writes: the row is
		// returned marked, for the Processor to make it dead, rather than fail the claim.
		var hs []header
		if err := json.Unmarshal(headers, &hs); err != nil {
			r.Undecodable = "headers: " + err.Error()
		} else {
			r.Message.Headers = make([]transport.Header, len(hs))
			for i, h := range hs {
				r.Message.Headers[i] = transport.Header(h)
			}
		}
	}
	return r, nil
}

// Get reads row id. A status this version does not know is an
// *storekit.UnknownStatusError naming the row.
func (s *Store) Get(ctx context.Context, id int64) (outbox.Record, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := scanRecord(s.db.QueryRowContext(ctx, s.sql(`SELECT `+columns+` FROM `+Table+` WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("mysql: get %d: %w", id, err)
	}
	return r, nil
}

// dbTime is t as the tables store it: UTC to the microsecond, as text, so that
// neither the connection's time zone (loc) nor the driver's conversion of time.Time
// arguments changes what is written.
func dbTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

// microseconds is t as dbTime stores it.
func microseconds(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// timeCol reads a DATETIME(6) column written by dbTime, as UTC: as text (parseTime
// off) or as a time.Time whose clock reading the driver placed in the DSN's loc.
// NULL is the zero time.
type timeCol struct{ t time.Time }

func (c *timeCol) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		c.t = time.Time{}
	case time.Time:
		c.t = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
	case []byte:
		return c.parse(string(v))
	case string:
		return c.parse(v)
	default:
		return fmt.Errorf("mysql: a time column holds %T", v)
	}
	return nil
}

func (c *timeCol) parse(s string) error {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("mysql: time column: %w", err)
	}
	c.t = t
	return nil
}
