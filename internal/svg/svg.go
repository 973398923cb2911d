// Package svg draws simple line charts as SVG with the standard library only:
// axes with ticks, grid lines, a legend, a subtitle, and optional shaded
// bands and horizontal reference lines. It is what cmd/retrysim draws its
// charts with.
package svg

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Series is one line of a chart. X and Y must have the same length. A point
// whose X or Y is NaN or infinite, or whose Y is at or below 0 on a log axis
// (where it has no place), is not drawn, and the line breaks there rather
// than join its neighbours across the gap: an empty value is never drawn as
// a made-up one.
type Series struct {
	Name string
	X, Y []float64
	// Markers draws a small circle at each point. With NoLine, only the
	// circles are drawn (for reference points).
	Markers bool
	NoLine  bool
	// Dashed draws the line dashed, so that a line lying on top of another
	// lets it show through.
	Dashed bool
	// Color is an SVG colour; empty means the next colour of the palette.
	Color string
}

// Band is a shaded range of X, such as an outage, with a label at its top.
type Band struct {
	X0, X1 float64
	Label  string
}

// Rule is a dashed horizontal line at Y, such as a capacity, with a label
// at its right end, above the line or, with LabelBelow, below it. Color is
// an SVG colour; empty means dark red.
type Rule struct {
	Y          float64
	Label      string
	LabelBelow bool
	Color      string
}

func (r Rule) color() string {
	if r.Color == "" {
		return "#B00000"
	}
	return r.Color
}

// Chart is a line chart. The zero value of each field is a sensible default:
// an 800x450 chart whose axes fit the data and its bands and rules, starting
// at 0 when no value is negative and ending on a round tick.
type Chart struct {
	Title, XLabel, YLabel string
	// Subtitle is drawn under the title, wrapped to the chart's width: the
	// chart's point in words.
	Subtitle string
	// Note is drawn at the foot of the chart, under the x axis's label,
	// wrapped to the chart's width and in smaller type: what a reader needs
	// to read the chart right (what a name on it means, what the model
	// leaves out), so that the chart stands without the text around it.
	// The plot gives up the height it takes.
	Note          string
	Width, Height int // in pixels; 0 means 800 and 450
	Series        []Series
	Bands         []Band
	Rules         []Rule
	// LogY draws Y on a log10 axis from YMin (0 means the smallest positive
	// value, rounded down to a power of 10).
	LogY bool
	// YMin and YMax fix the Y range when YMax > YMin; XMin and XMax fix the
	// X range likewise. Otherwise the range fits the data, bands and rules.
	XMin, XMax, YMin, YMax float64
	// Headroom widens a fitted linear Y range above the largest value by
	// that fraction of it (0.1 is 10%), so that labels at the top of the
	// plot do not sit on the data.
	Headroom float64
}

// palette is Okabe and Ito's colour-blind-safe palette, black last.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

// Layout, in pixels.
const (
	marginLeft     = 78
	marginTop      = 46
	marginBottom   = 58
	subtitleHeight = 17  // per line of the subtitle
	noteHeight     = 15  // per line of the note
	charWidth      = 7.5 // a generous average width of a character at 13px
	noteCharWidth  = 6.9 // the same at the note's 12px
)

// WriteFile writes the chart to the named file.
func (c Chart) WriteFile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := c.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write writes the chart as a standalone SVG document. It returns an error
// if a series' X and Y differ in length, or if w fails.
func (c Chart) Write(w io.Writer) error {
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("svg: series %q has %d x values and %d y values", s.Name, len(s.X), len(s.Y))
		}
	}
	width, height := c.Width, c.Height
	if width <= 0 {
		width = 800
	}
	if height <= 0 {
		height = 450
	}
	subtitle := wrap(c.Subtitle, int((float64(width)-marginLeft-12)/charWidth))
	note := wrap(c.Note, int((float64(width)-marginLeft-12)/noteCharWidth))
	p := plot{
		left: marginLeft, top: marginTop + float64(subtitleHeight*len(subtitle)),
		right:  float64(width) - c.legendWidth(),
		bottom: float64(height - marginBottom - noteHeight*len(note)),
	}
	if len(note) > 0 {
		p.bottom -= 6 // a gap between the x axis's label and the note
	}
	p.x = c.xAxis()
	p.y = c.yAxis()

	b := &builder{w: bufio.NewWriter(w)}
	b.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", width, height, width, height)
	b.printf("<title>%s</title>\n", esc(c.Title))
	b.printf(`<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	b.printf(`<text class="title" x="%d" y="26" font-size="17" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.Title))
	for i, line := range subtitle {
		b.printf(`<text class="subtitle" x="%d" y="%d" fill="#333333">%s</text>`+"\n", marginLeft, 46+subtitleHeight*i, esc(line))
	}
	b.printf(`<defs><clipPath id="plot"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath></defs>`+"\n",
		num(p.left), num(p.top-4), num(p.right-p.left), num(p.bottom-p.top+8))

	// Lines under the data, labels over it, each label on a white halo.
	c.writeBands(b, &p)
	c.writeGridAndAxes(b, &p)
	c.writeRules(b, &p)
	c.writeSeries(b, &p)
	c.writeLabels(b, &p)
	c.writeLegend(b, &p)
	for i, line := range note {
		b.printf(`<text class="note" x="%d" y="%s" font-size="12" fill="#444444">%s</text>`+"\n",
			marginLeft, num(p.bottom+64+float64(noteHeight*i)), esc(line))
	}
	b.printf("</svg>\n")
	if b.err != nil {
		return b.err
	}
	return b.w.Flush()
}

// axis maps data values to pixels.
type axis struct {
	lo, hi float64
	log    bool
	ticks  []float64
}

// frac returns v's position on the axis, 0 at lo and 1 at hi.
func (a axis) frac(v float64) float64 {
	if a.log {
		if v <= 0 {
			return 0
		}
		return (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

type plot struct {
	left, top, right, bottom float64
	x, y                     axis
}

func (p *plot) px(v float64) float64 { return p.left + p.x.frac(v)*(p.right-p.left) }
func (p *plot) py(v float64) float64 {
	f := p.y.frac(v)
	if p.y.log {
		f = max(f, 0) // a rule at or below 0 sits on the bottom of a log axis
	}
	return p.bottom - f*(p.bottom-p.top)
}

// drawable reports whether a point has a place on the plot: finite, and
// positive on a log axis.
func (p *plot) drawable(x, y float64) bool {
	return finite(x) && finite(y) && (!p.y.log || y > 0)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (c Chart) xAxis() axis {
	if c.XMax > c.XMin {
		return linearAxis(c.XMin, c.XMax, false)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i, x := range s.X {
			if finite(x) && finite(s.Y[i]) {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	for _, b := range c.Bands {
		lo, hi = min(lo, b.X0, b.X1), max(hi, b.X0, b.X1)
	}
	if lo > hi {
		lo, hi = 0, 1
	}
	return linearAxis(lo, hi, true)
}

func (c Chart) yAxis() axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	minPos := math.Inf(1)
	for _, s := range c.Series {
		for i, y := range s.Y {
			if finite(y) && finite(s.X[i]) {
				lo, hi = min(lo, y), max(hi, y)
				if y > 0 {
					minPos = min(minPos, y)
				}
			}
		}
	}
	for _, r := range c.Rules {
		lo, hi = min(lo, r.Y), max(hi, r.Y)
		if r.Y > 0 {
			minPos = min(minPos, r.Y)
		}
	}
	if c.LogY {
		if c.YMax > c.YMin && c.YMin > 0 {
			return logAxis(c.YMin, c.YMax)
		}
		if math.IsInf(minPos, 1) {
			minPos, hi = 1, 10
		}
		if c.YMin > 0 {
			minPos = c.YMin
		}
		return logAxis(minPos, hi)
	}
	if c.YMax > c.YMin {
		return linearAxis(c.YMin, c.YMax, false)
	}
	if lo > hi {
		lo, hi = 0, 1
	}
	if c.Headroom > 0 && finite(c.Headroom) {
		hi += (hi - min(lo, 0)) * c.Headroom
	}
	return linearAxis(lo, hi, true)
}

// linearAxis returns an axis covering [lo, hi] with about six ticks at
// round values (1, 2 or 5 times a power of 10). With fromZero and no
// negative value, the axis starts at 0, and it ends on a tick.
func linearAxis(lo, hi float64, fromZero bool) axis {
	if fromZero && lo >= 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 6)
	first := math.Floor(lo/step) * step
	last := math.Ceil(hi/step) * step
	if fromZero {
		lo, hi = first, last
	}
	a := axis{lo: lo, hi: hi}
	for i := 0; ; i++ {
		v := first + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		if v >= lo-step*1e-9 {
			a.ticks = append(a.ticks, roundTo(v, step))
		}
	}
	return a
}

// logAxis returns a log10 axis from the power of 10 at or below lo to the
// one at or above hi, with a tick at each power.
func logAxis(lo, hi float64) axis {
	l := math.Floor(math.Log10(lo))
	h := math.Ceil(math.Log10(max(hi, lo)))
	if h <= l {
		h = l + 1
	}
	a := axis{lo: math.Pow(10, l), hi: math.Pow(10, h), log: true}
	for e := l; e <= h; e++ {
		a.ticks = append(a.ticks, math.Pow(10, e))
	}
	return a
}

func niceStep(raw float64) float64 {
	if !(raw > 0) || !finite(raw) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f <= 1:
		return mag
	case f <= 2:
		return 2 * mag
	case f <= 5:
		return 5 * mag
	}
	return 10 * mag
}

// roundTo removes the float noise of first + i*step.
func roundTo(v, step float64) float64 {
	digits := max(0, -int(math.Floor(math.Log10(step))))
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// label formats a tick value: whole millions as "2M", whole thousands from
// 10,000 as "10k", others as short as they can be. With thousands, every
// whole thousand (but 0) is written in k, so that one axis reads "2k, 4k,
// ..., 12k" rather than "2000, 4000, ..., 12k".
func label(v float64, thousands bool) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3 && math.Mod(v, 1e3) == 0 && (thousands || a >= 1e4):
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// inThousands reports whether an axis' labels are better in thousands: its
// largest tick is 10,000 or more and every tick a whole thousand.
func inThousands(ticks []float64) bool {
	top := 0.0
	for _, t := range ticks {
		if math.Mod(t, 1e3) != 0 {
			return false
		}
		top = max(top, math.Abs(t))
	}
	return top >= 1e4
}

// legendWidth is the room kept right of the plot for the legend: enough for
// the longest name.
func (c Chart) legendWidth() float64 {
	longest := 0
	for _, s := range c.Series {
		longest = max(longest, len([]rune(s.Name)))
	}
	if longest == 0 {
		return 24
	}
	return 18 + 32 + charWidth*float64(longest) + 10
}

func (c Chart) writeBands(b *builder, p *plot) {
	if len(c.Bands) == 0 {
		return
	}
	b.printf(`<g class="bands">` + "\n")
	for _, band := range c.Bands {
		x0, x1 := p.px(max(min(band.X0, band.X1), p.x.lo)), p.px(min(max(band.X0, band.X1), p.x.hi))
		if x1 <= x0 {
			continue
		}
		b.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="#999999" fill-opacity="0.18"/>`+"\n",
			num(x0), num(p.top), num(x1-x0), num(p.bottom-p.top))
	}
	b.printf("</g>\n")
}

// writeLabels writes the labels of the bands and rules, over the data.
func (c Chart) writeLabels(b *builder, p *plot) {
	const halo = `stroke="white" stroke-width="4" stroke-linejoin="round" paint-order="stroke"`
	if len(c.Bands) > 0 {
		b.printf(`<g class="band-labels">` + "\n")
		for _, band := range c.Bands {
			x0, x1 := p.px(max(min(band.X0, band.X1), p.x.lo)), p.px(min(max(band.X0, band.X1), p.x.hi))
			if x1 > x0 && band.Label != "" {
				b.printf(`<text x="%s" y="%s" fill="#444444" %s>%s</text>`+"\n", num(x0+5), num(p.top+16), halo, esc(band.Label))
			}
		}
		b.printf("</g>\n")
	}
	if len(c.Rules) > 0 {
		b.printf(`<g class="rule-labels">` + "\n")
		for _, r := range c.Rules {
			if r.Label == "" {
				continue
			}
			ly := p.py(r.Y) - 5
			if r.LabelBelow {
				ly = p.py(r.Y) + 15
			}
			b.printf(`<text x="%s" y="%s" text-anchor="end" fill="%s" %s>%s</text>`+"\n", num(p.right-4), num(ly), r.color(), halo, esc(r.Label))
		}
		b.printf("</g>\n")
	}
}

func (c Chart) writeGridAndAxes(b *builder, p *plot) {
	b.printf(`<g class="grid" stroke="#e2e2e2" stroke-width="1">` + "\n")
	for _, t := range p.y.ticks {
		y := p.py(t)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(p.left), num(y), num(p.right), num(y))
	}
	for _, t := range p.x.ticks {
		x := p.px(t)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(x), num(p.top), num(x), num(p.bottom))
	}
	b.printf("</g>\n")

	b.printf(`<g class="axes" stroke="#333333" stroke-width="1">` + "\n")
	b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(p.left), num(p.bottom), num(p.right), num(p.bottom))
	b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(p.left), num(p.top), num(p.left), num(p.bottom))
	for _, t := range p.x.ticks {
		x := p.px(t)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(x), num(p.bottom), num(x), num(p.bottom+5))
	}
	for _, t := range p.y.ticks {
		y := p.py(t)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(p.left-5), num(y), num(p.left), num(y))
	}
	b.printf("</g>\n")

	b.printf(`<g class="tick-labels" fill="#333333">` + "\n")
	xk, yk := inThousands(p.x.ticks), inThousands(p.y.ticks)
	for _, t := range p.x.ticks {
		b.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(p.px(t)), num(p.bottom+20), esc(label(t, xk)))
	}
	for _, t := range p.y.ticks {
		b.printf(`<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(p.left-8), num(p.py(t)+4), esc(label(t, yk)))
	}
	b.printf("</g>\n")
	b.printf(`<text class="x-label" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n",
		num((p.left+p.right)/2), num(p.bottom+44), esc(c.XLabel))
	b.printf(`<text class="y-label" x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n",
		num(18), num((p.top+p.bottom)/2), num(18), num((p.top+p.bottom)/2), esc(c.YLabel))
}

func (c Chart) color(i int) string {
	if c.Series[i].Color != "" {
		return c.Series[i].Color
	}
	n := 0 // palette colours go to series without their own, in order
	for j := range i {
		if c.Series[j].Color == "" {
			n++
		}
	}
	return palette[n%len(palette)]
}

func (c Chart) writeSeries(b *builder, p *plot) {
	for i, s := range c.Series {
		color := c.color(i)
		b.printf(`<g class="series" data-name="%s" clip-path="url(#plot)">`+"\n", esc(s.Name))
		if !s.NoLine {
			// One polyline per run of drawable points: a gap breaks the line.
			var pts strings.Builder
			n := 0
			flush := func() {
				if n > 1 {
					b.printf(`<polyline fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s points="%s"/>`+"\n", color, dash(s), pts.String())
				}
				pts.Reset()
				n = 0
			}
			for j, x := range s.X {
				if !p.drawable(x, s.Y[j]) {
					flush()
					continue
				}
				if n > 0 {
					pts.WriteByte(' ')
				}
				pts.WriteString(num(p.px(x)) + "," + num(p.py(s.Y[j])))
				n++
			}
			flush()
		}
		if s.Markers || s.NoLine {
			fill := color
			if s.NoLine {
				fill = "none"
			}
			for j, x := range s.X {
				y := s.Y[j]
				if p.drawable(x, y) {
					b.printf(`<circle cx="%s" cy="%s" r="4" fill="%s" stroke="%s" stroke-width="1.5"/>`+"\n", num(p.px(x)), num(p.py(y)), fill, color)
				}
			}
		}
		b.printf("</g>\n")
	}
}

func (c Chart) writeRules(b *builder, p *plot) {
	if len(c.Rules) == 0 {
		return
	}
	b.printf(`<g class="rules">` + "\n")
	for _, r := range c.Rules {
		y := p.py(r.Y)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			num(p.left), num(y), num(p.right), num(y), r.color())
	}
	b.printf("</g>\n")
}

func (c Chart) writeLegend(b *builder, p *plot) {
	if len(c.Series) == 0 {
		return
	}
	x := p.right + 18
	b.printf(`<g class="legend">` + "\n")
	for i, s := range c.Series {
		y := p.top + 8 + float64(i)*22
		color := c.color(i)
		if s.NoLine {
			b.printf(`<circle cx="%s" cy="%s" r="4" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", num(x+12), num(y), color)
		} else {
			b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"%s/>`+"\n", num(x), num(y), num(x+24), num(y), color, dash(s))
		}
		b.printf(`<text x="%s" y="%s">%s</text>`+"\n", num(x+32), num(y+4), esc(s.Name))
	}
	b.printf("</g>\n")
}

func dash(s Series) string {
	if s.Dashed {
		return ` stroke-dasharray="7 4"`
	}
	return ""
}

// builder writes formatted text and keeps the first error.
type builder struct {
	w   *bufio.Writer
	err error
}

func (b *builder) printf(format string, args ...any) {
	if b.err == nil {
		_, b.err = fmt.Fprintf(b.w, format, args...)
	}
}

// num formats a pixel coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// esc escapes text for XML character data and attribute values.
func esc(s string) string {
	var sb strings.Builder
	if err := xml.EscapeText(&sb, []byte(s)); err != nil {
		return "" // strings.Builder never fails
	}
	return sb.String()
}

// wrap splits text into lines of at most width characters, breaking at
// spaces (a word longer than width gets a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, w := range strings.Fields(text) {
		if line.Len() > 0 && len([]rune(line.String()))+1+len([]rune(w)) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(w)
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
