package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// sample is one observation of a topic's publish count during the demo.
type sample struct {
	at        time.Duration // since the demo started
	published int64         // messages published to the topic so far
}

// change is a circuit transition, at the moment it happened.
type change struct {
	at    time.Duration
	state breaker.State
}

// timeline collects publish counts and circuit transitions per topic and draws them
// as an SVG: one lane per topic, its background coloured by circuit state (from the
// transitions, so a brief half-open shows too), with the publish rate drawn over it.
// It is safe for concurrent use.
type timeline struct {
	mu      sync.Mutex
	topics  []string
	samples map[string][]sample
	changes map[string][]change
}

func newTimeline(topics []string) *timeline {
	return &timeline{topics: topics, samples: map[string][]sample{}, changes: map[string][]change{}}
}

func (t *timeline) record(topic string, s sample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.samples[topic] = append(t.samples[topic], s)
}

func (t *timeline) transition(topic string, c change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.changes[topic] = append(t.changes[topic], c)
}

var stateColour = map[breaker.State]string{
	breaker.Closed:   "#d9f2d9",
	breaker.Open:     "#f7c6c6",
	breaker.HalfOpen: "#fde9b0",
}

const (
	svgWidth   = 900
	laneHeight = 110
	marginLeft = 110
	marginTop  = 40
	plotWidth  = svgWidth - marginLeft - 20
)

// writeSVG draws the timeline. The rate of each sample is the messages published since
// the previous sample divided by the time between them.
func (t *timeline) writeSVG(w io.Writer, title string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var end time.Duration
	var peak float64
	for _, ss := range t.samples {
		for i, s := range ss {
			end = max(end, s.at)
			if i > 0 {
				peak = max(peak, rate(ss[i-1], s))
			}
		}
	}
	if end == 0 {
		return fmt.Errorf("timeline: no samples to draw")
	}
	peak = max(peak, 1)
	x := func(at time.Duration) float64 { return marginLeft + float64(plotWidth)*float64(at)/float64(end) }
	height := marginTop + laneHeight*len(t.topics) + 50

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(title))
	for lane, topic := range t.topics {
		top := marginTop + lane*laneHeight
		ss := t.samples[topic]
		fmt.Fprintf(&b, `<g id="lane-%s">`+"\n", html.EscapeString(topic))
		fmt.Fprintf(&b, `<text x="8" y="%d">%s</text>`+"\n", top+laneHeight/2, html.EscapeString(topic))
		bands := append([]change{{at: 0, state: breaker.Closed}}, t.changes[topic]...)
		for i, c := range bands { // state bands, at least 2px wide so a brief state shows
			until := end
			if i+1 < len(bands) {
				until = bands[i+1].at
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" data-state="%s"/>`+"\n",
				x(c.at), top, max(x(until)-x(c.at), 2), laneHeight-10, stateColour[c.state], c.state)
		}
		var pts []string
		for i := 1; i < len(ss); i++ { // throughput line
			y := float64(top+laneHeight-12) - float64(laneHeight-24)*rate(ss[i-1], ss[i])/peak
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(ss[i].at), y))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#1f4e9c" stroke-width="1.5"/>`+"\n", strings.Join(pts, " "))
		}
		b.WriteString("</g>\n")
	}
	legendY := marginTop + laneHeight*len(t.topics) + 20
	for i, st := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
		lx := marginLeft + i*130
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, legendY, stateColour[st], lx+20, legendY+12, st)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">line: messages/s (peak %.0f); %v in all</text>`+"\n", marginLeft+400, legendY+12, peak, end.Round(time.Millisecond))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func rate(a, b sample) float64 {
	dt := (b.at - a.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(b.published-a.published) / dt
}
