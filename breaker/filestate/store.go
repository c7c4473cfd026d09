package filestate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// DefaultMaxStaleness is how old a process-local snapshot of a closed or open circuit
// may be and still decide an Acquire, unless sharedstate.WithMaxStaleness says
// otherwise (0 there reads the file on every Acquire).
const DefaultMaxStaleness = 250 * time.Millisecond

// MaxIdentityLen is the longest identity, in bytes.
const MaxIdentityLen = 128

// Option configures a Store: the options every shared backend takes
// (sharedstate.WithClock, WithMaxStaleness, WithIOTimeout, ...), applied to each of
// the store's circuits. Here MaxStaleness defaults to DefaultMaxStaleness, a failed
// read is retried at once (RetryDelay 0), and IOTimeout bounds the wait for another
// process's file lock: a circuit that cannot get the lock in time treats it as a store
// that refuses writes (sharedstate.WithStoreFailure). Every process sharing a root
// must use the same clock, since the time is written to the state files.
type Option = sharedstate.Option

// Store keeps the circuits of one root directory, shared by the cooperating processes
// of one host that open the same root. It is safe for concurrent use and holds no open
// files or goroutines between calls, so it needs no Close. The zero Store is not
// usable; call Open.
type Store struct {
	root   string
	cfg    sharedstate.Config // the options', for every circuit
	prefix string             // of Factory's identities

	mu       sync.Mutex
	circuits map[string]*Circuit // guarded by mu
}

// Open returns the store rooted at root, creating the directory (and missing parents)
// with mode 0700. An existing root must be a directory owned by this process's
// effective user and inaccessible to group and others; Open refuses any other root with
// an error matching ErrNotPrivate rather than changing its permissions, because a
// directory others can write lets them forge or delete circuit state.
func Open(root string, opts ...Option) (*Store, error) {
	if root == "" {
		return nil, errors.New("filestate: empty root directory")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("filestate: root %s: %w", root, err)
	}
	s := &Store{root: abs, circuits: map[string]*Circuit{}}
	// RetryDelay -1: a failed read is retried at once.
	base := sharedstate.Config{MaxStaleness: DefaultMaxStaleness, RetryDelay: -1, IOTimeout: sharedstate.DefaultIOTimeout}
	if s.cfg, s.prefix, err = sharedstate.Apply(base, &struct{}{}, opts); err != nil {
		return nil, fmt.Errorf("filestate: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("filestate: create root: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("filestate: root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("filestate: root %s is not a directory: %w", abs, ErrNotPrivate)
	}
	if err := checkPrivate(fi); err != nil {
		return nil, fmt.Errorf("filestate: root %s %v; want a directory of mode 0700 owned by uid %d: %w", abs, err, os.Geteuid(), ErrNotPrivate)
	}
	return s, nil
}

// Root returns the store's directory as an absolute path.
func (s *Store) Root() string { return s.root }

// checkPrivate says what is wrong when fi is owned by someone else or grants any
// permission to group or others.
func checkPrivate(fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("has mode %04o, which grants access to group or others", perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("is owned by uid %d, not by this process (uid %d)", st.Uid, os.Geteuid())
	}
	return nil
}

// nameOf is the file name (without extension) of identity's files.
func nameOf(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:])
}

func (s *Store) statePath(identity string) string {
	return filepath.Join(s.root, nameOf(identity)+".json")
}

// Circuit returns the circuit named identity, governed by p. The same identity gets
// the same *Circuit for the life of the store; asking for it with a different policy
// fails with a *PolicyMismatchError.
//
// An identity starts with an ASCII letter and holds only ASCII letters, digits, '.',
// '_', ':' and '-', at most MaxIdentityLen bytes; the state file is named by its
// SHA-256, so the name itself never reaches the filesystem. Use a fixed name per
// dependency, not one taken from a request.
//
// p must be valid, have Scope breaker.SingleHost, and count consecutive failures:
// window mode (FailureWindow > 0) is refused, since its time buckets would make every
// call a file write. MaxInFlight bounds the calls in flight in this process only.
// Circuit reads no file: the first Acquire does.
func (s *Store) Circuit(identity string, p breaker.Policy) (*Circuit, error) {
	if err := validateIdentity(identity); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("filestate: circuit %s: %w", identity, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.circuits[identity]; ok {
		if err := sharedstate.ComparePolicies(identity, c.policy, p); err != nil {
			return nil, fmt.Errorf("filestate: circuit %s is already open under another policy: %w", identity, err)
		}
		return c, nil
	}
	statePath := s.statePath(identity)
	cfg := s.cfg
	cfg.Identity, cfg.Policy, cfg.Scope, cfg.Driver = identity, p, breaker.SingleHost, files{s}
	cfg.Unavailable = func(err error) error {
		return &StateError{Identity: identity, Path: statePath, Op: "read", Err: err}
	}
	sc, err := sharedstate.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("filestate: %w", err)
	}
	c := &Circuit{Circuit: sc, policy: p}
	s.circuits[identity] = c
	return c, nil
}

// Driver returns the sharedstate.Driver (also a sharedstate.Lister) that keeps the
// store's records, one file per identity: what the store's circuits are built on, and
// what operators' tools read and hold them through (sharedstate.Operator, "brokerguard
// circuits --state-dir"). circuittest.TestDriver checks it.
// Identities must follow the rule of Circuit.
func (s *Store) Driver() sharedstate.Driver { return files{s} }

// Factory returns a registry factory that makes the store's circuit for each
// destination, named by its "broker:name" form after sharedstate.WithIdentityPrefix's
// prefix. Pass it to registry.WithCircuitFactory
// with breaker.SingleHost. A destination whose form is not a valid identity fails with
// an error matching ErrInvalidIdentity.
func (s *Store) Factory() func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		c, err := s.Circuit(s.prefix+d.String(), p)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// Clear discards the state of the circuit named identity, corrupt or not, under its
// lock, by writing a tombstone (sharedstate.Tombstone) in its place: the next Acquire
// in any process starts a closed circuit with no failures and a new generation. (A
// state file deleted by hand is written back by any process that knows the circuit
// open: the engine's amnesia repair.) Use it to recover from a corrupt record or to change a circuit's
// policy on purpose; drain the calls in flight first, since their outcomes are
// otherwise lost. A circuit this store has handed out forgets its snapshot at once;
// other processes notice within their staleness bound.
func (s *Store) Clear(identity string) error {
	if err := validateIdentity(identity); err != nil {
		return err
	}
	name := nameOf(identity)
	statePath := filepath.Join(s.root, name+".json")
	s.mu.Lock()
	c := s.circuits[identity]
	s.mu.Unlock()
	if c != nil {
		defer c.Forget()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.IOTimeout)
	defer cancel()
	unlock, err := lockFile(ctx, identity, filepath.Join(s.root, name+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	// A tombstone, not a removal: a process that knows the circuit open would write a
	// removed record back (the engine's amnesia repair), while a tombstone tells every
	// process to start afresh. A record that cannot be read is replaced all the same.
	var prev uint64
	if cur, err := readState(identity, statePath); err == nil && cur != nil {
		prev = cur.Version
	} else if err != nil {
		// A corrupt, foreign or non-regular file (a FIFO, a directory) is removed first.
		if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &StateError{Identity: identity, Path: statePath, Op: "remove", Err: err}
		}
	}
	tomb := &fileRecord{Format: recordFormat, Identity: identity, Record: sharedstate.Tombstone(prev, s.wallNow())}
	return writeState(identity, s.root, name, statePath, tomb)
}

// validateIdentity enforces the naming rule of Store.Circuit.
func validateIdentity(id string) error {
	bad := func(reason string) error {
		shown := id
		if len(shown) > MaxIdentityLen {
			shown = shown[:MaxIdentityLen] + "..."
		}
		return fmt.Errorf("%w %q: %s", ErrInvalidIdentity, shown, reason)
	}
	switch {
	case id == "":
		return bad("empty")
	case len(id) > MaxIdentityLen:
		return bad(fmt.Sprintf("%d bytes, more than %d", len(id), MaxIdentityLen))
	case !isLetter(id[0]):
		return bad("must start with an ASCII letter")
	}
	for i := range len(id) {
		c := id[i]
		if !isLetter(c) && (c < '0' || c > '9') && c != '.' && c != '_' && c != ':' && c != '-' {
			return bad(fmt.Sprintf("byte %d (%q) is not a letter, digit, '.', '_', ':' or '-'", i, c))
		}
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// noFollow refuses to open a symbolic link in place of a state or lock file, and
// opens without blocking: a FIFO (or a device) in place of one would otherwise block
// the open until a writer came, past every deadline. checkRegular then refuses
// anything but a regular file; on a regular file O_NONBLOCK changes nothing.
const noFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// lockFile takes an exclusive flock on path, creating the file with mode 0600, and
// returns the function that releases it. It waits for another holder only as long as
// ctx allows, polling with a short back-off rather than blocking in the kernel, so
// that a stalled holder cannot keep a caller past its deadline. The lock file is never
// removed: removing it while others wait on it would let two processes lock two
// different files. The kernel releases the lock when its holder dies, so a crash
// leaves nothing locked.
func lockFile(ctx context.Context, identity, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return nil, &StateError{Identity: identity, Path: path, Op: "open", Err: err}
	}
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, &StateError{Identity: identity, Path: path, Op: "open", Err: err}
	}
	var timer *time.Timer
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, &StateError{Identity: identity, Path: path, Op: "lock", Err: fmt.Errorf("another process holds the lock: %w", ctx.Err())}
		case <-timer.C:
		}
	}
	if err != nil {
		f.Close()
		return nil, &StateError{Identity: identity, Path: path, Op: "lock", Err: err}
	}
	// Closing the only descriptor of the open file releases the lock.
	return func() { f.Close() }, nil
}

// checkRegular refuses a file that is not a private regular file.
func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: not a regular file (%v)", ErrNotPrivate, fi.Mode().Type())
	}
	if err := checkPrivate(fi); err != nil {
		return fmt.Errorf("%w: %v", ErrNotPrivate, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// wallNow is the store's wall time in Unix nanoseconds.
func (s *Store) wallNow() int64 {
	if s.cfg.Clock == nil {
		return time.Now().UnixNano()
	}
	return s.cfg.Clock.Now().UnixNano()
}
