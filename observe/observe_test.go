package observe_test

import (
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/observe"
	"github.com/brokerguard/brokerguard/registry"
)

// Bad input to any of the three parts fails New, naming what is wrong.
func TestNewRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		policy registry.Policy
		opts   []observe.Option
		want   string
	}{
		{registry.Policy{}, nil, "FailureThreshold is 0"},
		{registry.DefaultPolicy(), []observe.Option{observe.WithJournalSize(0)}, "observe: WithJournalSize"},
		{registry.DefaultPolicy(), []observe.Option{observe.WithAdmin(admin.WithMutations("short"))}, "admin:"},
	} {
		if _, err := observe.New(tc.policy, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
	obs, err := observe.New(registry.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if obs.Registry == nil || obs.Metrics == nil || obs.Admin == nil || obs.Journal == nil || !obs.Registry.CountsCalls() {
		t.Fatalf("New: %+v", obs)
	}
	if err := obs.Close(); err != nil {
		t.Fatal(err)
	}
}
