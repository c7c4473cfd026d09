// Package amqp publishes to RabbitMQ through github.com/rabbitmq/amqp091-go with
// publisher confirms, so that a registry can guard every exchange with its own circuit.
//
// Three pieces:
//
//   - Manager keeps one connection per broker and dials it again after the broker
//     closes it. Its dials go through a connection circuit of their own, named
//     "amqp-connection:<host:port>": once the broker is known to be down, a caller that
//     needs a connection is rejected at once instead of waiting out a dial. NewManager
//     starts the manager's one goroutine (the watcher); Close stops it. NewPublisher
//     makes that circuit live in its registry under the same name
//     (Manager.ConnectionDestination, registry.Adopt): `brokerguard circuits list`
//     and `show`, the admin API, telemetry and the registry's observers show it, with
//     the last dial's error, beside the exchanges' circuits.
//   - Publisher sends messages on confirm-mode channels taken from a pool (one publish
//     per channel at a time, at most WithMaxChannels channels per Manager, default
//     256) and waits for the broker's confirms, bounded by a confirm timeout the
//     library sets (WithConfirmTimeout). NewPublisher takes the registry: every
//     exchange gets its own circuit, so do not guard it again.
//   - Classify maps what a publish returned to a circuit outcome.
//
// # Destinations
//
// A destination is "amqp:<exchange>". RabbitMQ's default exchange, whose name is the
// empty string, is "amqp:amq.default" (DefaultExchange), the name RabbitMQ's
// management UI gives it; publish to it with the queue's name as the message Key.
//
// # Classification
//
//	What happened                                        Error                                Outcome
//	broker acked every message                           nil                                  Success
//	broker nacked a message                              *ConfirmError (ErrNacked)            Failure
//	no confirm within the confirm timeout                *ConfirmError (ErrConfirmTimeout)    Failure
//	no channel opened within the confirm timeout         ErrChannelTimeout                    Failure
//	broker blocks the connection (memory or disk alarm)  *BlockedError (ErrBlocked)           Failure
//	connection forced (320): close_connection, stop_app  *ChannelError, *amqp091.Error        Failure
//	dead connection or channel: 501, 504, 505            *amqp091.Error, amqp091.ErrClosed    Failure
//	broker out of resources (506), internal error (541)  *amqp091.Error                       Failure
//	dial refused, reset, timed out, EOF in handshake     *DialError, net errors, 501          Failure
//	connection circuit open: broker known to be down     *DialError (breaker.ErrOpen)         Failure
//	login refused (403, 530 at connection.open)          *DialError (ErrLoginRefused)         Unusable
//	exchange missing (404 NOT_FOUND)                     *ChannelError (ErrExchangeNotFound)  Unusable
//	access refused (403), vhost (530), 402, 405, 540     *ChannelError, *amqp091.Error        Unusable
//	message too large (311), over max size (406)         *ChannelError, *amqp091.Error        Rejected
//	mandatory message returned unroutable (312)          *ReturnedError (ErrUnroutable)       Rejected
//	channel ids exhausted, a channel this process closed ErrClientSide, amqp091.ErrChannelMax Neutral
//	caller's context cancelled or past its deadline      context.Canceled, DeadlineExceeded   Neutral (see below)
//	caller's Manager.Close with the confirm outstanding  ErrClosedInFlight                    Neutral
//	caller's Manager.Close while a channel opens         ErrManagerClosed                     Neutral
//	no messages                                          registry.ErrNoMessages               Neutral
//	wrong broker, closed, anything else                  ErrWrongBroker, ErrManagerClosed     Neutral
//
// Classify sees an error alone. The registry that guards the publisher then applies its
// deadline rule (registry.Outcome) to each call: a call ended by the caller's
// cancellation is Neutral; a call ended by the caller's deadline is a Failure when it
// started with at least the policy's MinCallBudget (default 100ms), because the broker
// had a fair chance to confirm and did not, and Neutral when it started with less. So a
// hung broker opens the circuit of callers whose deadlines are shorter than the confirm
// timeout.
//
// # Blocked connections
//
// RabbitMQ blocks the connections that publish while a memory or disk alarm is on
// (connection.blocked), and reads nothing more from them until it clears. The Manager
// follows these notifications; while the connection is blocked a Publish fails at once
// with a *BlockedError, before it opens a channel or sends anything, and a Publish
// already waiting for its confirms when the block arrives stops waiting with the same
// error. Either way the permit is completed as a Failure at once, never after the
// confirm timeout or the caller's deadline, so the circuit opens while the alarm lasts.
//
// A missing exchange is a trap with confirms: the SDK reports the message as nacked
// with no error, and the broker's 404 arrives only on the channel's close
// notification. The publisher reads that notification and returns a *ChannelError
// that names the exchange, so it is classified Unusable, not as a nack.
//
// # Channels and dials
//
// A Manager bounds the confirm-mode channels its publishers hold open, idle or in
// use, to WithMaxChannels (default DefaultMaxChannels, 256; it must not exceed the
// connection's channel_max, 2047 on a default RabbitMQ). A publish beyond the bound
// waits for a channel to come free, at most the confirm timeout, and then fails with
// an error matching ErrClientSide (Neutral): the busy publishes carry the broker's
// verdict. A publish that times out keeps its channel in the pool (its late confirm
// is simply ignored), so a slow broker is not sent a channel.open and a
// channel.close per timed-out publish. amqp091.ErrChannelMax and channels this
// process closed are never the broker's verdict (Neutral). A publish whose context
// ends while the pool opens or awaits its channel returns the context's error wrapped
// with transport.ErrNotSent: a slow broker makes a channel's opening (two round trips)
// miss deadlines that publishes on open channels meet, and a circuit with an adaptive
// limit does not count that against a broker that answers other publishes. A
// channel or dial that amqp091 closed on a read timeout (501 "i/o timeout": the
// heartbeat of a hung broker) matches transport.ErrNoAnswer: still a Failure, but a
// missed deadline to such a circuit rather than an error answer, so its probes keep
// looking for the broker's recovery instead of waiting out a whole break.
//
// A login the broker refuses (wrong credentials, a vhost that is missing or that
// the user may not use: 403 or 530 at connection.open) is Unusable to the
// exchanges' circuits but a Failure to the connection circuit, which opens after
// three such dials and then admits one dial per break: with DefaultDialPolicy at
// most 8 dials in the first minute and 2 a minute after, whatever the publish rate.
// The error matches ErrLoginRefused and says so, also while the circuit refuses
// dials (DialError.Last is the refused dial).
//
// # Goroutines
//
// The manager starts its watcher and, per connection, one goroutine that follows the
// connection's blocked and unblocked notifications and ends when the connection
// closes; the SDK runs its own per connection. Manager.Close stops the watcher and
// closes the connection, after which none of them remains.
package amqp
