package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// chart is an SVG line chart of attempts per second at the provider, with
// the outage shaded and the limiter's rate and the provider's capacity
// drawn across. It is written by hand: the root module's internal/svg cannot
// be imported from this module.
type chart struct {
	title    string
	arrivals []time.Duration // sorted
	bin      time.Duration
	outage   time.Duration
	limit    float64 // 0: none
	// limitLabel names the limit's line.
	limitLabel string
	capacity   float64
	drain      time.Duration
	crashAt    time.Duration // when the worker process was killed; 0 for none
	// When the shared limiter's store was taken away and brought back; 0
	// for never.
	storeDown, storeUp time.Duration
}

const (
	chartW, chartH                       = 960, 420
	padLeft, padRight, padTop, padBottom = 70, 30, 50, 55
)

// rates returns the attempts per second in each bin.
func (c chart) rates() []float64 {
	n := int(c.drain/c.bin) + 1
	out := make([]float64, n)
	for _, a := range c.arrivals {
		if i := int(a / c.bin); i >= 0 && i < n {
			out[i]++
		}
	}
	for i := range out {
		out[i] /= c.bin.Seconds()
	}
	return out
}

// nice rounds v up to 1, 2 or 5 times a power of ten.
func nice(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func (c chart) write(w io.Writer) error {
	rates := c.rates()
	top := max(c.capacity, c.limit)
	for _, r := range rates {
		top = max(top, r)
	}
	yMax := nice(top * 1.1)
	xStep := nice(c.drain.Seconds() / 8)
	xMax := math.Ceil(c.drain.Seconds()/xStep) * xStep
	xTicks := int(math.Round(xMax / xStep))
	plotW, plotH := float64(chartW-padLeft-padRight), float64(chartH-padTop-padBottom)
	x := func(s float64) float64 { return padLeft + s/xMax*plotW }
	y := func(v float64) float64 { return padTop + plotH - min(v, yMax)/yMax*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", padLeft, html.EscapeString(c.title))
	// The outage.
	fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#f4c7c3" opacity="0.6"/>`+"\n", x(0), padTop, x(c.outage.Seconds())-x(0), plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#a50e0e">provider down</text>`+"\n", x(0)+4, padTop+14)
	if c.storeUp > 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#fde293" opacity="0.6"/>`+"\n", x(c.storeDown.Seconds()), padTop, x(c.storeUp.Seconds())-x(c.storeDown.Seconds()), plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#b06000">limiter's store down</text>`+"\n", x(c.storeDown.Seconds())+4, padTop+46)
	}
	// Grid and ticks.
	for i := 0; i <= 5; i++ {
		v := yMax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", padLeft, x(xMax), y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", padLeft-6, y(v)+4, v)
	}
	for i := 0; i <= xTicks; i++ {
		s := xStep * float64(i)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x(s), x(s), y(0), y(0)+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(s), y(0)+19, s)
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", padLeft, x(xMax), y(0), y(0))
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%.1f" stroke="black"/>`+"\n", padLeft, padLeft, padTop, y(0))
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds since the outage began</text>`+"\n", x(xMax/2), chartH-12)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">attempts per second (%v bins)</text>`+"\n", y(yMax/2), c.bin)
	// Reference rates.
	rule := func(v float64, color, label string) {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`+"\n", padLeft, x(xMax), y(v), y(v), color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", x(xMax)-4, y(v)-5, color, label)
	}
	rule(c.capacity, "#555", fmt.Sprintf("provider capacity %g/s", c.capacity))
	if c.limit > 0 {
		rule(c.limit, "#1a73e8", c.limitLabel)
	}
	if c.crashAt > 0 {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#a50e0e" stroke-width="1.5"/>`+"\n", x(c.crashAt.Seconds()), x(c.crashAt.Seconds()), padTop, y(0))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#a50e0e">worker process killed</text>`+"\n", x(c.crashAt.Seconds())+4, padTop+30)
	}
	// The attempts, as steps: a burst reads as a spike.
	var path strings.Builder
	for i, r := range rates {
		x0, x1 := x(float64(i)*c.bin.Seconds()), x(float64(i+1)*c.bin.Seconds())
		if i == 0 {
			fmt.Fprintf(&path, "M%.1f %.1f", x0, y(r))
		} else {
			fmt.Fprintf(&path, " L%.1f %.1f", x0, y(r))
		}
		fmt.Fprintf(&path, " L%.1f %.1f", x1, y(r))
	}
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#0b8043" stroke-width="1.5"/>`+"\n", path.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
