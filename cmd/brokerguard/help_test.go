package main

import (
	"context"
	"strings"
	"testing"
)

// Asking for help is not a usage error: the usage goes to stdout and run returns nil,
// so the command exits 0.
func TestTopLevelHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errOut strings.Builder
		if err := run(context.Background(), []string{arg}, &out, &errOut); err != nil || !strings.Contains(out.String(), "usage: brokerguard COMMAND") {
			t.Errorf("brokerguard %s: %v, stdout %q", arg, err, out.String())
		}
	}
}
