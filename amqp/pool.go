package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The channel pool. Every confirm-mode channel a publisher holds open, idle or in
// use or still opening, holds one of its Manager's slots (WithMaxChannels), taken
// before the channel is opened and given back once it is closed. A publish takes an
// idle channel of its publisher when there is one, else a slot to open one, else
// waits for either; so the channels of a connection never exceed the bound, however
// many callers publish at once, and amqp091 never runs out of channel ids.
//
// A channel is reused after a publish unless the broker closed it, or it is a
// mandatory channel with confirms outstanding (a late return would be taken for the
// next publish's). In particular a publish that timed out, or whose caller gave up,
// leaves its channel in the pool with its confirms outstanding: confirms are per
// message, so the next publish on it waits only for its own, and a slow broker is
// not sent a channel.open and a channel.close per timed-out publish.

// errPoolWait is wrapped in the error of a publish that waited the confirm timeout
// for a channel while all were busy: the client's own bound, not the broker's
// verdict (the busy publishes report the broker's).
var errPoolWait = errors.New("every channel of the pool stayed busy")

// get takes an idle channel on the current connection, or opens one within the
// pool's bound, or waits for either.
func (p *Publisher) get(ctx context.Context) (*channel, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, ErrPublisherClosed
	}
	conn, err := p.m.Connection(ctx)
	if err != nil {
		return nil, err
	}
	// A blocked broker reads nothing more from the connection: fail now rather than
	// wait for a confirm or a channel that cannot come before the alarm clears.
	block := p.m.blocking(conn)
	var blocked <-chan struct{}
	if block != nil {
		blocked = block.blocked
		select {
		case <-blocked:
			return nil, block.err(p.m.addr)
		default:
		}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c *channel
		select { // an idle channel first: it costs the broker nothing
		case c = <-p.idle:
		default:
			select {
			case p.m.slots <- struct{}{}:
				if timer == nil {
					timer = time.NewTimer(p.confirmTimeout)
				}
				return p.openIn(ctx, conn, block, timer)
			default:
			}
			// Every slot is taken: close an idle channel of another publisher of the
			// Manager, if there is one, whose slot then comes free.
			p.m.reclaimIdle(p)
			if timer == nil {
				timer = time.NewTimer(p.confirmTimeout)
			}
			select {
			case c = <-p.idle:
			case p.m.slots <- struct{}{}:
				return p.openIn(ctx, conn, block, timer)
			case <-timer.C:
				return nil, clientSide(fmt.Errorf("%w for %v (WithMaxChannels %d)", errPoolWait, p.confirmTimeout, cap(p.m.slots)))
			case <-blocked:
				return nil, block.err(p.m.addr)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if c.conn == conn && !c.ch.IsClosed() {
			c.block = block
			return c, nil
		}
		p.drop(c) // its connection is gone, and the channel with it
	}
}

// openIn opens a channel in the slot the caller took. Opening a channel and entering
// confirm mode are broker round trips that amqp091 does not bound: a broker that
// stops answering would hold the publish until heartbeats give up. Wait no longer
// than the confirm timeout (timer) or the caller; the opening goes on until the
// broker answers or the connection dies, and a channel that comes too late joins the
// idle ones.
func (p *Publisher) openIn(ctx context.Context, conn *amqp091.Connection, block *blockEpoch, timer *time.Timer) (*channel, error) {
	var blocked <-chan struct{}
	if block != nil {
		blocked = block.blocked
	}
	opened := make(chan openResult, 1)
	go func() { c, err := p.open(conn); opened <- openResult{c, err} }()
	var err error
	select {
	case r := <-opened:
		if r.err != nil {
			p.release()
			if p.m.isClosed() {
				// The caller's own Close ended the opening (amqp091 reports whatever
				// the closing connection said), not the broker.
				return nil, fmt.Errorf("%w while the publish opened its channel (%v)", ErrManagerClosed, r.err)
			}
			return nil, r.err
		}
		r.c.block = block
		return r.c, nil
	case <-timer.C:
		err = fmt.Errorf("%w after %v", ErrChannelTimeout, p.confirmTimeout)
	case <-blocked:
		err = block.err(p.m.addr)
	case <-ctx.Done():
		err = ctx.Err()
	}
	go func() {
		if r := <-opened; r.c != nil {
			p.put(r.c, true)
		} else {
			p.release()
		}
	}()
	return nil, err
}

type openResult struct {
	c   *channel
	err error
}

// open opens a channel on conn and puts it in confirm mode. A channel id space
// exhausted (amqp091.ErrChannelMax: the bound is above the connection's
// channel_max) is the client's own error.
func (p *Publisher) open(conn *amqp091.Connection) (*channel, error) {
	ch, err := conn.Channel()
	if errors.Is(err, amqp091.ErrChannelMax) {
		return nil, clientSide(fmt.Errorf("amqp: open channel: %w (lower WithMaxChannels below the connection's channel_max)", err))
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	c := &channel{ch: ch, conn: conn, closes: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if p.mandatory {
		c.returns = ch.NotifyReturn(make(chan amqp091.Return, 1))
	}
	if err := ch.Confirm(false); err != nil {
		p.m.retire(ch, nil) // the slot is given back by the caller
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	return c, nil
}

// put gives a channel back to the pool, or closes it and gives back its slot.
func (p *Publisher) put(c *channel, reusable bool) {
	if reusable {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			select {
			case p.idle <- c:
				return
			default: // more idle channels than WithMaxIdleChannels
			}
		}
	}
	p.drop(c)
}

// drop closes c, if it is still open, and gives back its slot once it is closed.
func (p *Publisher) drop(c *channel) {
	if c.ch.IsClosed() {
		p.release()
		return
	}
	p.m.retire(c.ch, p.release)
}

// release gives back a slot of the pool.
func (p *Publisher) release() { <-p.m.slots }

// reclaimIdle closes one idle channel of a publisher of m other than except, so that
// its slot comes free once it is closed, and reports whether it found one.
func (m *Manager) reclaimIdle(except *Publisher) bool {
	m.mu.Lock()
	pubs := slices.Clone(m.publishers)
	m.mu.Unlock()
	for _, q := range pubs {
		if q == except {
			continue
		}
		select {
		case c := <-q.idle:
			q.drop(c)
			return true
		default:
		}
	}
	return false
}

// addPublisher makes p's idle channels reclaimable by the Manager's other publishers.
func (m *Manager) addPublisher(p *Publisher) {
	m.mu.Lock()
	m.publishers = append(m.publishers, p)
	m.mu.Unlock()
}

// removePublisher undoes addPublisher.
func (m *Manager) removePublisher(p *Publisher) {
	m.mu.Lock()
	m.publishers = slices.DeleteFunc(m.publishers, func(q *Publisher) bool { return q == p })
	m.mu.Unlock()
}

// Close closes the idle channels; later publishes fail with ErrPublisherClosed. The
// manager's connection stays open.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.m.removePublisher(p)
	for {
		select {
		case c := <-p.idle:
			_ = c.ch.Close()
			p.release()
		default:
			return nil
		}
	}
}

// Channels returns how many confirm-mode channels the Manager's publishers hold
// open or are opening, idle or in use: at most WithMaxChannels.
func (m *Manager) Channels() int { return len(m.slots) }
