package filestate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// Circuit is one circuit whose state lives in a file of its Store's root, shared by
// every process that opens the same root and identity. The state machine is
// sharedstate.Circuit's; this package keeps the file. It implements breaker.Circuit
// and is safe for concurrent use. Get it from Store.Circuit.
type Circuit struct {
	*sharedstate.Circuit
	policy breaker.Policy // as given, to compare when the identity is asked for again
}

var _ breaker.Circuit = (*Circuit)(nil)

// Snapshot returns the circuit as this process last saw it, reading the state file
// when that view is older than the staleness bound. It cannot report an error: when
// the file cannot be read it returns the last view it had (a closed circuit of
// generation 0 if none), and Acquire reports the error.
func (c *Circuit) Snapshot() breaker.Snapshot {
	_ = c.RefreshIfStale(context.Background())
	return c.Circuit.Snapshot()
}

// files is the sharedstate.Driver of a Store's root. Reads take no lock: a record is
// only ever replaced whole, by rename. Every replace holds the circuit's file lock
// from the read that checks the version to the rename.
type files struct{ s *Store }

var _ sharedstate.Driver = files{}

// Load reads the record of id.
func (d files) Load(_ context.Context, id string) (sharedstate.Record, error) {
	r, err := readState(id, d.s.statePath(id))
	if err != nil {
		return sharedstate.Record{}, err
	}
	if r == nil {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return r.Record, nil
}

// Replace writes next under the lock if the stored version is still expect. It also
// removes the temporary files a writer killed mid-write left behind: while the lock
// is held nobody else is writing one.
func (d files) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	name := nameOf(id)
	unlock, err := lockFile(ctx, id, filepath.Join(d.s.root, name+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	path := d.s.statePath(id)
	cur, err := readState(id, path)
	if err != nil {
		return err
	}
	if cur == nil && expect != 0 || cur != nil && cur.Version != expect {
		return sharedstate.ErrConflict
	}
	removeTemporaries(d.s.root, name)
	return writeState(id, d.s.root, name, path, &fileRecord{Format: recordFormat, Identity: id, Record: next})
}

// removeTemporaries deletes the temporary files of the circuit name. Requires its
// lock held. Failures are ignored: a leftover file is harmless, only untidy.
func removeTemporaries(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// readState reads and decodes the record at path. It needs no lock: a record is only
// ever replaced whole, by rename. A missing file is (nil, nil).
func readState(identity, path string) (*fileRecord, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StateError{Identity: identity, Path: path, Op: "open", Err: err}
	}
	defer f.Close()
	if err := checkRegular(f); err != nil {
		return nil, &StateError{Identity: identity, Path: path, Op: "open", Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, &StateError{Identity: identity, Path: path, Op: "read", Err: err}
	}
	r, err := decodeRecord(data)
	if err != nil {
		return nil, &StateError{Identity: identity, Path: path, Op: "read", Err: err}
	}
	if r.Identity != identity {
		return nil, &StateError{Identity: identity, Path: path, Op: "read", Err: corrupt("the record belongs to circuit %q", r.Identity)}
	}
	return r, nil
}

// writeState replaces the record at path: a private temporary file in the same
// directory is written and synced, renamed over the old record, and the directory
// synced so the rename survives a power loss. Requires the circuit's file lock held.
func writeState(identity, dir, name, path string, r *fileRecord) error {
	fail := func(p string, err error) error {
		return &StateError{Identity: identity, Path: p, Op: "write", Err: err}
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*") // mode 0600
	if err != nil {
		return fail(dir, err)
	}
	_, err = tmp.Write(r.encode())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fail(tmp.Name(), err)
	}
	if err := syncDir(dir); err != nil {
		return fail(dir, fmt.Errorf("sync: %w", err))
	}
	return nil
}
