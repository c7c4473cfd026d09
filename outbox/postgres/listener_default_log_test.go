package postgres_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// mpLogRecords is a slog.Handler that keeps the records it is given.
type mpLogRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *mpLogRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *mpLogRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *mpLogRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *mpLogRecords) WithGroup(string) slog.Handler      { return h }

// Without WithListenErrors, each error that broke or prevented the Listener's
// connection is logged through log/slog's default logger at level Warn, with the
// error as "err" (WithListenErrors' documented default).
func TestListenerWithoutListenErrorsLogsEachErrorAtWarn(t *testing.T) {
	logs := &mpLogRecords{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })
	mpListenRefused(t, 1500*time.Millisecond, 2)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if len(logs.records) != 2 {
		t.Fatalf("%d log records for 2 failed attempts, want 2", len(logs.records))
	}
	for _, r := range logs.records {
		var logged string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				logged = a.Value.String()
			}
			return true
		})
		if r.Level != slog.LevelWarn || !strings.Contains(logged, errPgRefused.Error()) {
			t.Errorf("logged %v %q with err %q, want Warn with the connection's error", r.Level, r.Message, logged)
		}
	}
}

// mpListenRefused runs, in a bubble of its own, a Listener with opts whose every
// connection is refused and whose reconnect delay is a second, for runFor; Listen
// must return nil after want attempts.
func mpListenRefused(t *testing.T, runFor time.Duration, want int, opts ...postgres.ListenerOption) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		l, err := postgres.New(&pgSilentDB{}).Listener(func(context.Context, func(*pgx.Conn) error) error {
			attempts++
			return errPgRefused
		}, append([]postgres.ListenerOption{postgres.WithReconnectDelay(time.Second, time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), runFor)
		defer cancel()
		if err := l.Listen(ctx, func() {}); err != nil || attempts != want {
			t.Fatalf("Listen = %v after %d attempts, want nil after %d", err, attempts, want)
		}
	})
}
