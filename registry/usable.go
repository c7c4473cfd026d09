package registry

import "github.com/brokerguard/brokerguard/breaker"

// usable validates a policy given to the registry, and also refuses one that would
// never open without saying so (the zero Policy above all): a circuit that protects
// nothing must be asked for, with Disabled.
func usable(p breaker.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.FailureThreshold == 0 && !p.Disabled {
		return &breaker.PolicyError{Field: "FailureThreshold",
			Reason: "is 0, so the circuit would never open: start from breaker.DefaultPolicy(), " +
				"or set FailureThreshold and BreakDuration, or use breaker.DisabledPolicy() (Disabled: true) to turn the circuit off on purpose"}
	}
	return nil
}
