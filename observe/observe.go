// Package observe builds a registry with everything an operator looks at wired to it,
// in one call: OpenTelemetry metrics (package telemetry) and the admin handler with
// its dashboard and timeline of transitions (package admin).
//
// Without it a service creates a telemetry.Recorder, builds its registry with the
// recorder's options and the admin journal's observer, then creates the metrics with
// the recorder and the handler with the journal, in that order. [New] does those steps;
// the packages' own options still configure each part:
//
//	obs, err := observe.New(registry.DefaultPolicy(),
//		observe.WithRegistry(registry.WithOverride("kafka:payments", payments)),
//		observe.WithTelemetry(telemetry.WithMeterProvider(mp)),
//		observe.WithAdmin(admin.WithMutations(token)))
//	...
//	mux.Handle("/admin/", http.StripPrefix("/admin", obs.Admin))
//	defer obs.Close()
//
// Give obs.Registry to the adapters and the outbox, and obs.Metrics to the outbox
// processor's outbox.WithHooks so that its dispatches are counted too.
package observe

import (
	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
)

// DefaultJournalSize is the number of recent transitions the admin timeline keeps
// unless WithJournalSize says otherwise.
const DefaultJournalSize = 256

// Observed is a registry and what observes it. Close it on shutdown.
type Observed struct {
	// Registry is the registry, built with the Recorder's and the Journal's
	// observers. Share it: build one per service, at start-up.
	Registry *registry.Registry
	// Metrics exports the registry's circuits through OpenTelemetry; give it to the
	// outbox processor (outbox.WithHooks).
	Metrics *telemetry.Metrics
	// Admin is the admin API and dashboard; mount it on the service's mux (nothing
	// listens by itself). It serves Journal's transitions.
	Admin *admin.Handler
	// Journal keeps the recent transitions of every circuit for Admin's timeline.
	Journal *admin.Journal
}

// Option configures New.
type Option func(*config) error

type config struct {
	reg         []registry.Option
	tel         []telemetry.Option
	adm         []admin.Option
	journalSize int
}

// WithRegistry passes options to registry.New (overrides, circuit factories, ...).
func WithRegistry(opts ...registry.Option) Option {
	return func(c *config) error { c.reg = append(c.reg, opts...); return nil }
}

// WithTelemetry passes options to telemetry.New (the MeterProvider, the outbox
// backlog, ...). Without telemetry.WithMeterProvider the global MeterProvider is used.
func WithTelemetry(opts ...telemetry.Option) Option {
	return func(c *config) error { c.tel = append(c.tel, opts...); return nil }
}

// WithAdmin passes options to admin.New (mutations and their token, the audit hook,
// the outbox, ...).
func WithAdmin(opts ...admin.Option) Option {
	return func(c *config) error { c.adm = append(c.adm, opts...); return nil }
}

// WithJournalSize sets how many recent transitions the timeline keeps
// (DefaultJournalSize).
func WithJournalSize(n int) Option {
	return option.Check(n <= 0, "observe: WithJournalSize: the size must be positive", func(c *config) { c.journalSize = n })
}

// New builds a registry whose destinations get the defaults policy (see registry.New,
// which refuses a policy that never opens unless it says Disabled), with telemetry
// and the admin journal observing every circuit, local and shared, then the metrics
// and the admin handler for it.
func New(defaults registry.Policy, opts ...Option) (*Observed, error) {
	c := config{journalSize: DefaultJournalSize}
	if err := option.Apply("observe: New", &c, opts); err != nil {
		return nil, err
	}
	rec := telemetry.NewRecorder()
	journal := admin.NewJournal(c.journalSize)
	regOpts := append(rec.RegistryOptions(), registry.WithObserver(journal.Record))
	reg, err := registry.New(defaults, append(regOpts, c.reg...)...)
	if err != nil {
		return nil, err
	}
	m, err := telemetry.New(reg, append([]telemetry.Option{telemetry.WithRecorder(rec)}, c.tel...)...)
	if err != nil {
		return nil, err
	}
	h, err := admin.New(reg, append([]admin.Option{admin.WithJournal(journal)}, c.adm...)...)
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	return &Observed{Registry: reg, Metrics: m, Admin: h, Journal: journal}, nil
}

// Close stops exporting the metrics. The registry and the handler keep working.
func (o *Observed) Close() error { return o.Metrics.Close() }
