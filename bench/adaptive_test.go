package bench

import (
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

// adaptiveSetting is the "adaptive" column of the slow-broker scenario and the
// "recommended set-up" of the drain scenario: the policy and registry options that
// turn on the adaptive concurrency limit, as LIMIT_API.md of the limit branch
// describes it (one registry, shared by online publishers and the outbox, which marks
// its own publishes as bulk work). It reports false while the limit does not exist.
func adaptiveSetting() (registry.Policy, []registry.Option, bool) {
	return registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second, Jitter: 0.2},
		Admission: admission.DefaultPolicy()}, nil, true
}
