package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// TestFailedCommandsPrintNothingOnStdout: every on-call command that fails exits
// with its documented code and leaves stdout empty, --json or not, so that a script
// piping it into jq never reads a document (an empty list, say) from a failed call.
func TestFailedCommandsPrintNothingOnStdout(t *testing.T) {
	clearSourceEnv(t)
	t.Setenv("DATABASE_URL", "")
	t.Setenv("MYSQL_DSN", "") // "outbox stats" with no source at all is a usage error
	_, url := adminServer(t)
	unreachable := "http://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"circuits", "list", "--json", "--url", unreachable}, 1},
		{[]string{"circuits", "list", "--url", unreachable}, 1},
		{[]string{"circuits", "list", "--json", "--url", url + "/nowhere"}, 1},
		{[]string{"circuits", "show", "kafka:payments", "--json", "--url", unreachable}, 1},
		{[]string{"circuits", "show", "kafka:nope", "--json", "--url", url}, exitNotFound},
		{[]string{"circuits", "force-open", "kafka:payments", "--for", "1m", "--json", "--url", url, "--token", "wrong-token-0123456789"}, exitRefused},
		{[]string{"circuits", "list", "--json", "--state-dir", privateDir(t)}, exitNotFound},
		{[]string{"circuits", "list", "--json"}, 2},
		{[]string{"circuits", "explode", "--json"}, 2},
		{[]string{"outbox", "stats", "--json", "--url", unreachable}, 1},
		{[]string{"outbox", "dead", "--json", "--url", unreachable}, 1},
		{[]string{"outbox", "requeue", "7", "--json", "--url", url, "--token", "wrong-token-0123456789"}, exitRefused},
		{[]string{"outbox", "stats", "--json"}, 2},
		{[]string{"demo", "--rate", "0"}, 1},
		{[]string{"nothing"}, 2},
	} {
		out, errOut, code := runCLI(tc.args[0], tc.args[1:]...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut)
		}
		if out != "" {
			t.Errorf("%v failed (exit %d) and printed on stdout:\n%s", tc.args, code, out)
		}
		if errOut == "" {
			t.Errorf("%v failed (exit %d) and said nothing on stderr", tc.args, code)
		}
	}
}

// TestPartlyFailedListingGoesToStderr: a shared-state listing that read some records
// and not others exits 1 with an empty stdout, and shows on stderr the circuits it
// did read, then the error.
func TestPartlyFailedListingGoesToStderr(t *testing.T) {
	clearSourceEnv(t)
	dir := privateDir(t)
	store, err := filestate.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := sharedstate.Record{Version: 1, Fingerprint: "f", State: breaker.Open, Generation: 2, Failures: 3,
		Since: now.UnixNano(), OpenUntil: now.Add(time.Minute).UnixNano()}
	if err := store.Driver().Replace(context.Background(), "kafka:orders", 0, rec); err != nil {
		t.Fatal(err)
	}
	// A state file of the store's naming that is not a record.
	if err := os.WriteFile(filepath.Join(dir, strings.Repeat("ab", 32)+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		args := []string{"list", "--state-dir", dir}
		if asJSON {
			args = append(args, "--json")
		}
		out, errOut, code := cli(args...)
		if code != 1 || out != "" {
			t.Fatalf("%v: exit %d, stdout %q; want 1 and nothing", args, code, out)
		}
		if !strings.Contains(errOut, "read before the failure") || !strings.Contains(errOut, "kafka:orders") {
			t.Errorf("%v: stderr does not show what was read:\n%s", args, errOut)
		}
	}
}

// privateDir is a new directory a filestate store accepts (mode 0700).
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
