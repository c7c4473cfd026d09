package filestate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

func TestCorruptRecordsFailClosedUntilCleared(t *testing.T) {
	const id = "kafka:orders"
	e := newEnv(t)
	call(t, e.circuit(id, policy), breaker.Failure)
	valid, err := os.ReadFile(e.statePath(id))
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) []byte {
		if !strings.Contains(string(valid), old) {
			t.Fatalf("record %s lacks %s", valid, old)
		}
		return []byte(strings.Replace(string(valid), old, new, 1))
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:len(valid)/2]},
		{"garbage", []byte("\x00\xffnot json at all")},
		{"unknown field", replace(`"format":2`, `"format":2,"owner":"someone"`)},
		{"wrong format", replace(`"format":2`, `"format":1`)},
		{"missing format", replace(`"format":2,`, ``)},
		{"another circuit's record", replace(`"identity":"kafka:orders"`, `"identity":"kafka:payments"`)},
		{"empty fingerprint", regexp.MustCompile(`"fingerprint":"[0-9a-f]*"`).ReplaceAll(valid, []byte(`"fingerprint":""`))},
		{"unknown state", replace(`"state":0`, `"state":7`)},
		{"negative failures", replace(`"failures":1`, `"failures":-1`)},
		{"open without a deadline", replace(`"state":0`, `"state":1`)},
		{"leases while closed", replace(`"failures":1`, `"failures":1,"leases":[{"id":1,"owner":"x","expires":5}]`)},
		{"a second record", append(append([]byte{}, valid...), valid...)},
		{"a string for a number", replace(`"failures":1`, `"failures":"1"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(e.statePath(id), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s := e.store()
			c, err := s.Circuit(id, policy)
			if err != nil {
				t.Fatal(err)
			}
			err = unavailable(t, c, filestate.ErrCorrupt)
			var se *filestate.StateError
			if !errors.As(err, &se) || se.Path != e.statePath(id) || se.Identity != id {
				t.Fatalf("error %v does not name the file %s and the circuit", err, e.statePath(id))
			}
			if !strings.Contains(err.Error(), se.Path) || !strings.Contains(err.Error(), id) {
				t.Fatalf("message %q does not name the file and the circuit", err)
			}
			if err := s.Clear(id); err != nil {
				t.Fatalf("Clear: %v", err)
			}
			call(t, c, breaker.Failure)
			if snap := wantState(t, c, breaker.Closed); snap.Failures != 1 {
				t.Fatalf("after Clear: %+v, want a fresh circuit with the new failure", snap)
			}
		})
	}
}

func TestRootIsCreatedPrivateAndFilesAre0600(t *testing.T) {
	e := newEnv(t)
	e.root = filepath.Join(e.root, "nested")
	call(t, e.circuit("kafka:orders", policy), breaker.Failure)
	for _, p := range []string{e.root, filepath.Dir(e.root)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s has mode %04o, want 0700", p, perm)
		}
	}
	entries, err := os.ReadDir(e.root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range entries {
		names = append(names, de.Name())
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 || !fi.Mode().IsRegular() {
			t.Errorf("%s has mode %v, want a regular file of mode 0600", de.Name(), fi.Mode())
		}
	}
	state, lock := filepath.Base(e.statePath("kafka:orders")), strings.TrimSuffix(filepath.Base(e.statePath("kafka:orders")), ".json")+".lock"
	if len(names) != 2 || names[0] != state || names[1] != lock {
		t.Fatalf("root holds %v, want exactly the state and lock files %s, %s", names, state, lock)
	}
}

func TestRootAccessibleToOthersIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o770, 0o701} {
		root := filepath.Join(t.TempDir(), "circuits")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(root, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := filestate.Open(root); !errors.Is(err, filestate.ErrNotPrivate) {
			t.Errorf("Open of a %04o root: %v, want ErrNotPrivate", mode, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filestate.Open(file); err == nil {
		t.Error("Open of a regular file succeeded")
	}
	if _, err := filestate.Open(""); err == nil {
		t.Error("Open of an empty root succeeded")
	}
}

func TestStateFilesThatAreNotPrivateAreRefused(t *testing.T) {
	const id = "kafka:orders"
	t.Run("readable by others", func(t *testing.T) {
		e := newEnv(t)
		call(t, e.circuit(id, policy), breaker.Success)
		if err := os.Chmod(e.statePath(id), 0o644); err != nil {
			t.Fatal(err)
		}
		unavailable(t, e.circuit(id, policy), filestate.ErrNotPrivate)
	})
	t.Run("lock file writable by others", func(t *testing.T) {
		e := newEnv(t)
		c := e.circuit(id, policy, sharedstate.WithStoreFailure(sharedstate.FailClosed))
		call(t, c, breaker.Success)
		if err := os.Chmod(strings.TrimSuffix(e.statePath(id), ".json")+".lock", 0o666); err != nil {
			t.Fatal(err)
		}
		// Admission reads without the lock; the first write needs it.
		if acquire(t, c).Complete(breaker.Failure) {
			t.Fatal("a failure was recorded through a lock file others can write")
		}
	})
	t.Run("symbolic link", func(t *testing.T) {
		e := newEnv(t)
		call(t, e.circuit(id, policy), breaker.Success)
		elsewhere := filepath.Join(t.TempDir(), "record.json")
		if err := os.Rename(e.statePath(id), elsewhere); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, e.statePath(id)); err != nil {
			t.Fatal(err)
		}
		unavailable(t, e.circuit(id, policy))
	})
	// A FIFO blocks an open for reading until a writer comes; nothing is ever written
	// to it, so a read that waited would wait past every deadline.
	for _, which := range []string{".json", ".lock"} {
		t.Run("FIFO in place of the "+which+" file", func(t *testing.T) {
			e := newEnv(t)
			c := e.circuit(id, policy)
			call(t, c, breaker.Success)
			path := strings.TrimSuffix(e.statePath(id), ".json") + which
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			fresh := e.circuit(id, policy)
			go func() {
				p, err := fresh.Acquire(context.Background())
				if err == nil {
					p.Complete(breaker.Failure) // a write takes the lock
				}
				done <- err
			}()
			select {
			case err := <-done:
				if which == ".json" && !errors.Is(err, filestate.ErrNotPrivate) {
					t.Fatalf("Acquire over a FIFO: %v; want ErrNotPrivate", err)
				}
			case <-time.After(5 * time.Second):
				// Unblock the goroutine so that the test ends.
				if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatal("Acquire blocked on a FIFO in the state directory")
			}
		})
	}
	t.Run("directory in its place", func(t *testing.T) {
		e := newEnv(t)
		c := e.circuit(id, policy)
		if err := os.Mkdir(e.statePath(id), 0o700); err != nil {
			t.Fatal(err)
		}
		unavailable(t, c, filestate.ErrNotPrivate)
	})
}

// An upgrade keeps the state a previous build wrote: its open circuit stays open, and
// the next write stores the new layout.
func TestStateOfThePreviousLayoutIsKept(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	until := t0.Add(time.Minute).UnixNano()
	old := `{"version":1,"identity":"kafka:orders","fingerprint":"` + backend.Fingerprint(policy) + `","state":"open",` +
		`"generation":9,"failures":3,"open_until":` + strconv.FormatInt(until, 10) + `,"failed_probes":0,"successes":0,"probes":[],"next_lease":1}`
	if err := os.MkdirAll(e.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.statePath("kafka:orders"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if oe := rejected(t, c); oe.NotBefore.UnixNano() != until {
		t.Fatalf("NotBefore %v; want the stored deadline", oe.NotBefore)
	}
	e.clock.Advance(time.Minute)
	acquire(t, c).Complete(breaker.Success) // the probe closes it, in the new layout
	data, err := os.ReadFile(e.statePath("kafka:orders"))
	if err != nil || !strings.Contains(string(data), `"format":2`) {
		t.Fatalf("record after a write: %s, %v; want format 2", data, err)
	}
	wantState(t, c, breaker.Closed)
}

// TestListSkipsOtherFilesAndReportsUnreadableOnes: a listing names every circuit whose
// record it can read, passes over lock, temporary and foreign files, and reports a
// corrupt record by its path after naming the others.
func TestListSkipsOtherFilesAndReportsUnreadableOnes(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"kafka:orders", "kafka:payments", "sqs:audit"} {
		call(t, e.circuit(id, policy), breaker.Success)
	}
	corrupt := e.statePath("kafka:broken")
	orders, err := os.ReadFile(e.statePath("kafka:orders"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		e.statePath("kafka:copied"):         string(orders), // a record under another identity's name
		corrupt:                             "not json",
		filepath.Join(e.root, "notes.json"): "{}", // not named by a digest
		filepath.Join(e.root, "."+filepath.Base(corrupt)+".tmp-1"):                                          "{}",
		filepath.Join(e.root, strings.Repeat("ab", 32)+".json.bak"):                                         "{}",
		filepath.Join(e.root, strings.TrimSuffix(filepath.Base(e.statePath("sqs:audit")), ".json")+".lock"): "",
	} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	err = e.store().Driver().(sharedstate.Lister).List(context.Background(), "kafka:", func(id string) error {
		ids = append(ids, id)
		return nil
	})
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"kafka:orders", "kafka:payments"}) {
		t.Fatalf("List(\"kafka:\") named %q", ids)
	}
	if !errors.Is(err, filestate.ErrCorrupt) || !strings.Contains(err.Error(), corrupt) {
		t.Fatalf("List with a corrupt record = %v; want ErrCorrupt naming %s", err, corrupt)
	}
}

// A state file larger than any record is refused after reading at most the bound, not
// decoded (as on every store: a shared record's size is checked before it is decoded).
func TestOversizedStateFileIsRefusedUnread(t *testing.T) {
	const id = "kafka:orders"
	e := newEnv(t)
	call(t, e.circuit(id, policy), breaker.Success)
	big := append([]byte(`{"format":2,"identity":"kafka:orders","leases":[`), []byte(strings.Repeat(`{"id":1},`, 1<<20))...)
	if err := os.WriteFile(e.statePath(id), big, 0o600); err != nil {
		t.Fatal(err)
	}
	err := unavailable(t, e.circuit(id, policy), filestate.ErrCorrupt)
	if !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Acquire over a %d-byte state file: %v; want it refused by its size", len(big), err)
	}
}

func TestRegistryGuardsThroughFileCircuits(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.FailureThreshold = 1
	reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithCircuitFactory(breaker.SingleHost, e.store().Factory()))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error {
		calls++
		return errors.New("connection refused")
	}), nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	if err := pub.Publish(ctx, orders, transport.Message{Value: []byte("o")}); err == nil || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("first publish: %v, want the publisher's error", err)
	}
	if err := pub.Publish(ctx, orders, transport.Message{Value: []byte("o")}); !errors.Is(err, breaker.ErrOpen) || calls != 1 {
		t.Fatalf("second publish: %v after %d calls, want a rejection without a call", err, calls)
	}
	// Another process sees the destination's circuit open.
	rejected(t, e.circuit("kafka:orders", p))

	// A destination whose name is not a valid identity is refused, not renamed.
	bad := transport.Destination{Broker: "amqp", Name: "events/eu"}
	if _, err := reg.Circuit(bad); !errors.Is(err, filestate.ErrInvalidIdentity) {
		t.Fatalf("Circuit(%v): %v, want ErrInvalidIdentity", bad, err)
	}
}

type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
