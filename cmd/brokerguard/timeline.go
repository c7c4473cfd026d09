package main

import (
	"fmt"
	"html"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// sample is one observation of a topic during the demo.
type sample struct {
	at        time.Duration // since the demo started
	published int64         // messages published to the topic so far
	pending   int64         // its rows in the outbox, neither published nor dead
}

// change is a circuit transition, at the moment it happened.
type change struct {
	at    time.Duration
	state breaker.State
}

// window is a span of the run, such as the scripted outage; to is zero while it lasts.
type window struct {
	from, to time.Duration
	label    string
}

// timeline collects publish counts, backlogs and circuit transitions per topic and
// draws them as an SVG: one lane per topic, its background coloured by circuit state
// (from the transitions, so a brief half-open shows too), with the publish rate drawn
// over it; below the lanes the outbox backlog with its own scale, then a time axis.
// The outage window is a shaded band across all of them. It is safe for concurrent use.
type timeline struct {
	mu      sync.Mutex
	topics  []string
	samples map[string][]sample
	changes map[string][]change
	outages []window
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

func (t *timeline) outageStart(at time.Duration, label string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.outages = append(t.outages, window{from: at, label: label})
}

func (t *timeline) outageEnd(at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.outages); n > 0 && t.outages[n-1].to == 0 {
		t.outages[n-1].to = at
	}
}

var stateColour = map[breaker.State]string{
	breaker.Closed:   "#d9f2d9",
	breaker.Open:     "#f7c6c6",
	breaker.HalfOpen: "#fde9b0",
}

// topicColour draws each topic's backlog line; the total is an area under them.
var topicColour = []string{"#1f4e9c", "#b23b3b", "#2b8a3e", "#8a5a00", "#6b3fa0"}

const (
	svgWidth      = 900
	laneHeight    = 110
	backlogHeight = 110
	marginLeft    = 110
	marginTop     = 56 // the title, then the outage label
	plotWidth     = svgWidth - marginLeft - 20
	backlogColour = "#c6dbef"
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
	x := func(at time.Duration) float64 {
		return marginLeft + float64(plotWidth)*float64(min(at, end))/float64(end)
	}
	backlogTop := marginTop + laneHeight*len(t.topics)
	axisY := backlogTop + backlogHeight - 10
	height := axisY + 70

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, height)
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
	t.drawBacklog(&b, x, backlogTop)
	t.drawOutages(&b, x, end, axisY)
	drawAxis(&b, x, end, axisY)

	legendY := axisY + 38
	for i, st := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
		lx := marginLeft + i*110
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, legendY, stateColour[st], lx+20, legendY+12, st)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">line: messages/s (peak %.0f); %v in all</text>`+"\n", marginLeft+340, legendY+12, peak, end.Round(time.Millisecond))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// drawBacklog draws the outbox backlog lane: the total pending rows over time as an
// area, each topic's as a line, on a scale of their own (0 to the total's peak).
func (t *timeline) drawBacklog(b *strings.Builder, x func(time.Duration) float64, top int) {
	totals := map[time.Duration]int64{} // every topic is sampled at the same instants
	for _, ss := range t.samples {
		for _, s := range ss {
			totals[s.at] += s.pending
		}
	}
	ats := slices.Sorted(maps.Keys(totals))
	var peak int64 = 1
	for _, at := range ats {
		peak = max(peak, totals[at])
	}
	bottom := top + backlogHeight - 30
	y := func(n int64) float64 { return float64(bottom) - float64(backlogHeight-40)*float64(n)/float64(peak) }

	fmt.Fprintf(b, `<g id="backlog" data-peak="%d">`+"\n", peak)
	fmt.Fprintf(b, `<text x="8" y="%d">outbox backlog</text>`+"\n", top+(backlogHeight-30)/2+4)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f8fa"/>`+"\n", marginLeft, top, plotWidth, bottom-top)
	for _, n := range []int64{0, peak} { // the scale, right-aligned against the plot
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#555">%d</text>`+"\n", marginLeft-4, y(n)+4, n)
	}
	area := []string{fmt.Sprintf("%.1f,%d", x(ats[0]), bottom)}
	for _, at := range ats {
		area = append(area, fmt.Sprintf("%.1f,%.1f", x(at), y(totals[at])))
	}
	area = append(area, fmt.Sprintf("%.1f,%d", x(ats[len(ats)-1]), bottom))
	fmt.Fprintf(b, `<polygon points="%s" fill="%s" data-series="total"/>`+"\n", strings.Join(area, " "), backlogColour)
	for i, topic := range t.topics {
		var pts []string
		for _, s := range t.samples[topic] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.at), y(s.pending)))
		}
		colour := topicColour[i%len(topicColour)]
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.2" data-series="%s"/>`+"\n",
			strings.Join(pts, " "), colour, html.EscapeString(topic))
		lx := marginLeft + 8 + i*150
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>`+"\n",
			lx, top+9, colour, lx+14, top+14, html.EscapeString(topic))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-size="10">rows pending (area: all topics; peak %d)</text>`+"\n", marginLeft+plotWidth-6, top+14, peak)
	b.WriteString("</g>\n")
}

// drawOutages shades each outage window across every lane, labelled above the lanes.
func (t *timeline) drawOutages(b *strings.Builder, x func(time.Duration) float64, end time.Duration, bottom int) {
	for _, o := range t.outages {
		to := o.to
		if to == 0 { // still on when the run ended
			to = end
		}
		fmt.Fprintf(b, `<g class="outage"><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#000" fill-opacity="0.07" stroke="#555" stroke-dasharray="4 3" data-from="%g" data-to="%g"/>`,
			x(o.from), marginTop-14, max(x(to)-x(o.from), 1), bottom-marginTop+14, o.from.Seconds(), to.Seconds())
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11">%s</text></g>`+"\n", x(o.from)+4, marginTop-3, html.EscapeString(o.label))
	}
}

// drawAxis draws the time axis at y: a tick and a seconds label every step, with a
// faint grid line up through the lanes.
func drawAxis(b *strings.Builder, x func(time.Duration) float64, end time.Duration, y int) {
	step := tickStep(end)
	b.WriteString(`<g id="axis">` + "\n")
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", marginLeft, y, marginLeft+plotWidth, y)
	for at := time.Duration(0); at <= end; at += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-opacity="0.12"/>`, x(at), marginTop, x(at), y)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, x(at), y, x(at), y+5)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" data-seconds="%g">%gs</text>`+"\n", x(at), y+18, at.Seconds(), at.Seconds())
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-size="10" fill="#555">seconds since start</text>`+"\n", marginLeft+plotWidth, y+32)
	b.WriteString("</g>\n")
}

// tickStep is the smallest round step that puts at most ten ticks on a run of length end.
func tickStep(end time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		if end/s <= 10 {
			return s
		}
	}
	return (end/10 + time.Minute - 1).Truncate(time.Minute)
}

func rate(a, b sample) float64 {
	dt := (b.at - a.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(b.published-a.published) / dt
}
