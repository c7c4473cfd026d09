package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/eventq"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of a Manager.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultRedialDelay = 500 * time.Millisecond
	// DefaultMaxChannels bounds the channels a Manager's publishers hold open at
	// once (see WithMaxChannels): far below RabbitMQ's default channel_max of 2047,
	// and above the publishes in flight that one connection serves well.
	DefaultMaxChannels = 256
)

// DefaultDialPolicy is the connection circuit's policy unless WithDialPolicy says
// otherwise: three failed dials in a row open it for a second, doubling up to thirty
// seconds while the broker stays down.
var DefaultDialPolicy = breaker.Policy{
	FailureThreshold: 3,
	BreakDuration:    time.Second,
	MaxBreakDuration: 30 * time.Second,
	Jitter:           0.1,
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager) error

// WithConfig sets the amqp091-go connection configuration (credentials, TLS,
// heartbeat, client properties). Its Dial field, when nil, is set from
// WithDialTimeout.
func WithConfig(c amqp091.Config) ManagerOption {
	return option.Set(func(m *Manager) { m.cfg = c })
}

// WithDialTimeout bounds one dial, TCP connect and AMQP handshake together (default
// DefaultDialTimeout).
func WithDialTimeout(d time.Duration) ManagerOption {
	return option.Check(d <= 0, fmt.Sprintf("amqp: WithDialTimeout(%v): the timeout must be positive", d), func(m *Manager) { m.dialTimeout = d })
}

// WithRedialDelay sets how long the watcher waits after a failed dial before the next
// one while the connection circuit is still closed (default DefaultRedialDelay). While
// the circuit is open the watcher waits for its NotBefore instead.
func WithRedialDelay(d time.Duration) ManagerOption {
	return option.Check(d <= 0, fmt.Sprintf("amqp: WithRedialDelay(%v): the delay must be positive", d), func(m *Manager) { m.redialDelay = d })
}

// WithDialPolicy sets the connection circuit's policy (default DefaultDialPolicy).
func WithDialPolicy(p breaker.Policy) ManagerOption {
	return option.Set(func(m *Manager) { m.dialPolicy = p })
}

// WithMaxChannels bounds the confirm-mode channels the Manager's publishers hold
// open at once, idle or in use (default DefaultMaxChannels). A publish takes one
// for its duration; past the bound it waits for one to come free (bounded by its
// context and the publisher's confirm timeout) instead of opening more, so the
// connection never runs out of channel ids (amqp091.ErrChannelMax) and a slow broker
// is not sent a channel.open per waiting caller. n must not exceed the connection's
// channel_max (WithConfig's ChannelMax, when set; the broker's, 2047 by default).
func WithMaxChannels(n int) ManagerOption {
	return option.Check(n <= 0, fmt.Sprintf("amqp: WithMaxChannels(%d): the bound must be positive", n), func(m *Manager) { m.maxChannels = n })
}

// WithDialBreakerOptions passes options (an observer, a clock) to the connection
// circuit.
func WithDialBreakerOptions(opts ...breaker.Option) ManagerOption {
	return option.Set(func(m *Manager) { m.breakerOpts = append(m.breakerOpts, opts...) })
}

// Manager keeps one AMQP connection to one broker for every publisher and consumer of
// a process, and opens it again after the broker or the network closes it.
//
// Dials go through the manager's own connection circuit, named
// "amqp-connection:<host:port>", separate from the exchange circuits of a registry:
// once dials have failed often enough the circuit opens, and a caller that needs a
// connection gets a *DialError matching breaker.ErrOpen at once instead of waiting out
// a dial per call. NewPublisher makes it live in the publisher's registry under that
// name (ConnectionDestination), beside the exchanges' circuits, so that the CLI, the
// admin API, telemetry and the registry's observers see it.
//
// NewManager starts one goroutine, the watcher, and Close stops it; each connection
// also has one that follows its connection.blocked notifications and ends with it. The watcher dials
// the first connection, notices when the connection closes and dials again (after
// WithRedialDelay, or when the open connection circuit admits a probe), and closes the
// channels that publishers retire. Callers that need a connection before the watcher
// has one dial themselves; concurrent dials are merged into one.
type Manager struct {
	url, addr   string
	cfg         amqp091.Config
	dialTimeout time.Duration
	redialDelay time.Duration
	dialPolicy  breaker.Policy
	breakerOpts []breaker.Option
	circuit     *breaker.Breaker
	observers   eventq.Queue[breaker.Transition] // the adopting registries' observers (relay)
	maxChannels int
	// slots holds one token per publisher channel open or opening: the channel pool's
	// bound (pool.go).
	slots chan struct{}

	kick    chan struct{} // wakes the watcher to look at the state again; capacity 1
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed by the watcher when it returns

	mu      sync.Mutex // guards the fields below
	closed  bool
	conn    *amqp091.Connection // nil while there is no usable connection
	closes  chan *amqp091.Error // conn's close notification
	block   *blockEpoch         // conn's flow-control state since its last change
	dialing *dialCall           // the dial in progress, if any
	retired []retiree           // channels the watcher is to close
	// lastDial is the error of the last dial that failed, nil after one succeeded.
	lastDial error
	// publishers are the Manager's open publishers, whose idle channels another
	// publisher may close to take their slots (pool.go).
	publishers []*Publisher
}

// dialCall is one dial whose result every caller that waited for it shares.
type dialCall struct {
	done chan struct{} // closed when conn and err are set
	conn *amqp091.Connection
	err  error
}

// NewManager returns a manager for the broker at url ("amqp://user:pass@host:port/vhost")
// and starts its watcher, which dials in the background. Close it when done.
func NewManager(url string, opts ...ManagerOption) (*Manager, error) {
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	m := &Manager{
		url:         url,
		addr:        net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)),
		dialTimeout: DefaultDialTimeout,
		redialDelay: DefaultRedialDelay,
		dialPolicy:  DefaultDialPolicy,
		maxChannels: DefaultMaxChannels,
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	if err := option.Apply("amqp: NewManager", m, opts); err != nil {
		return nil, err
	}
	if m.cfg.Dial == nil {
		m.cfg.Dial = amqp091.DefaultDial(m.dialTimeout)
	}
	if cm := int(m.cfg.ChannelMax); cm > 0 && m.maxChannels > cm {
		return nil, fmt.Errorf("amqp: WithMaxChannels(%d) exceeds the connection's ChannelMax %d: lower WithMaxChannels or raise Config.ChannelMax", m.maxChannels, cm)
	}
	m.slots = make(chan struct{}, m.maxChannels)
	// The relay is the last observer: a registry that adopts the circuit (NewPublisher)
	// hears its transitions after the ones given at construction.
	m.circuit, err = breaker.New(m.ConnectionDestination().String(), m.dialPolicy,
		append(m.breakerOpts[:len(m.breakerOpts):len(m.breakerOpts)], breaker.WithObserver(m.relay))...)
	if err != nil {
		return nil, fmt.Errorf("amqp: connection circuit: %w", err)
	}
	go m.watch()
	return m, nil
}

// Circuit returns the connection circuit.
func (m *Manager) Circuit() *breaker.Breaker { return m.circuit }

// ConnectionBroker is the broker part of the connection circuit's name.
const ConnectionBroker = "amqp-connection"

// ConnectionDestination is the name of the connection circuit,
// "amqp-connection:<host:port>": the name a refused dial's *DialError gives, and the
// one under which NewPublisher makes the circuit live in its registry
// (registry.Adopt), so that `brokerguard circuits show` and the admin API answer it.
func (m *Manager) ConnectionDestination() transport.Destination {
	return transport.Destination{Broker: ConnectionBroker, Name: m.addr}
}

// relay tells the observers a registry added (connectionCircuit.Observe) one of the
// connection circuit's transitions.
func (m *Manager) relay(t breaker.Transition) {
	m.observers.Push(t)
	m.observers.Flush()
}

// connectionCircuit is the connection circuit as a registry adopts it: the Breaker,
// and Observe for the registry's observers.
type connectionCircuit struct {
	*breaker.Breaker
	m *Manager
}

// Observe adds f to the observers of the connection circuit's transitions; under a
// key given before, it replaces that observer.
func (c connectionCircuit) Observe(key any, f func(breaker.Transition)) {
	c.m.observers.ObserveAs(key, f)
}

// Connection returns the open connection, dialing one if there is none. Consumers may
// open their own channels on it; they must not close the connection. An error is a
// *DialError, ctx.Err() when ctx ended while a dial was in progress, or
// ErrManagerClosed. A dial is bounded by the dial timeout, not by ctx: it runs on its
// own goroutine, the caller waits for it no longer than ctx allows, and a dial that
// outlives its caller goes on to serve the next ones (a broker that stops answering
// cannot hold a caller for the dial timeout, and the caller waiting when it answers
// again gets the connection at once).
func (m *Manager) Connection(ctx context.Context) (*amqp091.Connection, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrManagerClosed
	}
	if m.conn != nil && !m.conn.IsClosed() {
		c := m.conn
		m.mu.Unlock()
		return c, nil
	}
	call := m.dialing
	if call == nil {
		call = &dialCall{done: make(chan struct{})}
		m.dialing = call
		m.mu.Unlock()
		go m.runDial(call)
	} else {
		m.mu.Unlock()
	}
	select {
	case <-call.done:
		return call.conn, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runDial dials through the connection circuit, installs the connection and ends call.
func (m *Manager) runDial(call *dialCall) {
	conn, err := m.dial()
	var stale *amqp091.Connection
	m.mu.Lock()
	m.dialing = nil
	switch {
	case err != nil:
	case m.closed:
		stale, conn, err = conn, nil, ErrManagerClosed
	default:
		m.conn, m.closes = conn, conn.NotifyClose(make(chan *amqp091.Error, 1))
		m.block = &blockEpoch{conn: conn, blocked: make(chan struct{})}
		// amqp091 sends the notifications from the connection's reader; the buffer
		// and watchBlocked's prompt reads keep it from waiting on us.
		go m.watchBlocked(conn, conn.NotifyBlocked(make(chan amqp091.Blocking, 4)))
	}
	m.mu.Unlock()
	call.conn, call.err = conn, err
	close(call.done)
	if stale != nil {
		_ = stale.Close()
	}
	m.wake()
}

func (m *Manager) dial() (*amqp091.Connection, error) {
	permit, err := m.circuit.Acquire(context.Background())
	if err != nil {
		m.mu.Lock()
		last := m.lastDial
		m.mu.Unlock()
		return nil, &DialError{Addr: m.addr, Err: err, Last: last}
	}
	conn, err := amqp091.DialConfig(m.url, m.cfg)
	m.mu.Lock()
	m.lastDial = err
	m.mu.Unlock()
	if err != nil {
		permit.CompleteWith(dialOutcome(err), err) // the why that circuits show gives
		return nil, &DialError{Addr: m.addr, Err: err}
	}
	permit.Complete(breaker.Success)
	return conn, nil
}

// dialOutcome is what a failed dial tells the connection circuit. A refused login
// (wrong credentials, a vhost that is missing or forbidden) is Unusable to the
// exchanges, but to the connection circuit it is a Failure: every dial will be
// refused the same way until someone fixes the configuration, so the circuit opens
// and the dials back off (DefaultDialPolicy: at most one per 30 s once open)
// instead of one TCP and AMQP handshake per publish.
func dialOutcome(err error) breaker.Outcome {
	if refusedLogin(err) {
		return breaker.Failure
	}
	return Classify(err)
}

// blockEpoch is a stretch of time during which a connection's flow-control state does
// not change: unblocked until blocked is closed, then blocked for reason since since.
type blockEpoch struct {
	conn    *amqp091.Connection
	blocked chan struct{} // closed when the broker blocks the connection
	reason  string        // set before blocked is closed
	since   time.Time     // set before blocked is closed
}

// err returns the error of a publish refused or ended by the block; it requires
// blocked closed.
func (b *blockEpoch) err(addr string) error {
	return &BlockedError{Addr: addr, Reason: b.reason, Since: b.since}
}

// watchBlocked follows conn's connection.blocked and connection.unblocked
// notifications until the connection closes, which closes blocks.
func (m *Manager) watchBlocked(conn *amqp091.Connection, blocks <-chan amqp091.Blocking) {
	for b := range blocks {
		m.mu.Lock()
		cur := m.block
		if cur == nil || cur.conn != conn {
			m.mu.Unlock()
			continue
		}
		select {
		case <-cur.blocked:
			if !b.Active { // unblocked: a fresh epoch
				m.block = &blockEpoch{conn: conn, blocked: make(chan struct{})}
			}
		default:
			if b.Active {
				cur.reason, cur.since = b.Reason, time.Now()
				close(cur.blocked)
			}
		}
		m.mu.Unlock()
	}
}

// blocking returns the flow-control epoch of conn, or nil when conn is no longer the
// manager's connection.
func (m *Manager) blocking(conn *amqp091.Connection) *blockEpoch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.block == nil || m.block.conn != conn {
		return nil
	}
	return m.block
}

// isClosed reports whether Close was called.
func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// wake tells the watcher to look at the state again.
func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// retiree is a channel the watcher is to close, and what to call once it is closed
// (giving back its pool slot).
type retiree struct {
	ch     *amqp091.Channel
	closed func()
}

// retire hands an open channel that must not be used again to the watcher, which
// closes it and then calls closed (which may be nil): closing waits for the broker's
// reply, and publishers should not.
func (m *Manager) retire(ch *amqp091.Channel, closed func()) {
	m.mu.Lock()
	if !m.closed { // otherwise closing the connection closes the channel
		m.retired = append(m.retired, retiree{ch, closed})
		closed = nil
	}
	m.mu.Unlock()
	if closed != nil {
		closed()
	}
	m.wake()
}

// watch is the manager's one goroutine; see Manager.
func (m *Manager) watch() {
	defer close(m.stopped)
	redial := time.NewTimer(0) // the first dial starts at once
	defer redial.Stop()
	for {
		m.mu.Lock()
		conn, closes, retired := m.conn, m.closes, m.retired
		m.retired = nil
		m.mu.Unlock()
		for _, r := range retired {
			_ = r.ch.Close()
			if r.closed != nil {
				r.closed()
			}
		}
		if conn == nil {
			closes = nil // a nil channel never fires
		}
		select {
		case <-m.done:
			return
		case <-m.kick:
		case <-closes:
			m.mu.Lock()
			if m.conn == conn {
				m.conn, m.closes, m.block = nil, nil, nil
			}
			m.mu.Unlock()
			redial.Reset(0)
		case <-redial.C:
			if conn != nil && !conn.IsClosed() {
				continue
			}
			if _, err := m.Connection(context.Background()); err != nil {
				redial.Reset(m.retryAfter(err))
			}
		}
	}
}

// retryAfter is how long the watcher waits after a failed dial: until an open
// circuit's NotBefore, else the redial delay.
func (m *Manager) retryAfter(err error) time.Duration {
	if errors.Is(err, ErrManagerClosed) {
		return time.Hour // Close is about to stop the watcher
	}
	if oe := (*breaker.OpenError)(nil); errors.As(err, &oe) {
		if d := time.Until(oe.NotBefore); d > 0 {
			return d
		}
	}
	return m.redialDelay
}

// Close closes the connection, which closes every channel on it, and stops the
// watcher, waiting for a dial it has in progress. It waits at most the dial timeout
// for the broker to confirm the close: a broker that does not answer cannot hold it
// (or the watcher, closing a retired channel) longer. It is safe to call more than
// once.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	conn := m.conn
	m.conn, m.closes, m.retired, m.block = nil, nil, nil, nil
	m.mu.Unlock()
	var err error
	if conn != nil { // first: it ends the watcher's wait for a retired channel's close
		err = conn.CloseDeadline(time.Now().Add(m.dialTimeout))
		if errors.Is(err, amqp091.ErrClosed) {
			err = nil
		}
	}
	close(m.done)
	<-m.stopped
	if err != nil {
		return fmt.Errorf("amqp: close connection: %w", err)
	}
	return nil
}
