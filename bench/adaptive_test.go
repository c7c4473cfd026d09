package bench

import (
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

// adaptiveSetting is the "adaptive" column of the slow-broker scenario and the
// "recommended set-up" of the drain scenario: the policy and registry options that
// turn on the adaptive concurrency limit. It reports false until the limit exists.
func adaptiveSetting() (breaker.Policy, []registry.Option, bool) {
	return breaker.Policy{}, nil, false
}
