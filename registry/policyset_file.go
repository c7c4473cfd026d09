package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// PolicyFile keeps a registry's policy set in step with a JSON file (the PolicySet
// format: what `brokerguard policy show --json` prints under "set"), so that a
// service can take policy changes from a mounted config file without code. Each edit
// that changes the file's content is validated and applied as the next version, with
// author "file:PATH"; an edit that does not validate is reported (Poll's error, the
// error hook) and the set in force stays. A change made meanwhile through the admin
// API stays in force until the file's content changes again.
//
// The file is compared by content, not by modification time: a Kubernetes config map
// is swapped by a rename that may keep or reset times.
type PolicyFile struct {
	reg     *Registry
	path    string
	onError func(error)

	mu   sync.Mutex // serializes Poll; guards last
	last string     // digest of the content last seen, applied or not
}

// NewPolicyFile returns a PolicyFile that applies path to r. onError is told of a
// file that cannot be read or applied, once per content (nil: log/slog's default
// logger, at level Error). Nothing is read until Poll or Run.
func NewPolicyFile(r *Registry, path string, onError func(error)) *PolicyFile {
	if onError == nil {
		onError = func(err error) { slog.Error("brokerguard registry: policy file", "err", err) }
	}
	return &PolicyFile{reg: r, path: path, onError: onError}
}

// Poll reads the file and, when its content changed since the last Poll, applies it;
// it reports whether a new version was applied. It also reverts an expired temporary
// version (Registry.ExpirePolicies). An error names the file, and the destination and
// field that are wrong; the same content is not reported twice.
func (f *PolicyFile) Poll() (bool, error) {
	f.reg.ExpirePolicies()
	b, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("registry: policy file %s: %w", f.path, err)
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	f.mu.Lock()
	defer f.mu.Unlock()
	if digest == f.last {
		return false, nil
	}
	f.last = digest
	var set PolicySet
	if err := json.Unmarshal(b, &set); err != nil {
		return false, fmt.Errorf("registry: policy file %s: %w", f.path, err)
	}
	if set.Fingerprint() == f.reg.Policies().Fingerprint {
		return false, nil // already in force (a restart, or the same edit made by hand)
	}
	_, _, err = f.reg.ApplyPolicies(PolicyChange{Set: set, Author: "file:" + f.path,
		Reason: "policy file changed (content " + digest[:12] + ")"})
	if err != nil {
		return false, fmt.Errorf("registry: policy file %s: %w", f.path, err)
	}
	return true, nil
}

// Run polls the file every interval until ctx ends, telling the error hook of each
// error, and returns ctx's error. It is the only goroutine a PolicyFile needs; start
// it with the service and stop it with its context.
func (f *PolicyFile) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("registry: PolicyFile.Run(%v): the interval must be positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var reported error
	for {
		if _, err := f.Poll(); err != nil {
			if reported == nil || err.Error() != reported.Error() {
				f.onError(err)
			}
			reported = err
		} else {
			reported = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
