package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// policyInstruments creates brokerguard.policy.version, the version of the registry's
// policy set in force (registry.Registry.ApplyPolicies): a change shows as a step,
// and replicas that should agree can be compared. It is absent while the registry
// runs the policies it was built with (version 1), like the other series that only
// speak when there is something to say.
func (m *Metrics) policyInstruments(meter metric.Meter) error {
	g, err := meter.Int64ObservableGauge("brokerguard.policy.version", metric.WithUnit("{version}"),
		metric.WithDescription("Version of the registry's policy set in force; it rises by one at each change, rollback or expiry. Absent until the first change."))
	if err != nil {
		return fmt.Errorf("telemetry: creating the policy version gauge: %w", err)
	}
	r, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if v := m.reg.PolicyVersion(); v > 1 {
			o.ObserveInt64(g, int64(v))
		}
		return nil
	}, g)
	if err != nil {
		return fmt.Errorf("telemetry: registering the policy version callback: %w", err)
	}
	m.regs = append(m.regs, r)
	return nil
}
