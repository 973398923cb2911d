package svg_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/internal/svg"
)

// element is a decoded SVG element: its name, attributes, text and children.
type element struct {
	name     string
	attrs    map[string]string
	text     string
	children []*element
}

// decode parses an SVG document with encoding/xml, failing on any error, and
// returns the root element.
func decode(t *testing.T, data []byte) *element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	var stack []*element
	var root *element
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG is not well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &element{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				parent := stack[len(stack)-1]
				parent.children = append(parent.children, e)
			} else {
				require.Nil(t, root, "more than one root element")
				root = e
				assert.Equal(t, "http://www.w3.org/2000/svg", tok.Name.Space)
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tok)
			}
		}
	}
	require.NotNil(t, root)
	require.Empty(t, stack, "unclosed elements")
	return root
}

// find returns every element below e (e included) that matches.
func (e *element) find(match func(*element) bool) []*element {
	var out []*element
	if match(e) {
		out = append(out, e)
	}
	for _, c := range e.children {
		out = append(out, c.find(match)...)
	}
	return out
}

func withClass(class string) func(*element) bool {
	return func(e *element) bool { return e.attrs["class"] == class }
}

func named(name string) func(*element) bool {
	return func(e *element) bool { return e.name == name }
}

func texts(es []*element) []string {
	var out []string
	for _, e := range es {
		for _, t := range e.find(named("text")) {
			out = append(out, t.text)
		}
	}
	return out
}

func sample() svg.Chart {
	return svg.Chart{
		Title:  "Calls <&> time",
		XLabel: "clients",
		YLabel: "write calls",
		Series: []svg.Series{
			{Name: "exponential", X: []float64{10, 20, 30}, Y: []float64{50, 160, 300}},
			{Name: "full jitter", X: []float64{10, 20, 30}, Y: []float64{38, 90, 150}, Markers: true, Dashed: true},
			{Name: "published", X: []float64{10}, Y: []float64{50.2}, NoLine: true},
		},
		Bands: []svg.Band{{X0: 10, X1: 15, Label: "down"}},
		Rules: []svg.Rule{{Y: 200, Label: "capacity 200/s"}},
	}
}

func write(t *testing.T, c svg.Chart) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, c.Write(&buf))
	return buf.Bytes()
}

func TestWriteIsWellFormedWithEverySeries(t *testing.T) {
	t.Parallel()
	root := decode(t, write(t, sample()))
	assert.Equal(t, "svg", root.name)
	assert.Equal(t, "800", root.attrs["width"])
	assert.Equal(t, "0 0 800 450", root.attrs["viewBox"])

	title := root.find(named("title"))
	require.Len(t, title, 1)
	assert.Equal(t, "Calls <&> time", title[0].text, "escaped and decoded back")

	series := root.find(withClass("series"))
	require.Len(t, series, 3)
	var names []string
	for _, s := range series {
		names = append(names, s.attrs["data-name"])
	}
	assert.Equal(t, []string{"exponential", "full jitter", "published"}, names)
	assert.Len(t, series[0].find(named("polyline")), 1)
	assert.Empty(t, series[0].find(named("circle")))
	assert.Len(t, series[1].find(named("polyline")), 1)
	assert.Empty(t, series[0].find(named("polyline"))[0].attrs["stroke-dasharray"])
	assert.Equal(t, "7 4", series[1].find(named("polyline"))[0].attrs["stroke-dasharray"])
	assert.Len(t, series[1].find(named("circle")), 3, "one marker a point")
	assert.Empty(t, series[2].find(named("polyline")), "NoLine draws no line")
	assert.Len(t, series[2].find(named("circle")), 1)

	legend := root.find(withClass("legend"))
	require.Len(t, legend, 1)
	assert.Equal(t, []string{"exponential", "full jitter", "published"}, texts(legend))

	assert.Equal(t, []string{"down"}, texts(root.find(withClass("band-labels"))))
	assert.Equal(t, []string{"capacity 200/s"}, texts(root.find(withClass("rule-labels"))))
	// Bands and rules are drawn under the data, their labels over it.
	var order []string
	for _, e := range root.children {
		if c := e.attrs["class"]; c != "" {
			order = append(order, c)
		}
	}
	assert.Equal(t, []string{"title", "bands", "grid", "axes", "tick-labels", "x-label", "y-label", "rules", "series", "series", "series", "band-labels", "rule-labels", "legend"}, order)
	assert.Equal(t, "clients", root.find(withClass("x-label"))[0].text)
	assert.Equal(t, "write calls", root.find(withClass("y-label"))[0].text)
}

// TestWriteTicks checks the axes: round ticks covering the data, from 0.
func TestWriteTicks(t *testing.T) {
	t.Parallel()
	root := decode(t, write(t, sample()))
	labels := texts(root.find(withClass("tick-labels")))
	assert.Equal(t, []string{
		"0", "5", "10", "15", "20", "25", "30", // x: 0 to 30 in steps of 5
		"0", "50", "100", "150", "200", "250", "300", // y: from 0, steps of 50
	}, labels)
}

func TestWriteLogAxis(t *testing.T) {
	t.Parallel()
	c := svg.Chart{
		Title: "log", LogY: true, YMin: 1, YMax: 1e6,
		Series: []svg.Series{{Name: "rate", X: []float64{0, 1, 2, 3, 4}, Y: []float64{0, 200, 20000, 0, 5}}},
	}
	root := decode(t, write(t, c))
	labels := texts(root.find(withClass("tick-labels")))
	assert.Subset(t, labels, []string{"1", "10", "100", "1000", "10k", "100k", "1M"})
	// A zero has no place on a log axis: it is not drawn, not made up as
	// the axis' bottom value, and the line breaks there. The lone 5 after
	// the second zero makes no line.
	lines := segments(t, root.find(withClass("series"))[0])
	require.Len(t, lines, 1)
	pts := lines[0]
	require.Len(t, pts, 2)
	assert.Greater(t, pts[0][1], pts[1][1], "200 is drawn below 20000")
}

// segments returns the points of each polyline of a series.
func segments(t *testing.T, series *element) [][][2]float64 {
	t.Helper()
	var out [][][2]float64
	for _, line := range series.find(named("polyline")) {
		out = append(out, parsePoints(t, line.attrs["points"]))
	}
	return out
}

// points returns the points of a series drawn as one polyline.
func points(t *testing.T, series *element) [][2]float64 {
	t.Helper()
	lines := segments(t, series)
	require.Len(t, lines, 1)
	return lines[0]
}

func parsePoints(t *testing.T, attr string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(attr) {
		x, y, ok := strings.Cut(p, ",")
		require.True(t, ok, "point %q", p)
		fx, err := strconv.ParseFloat(x, 64)
		require.NoError(t, err)
		fy, err := strconv.ParseFloat(y, 64)
		require.NoError(t, err)
		out = append(out, [2]float64{fx, fy})
	}
	return out
}

func TestWritePointsStayInThePlot(t *testing.T) {
	t.Parallel()
	c := sample()
	root := decode(t, write(t, c))
	for _, s := range root.find(withClass("series"))[:2] {
		pts := points(t, s)
		require.Len(t, pts, 3)
		for _, p := range pts {
			assert.GreaterOrEqual(t, p[0], 0.0)
			assert.LessOrEqual(t, p[0], 800.0)
			assert.GreaterOrEqual(t, p[1], 0.0)
			assert.LessOrEqual(t, p[1], 450.0)
		}
		assert.Less(t, pts[0][0], pts[2][0], "x grows to the right")
		assert.Greater(t, pts[0][1], pts[2][1], "y grows upwards")
	}
}

func TestWriteBreaksTheLineAtNonFiniteValues(t *testing.T) {
	t.Parallel()
	c := svg.Chart{Series: []svg.Series{{Name: "s", X: []float64{1, 2, 3, 4, 5, 6}, Y: []float64{1, 2, math.NaN(), math.Inf(1), 2, 3}}}}
	root := decode(t, write(t, c))
	lines := segments(t, root.find(withClass("series"))[0])
	require.Len(t, lines, 2, "one line each side of the gap, none across it")
	assert.Len(t, lines[0], 2)
	assert.Len(t, lines[1], 2)
	assert.Less(t, lines[0][1][0], lines[1][0][0])
}

func TestWriteSubtitleWrapsAndMovesThePlotDown(t *testing.T) {
	t.Parallel()
	plain := sample()
	c := sample()
	c.Subtitle = strings.Repeat("jitter spreads the retries ", 10) // 270 characters
	root := decode(t, write(t, c))
	lines := root.find(withClass("subtitle"))
	require.Len(t, lines, 3, "270 characters at about 96 a line")
	var words []string
	for _, l := range lines {
		assert.LessOrEqual(t, len(l.text), 96)
		words = append(words, strings.Fields(l.text)...)
	}
	assert.Equal(t, strings.Fields(c.Subtitle), words, "every word, in order")
	// The plot starts below the subtitle: the top of the highest point moves down.
	top := func(c svg.Chart) float64 {
		return points(t, decode(t, write(t, c)).find(withClass("series"))[0])[2][1]
	}
	assert.Greater(t, top(c), top(plain))
	assert.Empty(t, decode(t, write(t, plain)).find(withClass("subtitle")))
}

func TestWriteNoteAtTheFootTakesItsHeightFromThePlot(t *testing.T) {
	t.Parallel()
	plain := sample()
	c := sample()
	c.Note = strings.Repeat("as given: the policy under test ", 8) // 256 characters
	root := decode(t, write(t, c))
	lines := root.find(withClass("note"))
	require.Len(t, lines, 3, "256 characters at about 104 a line")
	var words []string
	last := 0.0
	for _, l := range lines {
		assert.LessOrEqual(t, len(l.text), 104)
		words = append(words, strings.Fields(l.text)...)
		y, err := strconv.ParseFloat(l.attrs["y"], 64)
		require.NoError(t, err)
		assert.Greater(t, y, last, "lines in order, downwards")
		assert.LessOrEqual(t, y, 450.0-8, "inside the chart")
		last = y
	}
	assert.Equal(t, strings.Fields(c.Note), words, "every word, in order")
	// The plot ends above the note: the lowest point moves up.
	bottom := func(c svg.Chart) float64 {
		return points(t, decode(t, write(t, c)).find(withClass("series"))[1])[0][1]
	}
	assert.Less(t, bottom(c), bottom(plain))
	assert.Empty(t, decode(t, write(t, plain)).find(withClass("note")))
}

func TestWriteHeadroom(t *testing.T) {
	t.Parallel()
	c := sample() // y data and rules up to 300
	c.Headroom = 0.1
	labels := texts(decode(t, write(t, c)).find(withClass("tick-labels")))
	assert.Equal(t, "400", labels[len(labels)-1], "300 + 10% is 330, rounded up to a tick of 100")
	c.Headroom = 0
	labels = texts(decode(t, write(t, c)).find(withClass("tick-labels")))
	assert.Equal(t, "300", labels[len(labels)-1])
}

func TestWriteThousandsOnOneAxisReadAlike(t *testing.T) {
	t.Parallel()
	c := svg.Chart{Series: []svg.Series{{Name: "s", X: []float64{0, 1}, Y: []float64{0, 11000}}}}
	labels := texts(decode(t, write(t, c)).find(withClass("tick-labels")))
	assert.Equal(t, []string{"0", "2k", "4k", "6k", "8k", "10k", "12k"}, labels[len(labels)-7:])
	c.Series[0].Y[1] = 8000 // below 10,000: plain numbers
	labels = texts(decode(t, write(t, c)).find(withClass("tick-labels")))
	assert.Equal(t, []string{"0", "2000", "4000", "6000", "8000"}, labels[len(labels)-5:])
}

func TestWriteRuleColor(t *testing.T) {
	t.Parallel()
	c := sample()
	c.Rules = append(c.Rules, svg.Rule{Y: 100, Label: "limiter", Color: "#0000FF"})
	rules := decode(t, write(t, c)).find(withClass("rules"))[0]
	lines := rules.find(named("line"))
	require.Len(t, lines, 2)
	assert.Equal(t, "#B00000", lines[0].attrs["stroke"], "the default")
	assert.Equal(t, "#0000FF", lines[1].attrs["stroke"])
}

func TestWriteEmptyChart(t *testing.T) {
	t.Parallel()
	root := decode(t, write(t, svg.Chart{Title: "nothing"}))
	assert.Empty(t, root.find(withClass("series")))
	assert.Empty(t, root.find(withClass("legend")))
}

func TestWriteRejectsMismatchedSeries(t *testing.T) {
	t.Parallel()
	c := svg.Chart{Series: []svg.Series{{Name: "bad", X: []float64{1, 2}, Y: []float64{1}}}}
	err := c.Write(io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `svg: series "bad"`)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteReportsWriterErrors(t *testing.T) {
	t.Parallel()
	err := sample().Write(failingWriter{})
	assert.EqualError(t, err, "disk full")
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "chart.svg")
	require.NoError(t, sample().WriteFile(name))
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	decode(t, data)
	assert.Error(t, sample().WriteFile(filepath.Join(t.TempDir(), "missing", "chart.svg")))
}
