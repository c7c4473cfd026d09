package admin

import (
	"strconv"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
)

// Health is what a circuit says about why it is unhealthy and since when (see
// breaker.Snapshot): the last failure's error text (credentials redacted, control
// characters escaped), when it happened, when the current outage began, and how many
// probes have failed in a row since.
type Health struct {
	LastError      string     `json:"last_error,omitempty"`
	LastErrorAt    *time.Time `json:"last_error_at,omitempty"`
	UnhealthySince *time.Time `json:"unhealthy_since,omitempty"`
	FailedProbes   int        `json:"failed_probes,omitempty"`
}

func healthView(s breaker.Snapshot) Health {
	return Health{LastError: s.LastError, LastErrorAt: timePtr(s.LastErrorAt),
		UnhealthySince: timePtr(s.UnhealthySince), FailedProbes: s.FailedProbes}
}

// Outage describes h in one line for people, in loc's time of day: "unhealthy since
// 12:01:05 (4m10s), 12 failed probes", or "" when the circuit is healthy.
func (h Health) Outage(now time.Time, loc *time.Location) string {
	if h.UnhealthySince == nil {
		return ""
	}
	age := now.Sub(*h.UnhealthySince).Truncate(time.Second)
	line := "unhealthy since " + h.UnhealthySince.In(loc).Format(time.TimeOnly) + " (" + max(age, 0).String() + ")"
	if h.FailedProbes > 0 {
		line += ", " + strconv.Itoa(h.FailedProbes) + " failed probe" + map[bool]string{true: "s"}[h.FailedProbes != 1]
	}
	return line
}

// WithProcessStart says when the process started, for the dashboard's timeline
// (which then never shows time before it as healthy). The default is the time New
// was called.
func WithProcessStart(t time.Time) Option {
	return option.Check(t.IsZero(), "admin: WithProcessStart: zero time", func(h *Handler) { h.started = t })
}
